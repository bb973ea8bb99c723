"""``icegroup dead-letters``: a group's poison shards, or with ``--rows`` the rows isolated from them."""

from __future__ import annotations

import argparse
import json

from icegroup.dagster_project.cli.arguments import Commands, command, group_argument, json_option
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.output import dumps
from icegroup.dagster_project.cli.support import pick, table
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import snapshot_range


def add_dead_letters(sub: Commands) -> None:
    """The ``dead-letters`` command's arguments."""
    letters = command(
        sub, "dead-letters", "poison shards (parked, stopped, re-driven), or with --rows the rows isolated from them",
        group_argument(), json_option(),
    )  # fmt: skip
    letters.add_argument(
        "--rows", action="store_true", help="the rows isolated from their shards (on_poison: isolate), with errors"
    )
    letters.set_defaults(run=cmd_dead_letters)


def cmd_dead_letters(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup dead-letters GROUP``: each poison shard's latest state."""
    from icegroup.iceberg.store.dead_letters import latest
    from icegroup.iceberg.store.dead_rows import ISOLATED, committed_whole, latest_rows

    group = pick(groups, args.group, args.groups)
    if args.rows:
        return print_dead_rows(lakehouse, group, args.json)
    letters = list(latest(lakehouse.catalog(), group.name).values())
    if args.json:
        print(dumps([
            {"shard": d.shard_id, "stream": d.stream, "state": d.action, "from_snapshot": d.from_snapshot,
             "to_snapshot": d.to_snapshot, "lease_id": d.lease_id, "attempt": d.attempt, "error": d.error}
            for d in letters
        ]))  # fmt: skip
        return Exit.OK
    rows: list[dict[str, object]] = [
        {
            "shard": d.shard_id,
            "stream": d.stream,
            "state": d.action,
            "source_snapshots": snapshot_range(d.from_snapshot, d.to_snapshot),
            "lease": f"{d.lease_id}#{d.attempt}",
            "error": d.error,
        }
        for d in letters
    ]
    isolated = list(latest_rows(lakehouse.catalog(), group.name).values())
    if rows or not isolated:
        print(table(rows, ["shard", "stream", "state", "source_snapshots", "lease", "error"]))
    if isolated:
        behind = committed_whole(lakehouse.catalog(), group)
        still = sum(1 for row in isolated if row.action == ISOLATED) - len(behind)
        print(f"{len(isolated)} rows isolated from their shards, {still} not re-driven: `icegroup dead-letters "
              f"{group.name} --rows`")  # fmt: skip
        if behind:
            print(f"{len(behind)} more were committed with their shard whole after a crash: `icegroup redrive "
                  f"{group.name} --execute` marks them")  # fmt: skip
    return Exit.OK


def print_dead_rows(lakehouse: LakehouseConfig, group: GroupConfig, as_json: bool) -> int:
    """``icegroup dead-letters GROUP --rows``: each isolated row's latest state, its error and the row itself."""
    from icegroup.iceberg.store.dead_rows import latest_rows

    rows = sorted(latest_rows(lakehouse.catalog(), group.name).values(), key=lambda r: (r.at_ms, r.file, r.pos))
    if as_json:
        print(dumps([{**row.__dict__, "row": json.loads(row.row)} for row in rows]))
        return Exit.OK
    print(table([
        {"shard": r.shard_id, "stream": r.stream, "state": r.action, "file": r.file.rsplit("/", 1)[-1], "pos": r.pos,
         "sink_snapshot": r.sink_snapshot, "error": r.error, "row": r.row}
        for r in rows
    ], ["shard", "stream", "state", "file", "pos", "sink_snapshot", "error", "row"]))  # fmt: skip
    return Exit.OK
