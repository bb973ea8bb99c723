"""Where a command's two configs come from: the search of ``iceberg/config/search.py``, then loading.

Every command but ``init`` goes through ``load_configs``, so each finds the lake the same way and
none creates one: a local catalog that does not exist yet is an error naming the fix.
"""

from __future__ import annotations

import argparse
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from icegroup.dagster_project.group_files import load_checked_groups
from icegroup.dagster_project.window_start import resolve_window_starts
from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.config.search import Places, find_groups, find_lakehouse
from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import GroupConfig


def load_configs(args: argparse.Namespace) -> tuple[LakehouseConfig, dict[str, GroupConfig]]:
    """The lakehouse and the groups this command runs on; ``args.lakehouse``/``args.groups`` become the files found.

    Each group's first window is settled here as the code location settles it (``window_start.py``),
    so the command and the Dagster UI agree on which windows exist.

    ``args.lakehouse`` is handed on to the Dagster runs the command starts, so it must be the file
    the search settled on (``None`` for a local lake, which the runs find the same way).
    """
    places = Places(cwd=Path.cwd(), home=Path.home(), env=os.environ)
    found = find_lakehouse(args.lakehouse, places)
    args.lakehouse = found.file
    env = dict(os.environ)
    if found.lake_home is not None:
        env["ICEGROUP_HOME"] = str(found.lake_home)
    lakehouse = load_lakehouse(found.file, env=env)
    args.groups = find_groups(args.groups, places).file
    groups = load_checked_groups(args.groups)
    missing = lakehouse.missing_lake()
    if missing is not None:
        raise ConfigError(f"{missing} (lakehouse config from {found.how})")
    return lakehouse, resolve_window_starts(groups, lambda: lakehouse, strict=True)


def package_version() -> str:
    """The installed package's version, as ``icegroup --version`` prints it."""
    try:
        return version("icegroup")
    except PackageNotFoundError:
        return "unknown (not installed; run `pip install -e .` or `make venv`)"
