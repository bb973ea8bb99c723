#!/usr/bin/env bash
# Creates the virtualenv with exactly the tested versions (requirements.lock), then icegroup itself, editable.
# Usage: install_venv.sh PYTHON VENV [PYSPARK]: PYSPARK (e.g. 4.0.5) replaces the lock's pyspark, for the
# matrix tier's other Spark (make test-matrix); everything else stays as the lock has it.
# uv installs from the lock: it is fast, it removes what the lock does not list, and its cache makes a second
# virtualenv (the wheel test's) cheap. pyproject.toml keeps the ranges a user's install resolves within.
# Every module is compiled to bytecode as it installs, as pip does and uv by default does not: without it each
# process compiled the sources it imported (again at every start where PYTHONDONTWRITEBYTECODE is set), and an
# idle `icegroup consume` took 3.9 s, not 1.5 s.
set -euo pipefail
python=${1:-python3}
venv=${2:-.venv}
pyspark=${3:-}
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "icegroup needs Python 3.11 (found $("$python" --version 2>&1)); set PYTHON=python3.11" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
uv_version=$(sed -n 's/^uv==//p' requirements.lock)
"$venv/bin/python" -m pip install -q "uv==$uv_version"
lock=requirements.lock
if [ -n "$pyspark" ]; then
  lock="$venv/requirements-pyspark-$pyspark.txt"
  sed "s/^pyspark==.*/pyspark==$pyspark/" requirements.lock >"$lock"
fi
"$venv/bin/uv" pip sync -q --compile-bytecode --python "$venv/bin/python" "$lock"
bash infra/package_links.sh
"$venv/bin/uv" pip install -q --python "$venv/bin/python" --no-deps -e .
# `source .venv/bin/activate` then points the icegroup command at the checkout's demo lake, groups and instance.
activate="$venv/bin/activate"
if ! grep -q "icegroup checkout" "$activate"; then
  checkout=$(pwd)
  cat >>"$activate" <<EOF
# icegroup checkout: the icegroup command on the demo's lake, groups and Dagster instance (make demo, make ui)
export ICEGROUP_HOME="$checkout" ICEGROUP_GROUPS="$checkout/dagster_project/groups.yaml" DAGSTER_HOME="$checkout/.dagster"
EOF
fi
