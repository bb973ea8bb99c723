#!/usr/bin/env bash
# The import name `icegroup`: build/python/icegroup links to the four top-level folders, so what installs (the
# wheel, the editable install) is icegroup.iceberg, icegroup.spark_jobs, icegroup.dagster_project and
# icegroup.infra, and never claims a generic top-level name such as `iceberg` or `dagster_project`.
# pyproject.toml builds from this folder; mypy and the import contracts read it too. Run from the checkout.
set -euo pipefail
pkg=build/python/icegroup
mkdir -p "$pkg"
for part in iceberg spark_jobs dagster_project infra; do
  ln -sfn "../../../$part" "$pkg/$part"
done
printf '"""icegroup: consumer groups for Apache Iceberg tables."""\n' >"$pkg/__init__.py"
