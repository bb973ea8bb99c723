"""``icegroup lineage``: where a group's output came from, and what a source file or snapshot fed.

One question per call, as text or ``--json``. Backwards: ``--sink-snapshot``, ``--window`` or
``--row``. Forwards: ``--source-file``, ``--source-snapshot`` or ``--source-row-id``. ``--through`` follows the answer
across chained groups. The answers come from the lineage tables and the sink's newest commits
(``iceberg/lineage.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icegroup.dagster_project.cli.arguments import Commands, command, group_argument, json_option
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.output import dumps, text
from icegroup.dagster_project.cli.support import pick, table
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.protocol.shards import parse_window_label, snapshot_range

if TYPE_CHECKING:
    from icegroup.iceberg.lineage import Answer

QUESTIONS = ("sink_snapshot", "window", "row", "source_file", "source_snapshot", "source_row_id")


def add_lineage(sub: Commands) -> None:
    """The ``lineage`` command's arguments: exactly one question."""
    lineage = command(
        sub, "lineage",
        "where output came from (--sink-snapshot, --window, --row) "
        "or what input fed (--source-file, --source-snapshot, --source-row-id)",
        group_argument(), json_option(),
    )  # fmt: skip
    lineage.add_argument("--sink-snapshot", type=int, help="backwards: the shards and source files of a sink commit")
    lineage.add_argument("--window", help="backwards: every shard of a replay window (a partition key)")
    lineage.add_argument("--row", help='backwards: sink rows matching a filter on sink columns, like "id = 42"')
    lineage.add_argument(
        "--source-file",
        help="forwards: the sink snapshots, windows and rows a source file fed (/path, file:/path or file:///path)",
    )
    lineage.add_argument("--source-snapshot", type=int, help="forwards: what the files of a source snapshot fed")
    lineage.add_argument(
        "--source-row-id",
        type=row_ids,
        help="forwards: the sink rows made from source rows, by their _row_id (a format-v3 source): 17 or 17,18",
    )
    lineage.add_argument(
        "--through",
        action="store_true",
        help="follow the answer across chained groups, to the first source or the last sink",
    )
    lineage.set_defaults(run=cmd_lineage)


def cmd_lineage(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup lineage GROUP --<question> VALUE [--through] [--json]``."""
    from icegroup.iceberg.lineage import by_sink_snapshot, by_source_file, by_source_snapshot, by_window, name_sink_rows
    from icegroup.iceberg.lineage_chain import trace_back, trace_forward
    from icegroup.iceberg.lineage_rows import by_rows, by_source_rows

    group = pick(groups, args.group, args.groups)
    asked = [q for q in QUESTIONS if getattr(args, q) is not None]
    if len(asked) != 1:
        raise UsageError(
            "lineage: ask one question: --sink-snapshot S, --window W or --row FILTER (backwards), "
            "--source-file PATH, --source-snapshot S or --source-row-id ID[,ID...] (forwards)"
        )
    catalog = lakehouse.catalog()
    question = asked[0]
    backwards = question in ("sink_snapshot", "window", "row")
    if question == "sink_snapshot":
        found = by_sink_snapshot(catalog, group, args.sink_snapshot)
    elif question == "window":
        try:
            parse_window_label(args.window, group.replay_window)
        except ValueError as exc:
            raise UsageError(f"--window: {exc} (group {group.name!r} has {group.replay_window} windows)") from None
        found = by_window(catalog, group, args.window)
    elif question == "row":
        found = by_rows(catalog, group, args.row)
    elif question == "source_file":
        found = by_source_file(catalog, group, absolute_if_relative(args.source_file))
    elif question == "source_row_id":
        found = by_source_rows(catalog, group, args.source_row_id)
    else:
        found = by_source_snapshot(catalog, group, args.source_snapshot)
    if args.through:
        (trace_back if backwards else trace_forward)(catalog, groups, group, found)
    name_sink_rows(catalog, groups, found)
    print(dumps(as_json(found)) if args.json else as_text(found))
    return Exit.OK


def shards_of(found: list[LineageEntry]) -> list[list[LineageEntry]]:
    """Entries grouped by shard and sink snapshot, oldest commit first."""
    grouped: dict[tuple[str, int], list[LineageEntry]] = {}
    for entry in sorted(found, key=lambda e: (e.committed_at_ms, e.shard_id)):
        grouped.setdefault((entry.shard_id, entry.sink_snapshot), []).append(entry)
    return list(grouped.values())


def shard_json(files: list[LineageEntry], sink_rows: dict[str, int]) -> dict[str, Any]:
    """One shard of an answer: where it came from, where it went, and its source files."""
    first = files[0]
    return {
        "shard": first.shard_id,
        "window": first.window,
        "stream": first.stream,
        "source_range": snapshot_range(first.from_snapshot, first.to_snapshot),
        "source_rows": first.shard_rows,
        "sink_snapshot": first.sink_snapshot,
        "kind": first.kind,
        "generation": first.generation,
        "lease_id": first.lease_id,
        "attempt": first.attempt,
        "epoch": first.epoch,
        "run_id": first.run_id,
        "config_hash": first.config_hash,
        "sink_rows_now": sink_rows.get(first.shard_id),
        "files": [
            {
                "path": e.source_file,
                "source_snapshot": e.source_snapshot,
                "records": e.file_records,
                "bytes": e.file_bytes,
            }
            for e in files
            if e.source_file is not None
        ],
    }


def as_json(found: Answer) -> dict[str, Any]:
    """An answer, its shards and its hops across chained groups."""
    shards = shards_of(found.found)
    return {
        "group": found.group,
        "question": found.question,
        "recorded_through_sink_snapshot": found.recorded_through,
        "unrecorded_sink_commits": found.unrecorded,
        "note": found.note or None,
        "shards": [shard_json(files, found.sink_rows) for files in shards],
        "sink_filter": found.sink_filter,
        "source_filter": found.source_filter,
        "hops": [as_json(hop) for hop in found.hops],
    }


def as_text(found: Answer) -> str:
    """An answer as a person reads it: a shard table, a source-file table, then each hop."""
    lines = [f"group {found.group}: {found.question}"]
    if found.unrecorded:
        lines.append(
            f"  lineage is recorded through sink snapshot {text(found.recorded_through)}; {found.unrecorded} later "
            "commits of the group are answered from the commits themselves (the Leader records them at its next tick)"
        )
    if found.note:
        lines.append(f"  {found.note}")
    shards = [shard_json(files, found.sink_rows) for files in shards_of(found.found)]
    if not shards:
        lines.append("  no lineage entries match")
    else:
        for shard in shards:
            shard["lease"] = f"{shard['lease_id']}#{shard['attempt']}"
        columns = ["shard", "window", "stream", "source_range", "sink_snapshot", "kind", "lease", "epoch", "run_id"]
        if found.sink_rows:
            columns.append("sink_rows_now")
        lines += ["", table(shards, columns)]
        files = [{**f, "shard": s["shard"]} for s in shards for f in s["files"]]
        file_columns = ["path", "source_snapshot", "records", "bytes", "shard"]
        lines += ["", f"source files ({len(files)}):", table(files, file_columns)]
        lines += ["", f"its rows in the sink: {found.sink_filter}"]
        if found.source_filter is not None:
            lines.append(f"its rows in the source: {found.source_filter}")
    for hop in found.hops:
        lines += ["", as_text(hop)]
    return "\n".join(lines)


def row_ids(value: str) -> list[int]:
    """``--source-row-id``'s value: source row ids, comma-separated."""
    try:
        return [int(part) for part in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a list of row ids: give whole numbers, comma-separated, like 17 or 17,18"
        ) from None


def absolute_if_relative(location: str) -> str:
    """A relative local path made absolute from the current folder, as a shell user means it; others unchanged.

    Table metadata holds only absolute locations, so ``.lake/warehouse/...`` pasted from ``ls`` would
    otherwise match nothing.
    """
    if ":" in location.split("/", 1)[0] or location.startswith("/"):
        return location
    return str(Path(location).resolve())
