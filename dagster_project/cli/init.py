"""``icegroup init``: a starter lake in the current folder, so a first group needs no config written by hand.

It writes ``lakehouse.yaml`` (a SQLite catalog and a warehouse under ``./.lake``, paths relative to
the file) and a ``groups.yaml`` with one commented example, then creates the empty catalog. It
never overwrites: a folder that already has either file is left as it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from icegroup.dagster_project.cli.arguments import Commands, command
from icegroup.dagster_project.cli.exits import Exit
from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.config.search import GROUPS_FILE, LAKEHOUSE_FILE, LOCAL_CATALOG, LOCAL_LAKE
from icegroup.iceberg.errors import ConfigError

LAKEHOUSE_TEXT = f"""\
# icegroup's lakehouse config: where the catalog and the warehouse are.
# Every field: the configuration reference. A REST catalog: replace catalog_uri/warehouse with `rest:`.
catalog_name: lake
catalog_uri: sqlite:///{LOCAL_LAKE}/{LOCAL_CATALOG}
warehouse: {LOCAL_LAKE}/warehouse
"""

GROUPS_TEXT = """\
# icegroup's consumer groups. Every field: the configuration reference.
groups: []
# groups:
#   - name: orders_clean
#     source: shop.orders            # the Iceberg table to consume
#     sink: shop.orders_clean        # the table icegroup writes, exactly once
#     transform: my_module:clean     # a function (DataFrame) -> DataFrame; omit to copy rows as they are
"""


def add_init(sub: Commands) -> None:
    """The ``init`` command's arguments."""
    init = command(
        sub, "init", "start a local lake here: write lakehouse.yaml and groups.yaml, create an empty catalog"
    )
    init.add_argument("--folder", default=".", help="where to write them (default: the current folder)")
    init.set_defaults(run=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    """``icegroup init``: write whichever of the two files is missing, then open (create) the catalog."""
    folder = Path(args.folder).resolve()
    if not folder.is_dir():
        raise ConfigError(f"--folder: {folder} is not a folder; create it first")
    written = []
    for name, text in ((LAKEHOUSE_FILE, LAKEHOUSE_TEXT), (GROUPS_FILE, GROUPS_TEXT)):
        path = folder / name
        if path.exists():
            print(f"kept {path} (it exists)")
            continue
        path.write_text(text)
        written.append(path)
        print(f"wrote {path}")
    lakehouse = load_lakehouse(folder / LAKEHOUSE_FILE, env={})
    lakehouse.catalog()
    print(f"catalog {lakehouse.catalog_name!r} at {lakehouse.catalog_uri}, warehouse {lakehouse.warehouse_uri}")
    print("next: create a table, add a group to groups.yaml, then `icegroup consume GROUP --until-caught-up`")
    return Exit.OK
