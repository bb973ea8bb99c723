"""``icegroup redrive``, ``migrate`` and ``delete``: verbs that change state without a Dagster run.

Like every verb that rewrites or removes state (``PREVIEW_RULE``), each shows what it would do and
changes nothing unless ``--execute`` is given.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from icegroup.dagster_project.cli.arguments import (
    PREVIEW_RULE,
    Commands,
    command,
    execute_option,
    group_argument,
    json_option,
)
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.logfile import log_line, run_output
from icegroup.dagster_project.cli.output import dumps, text
from icegroup.dagster_project.cli.support import dagster_home, pick, table
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.tables import load_optional

if TYPE_CHECKING:
    from icegroup.spark_jobs.redrive_rows import RowRedrive


def add_verbs(sub: Commands) -> None:
    """The arguments of ``redrive``, ``migrate`` and ``delete``."""
    group, as_json, execute = group_argument(), json_option(), execute_option()
    again = command(
        sub, "redrive",
        "release parked or stopped shards so the Leader grants them again, and commit isolated rows (with "
        f"Spark) after a fix; {PREVIEW_RULE}",
        group, as_json, execute,
    )  # fmt: skip
    again.add_argument("--shard", action="append", help="only this shard (repeatable); default: all open ones")
    again.set_defaults(run=cmd_redrive)
    migrate = command(
        sub, "migrate", f"give sink rows written before the window column their window; {PREVIEW_RULE}", group, execute
    )
    migrate.set_defaults(run=cmd_migrate)
    remove = command(
        sub, "delete",
        "remove a group's state (registry, lineage, dead letters, heartbeats, its fences, registration, branch), "
        f"never its sink's data; {PREVIEW_RULE}",
        group, as_json, execute,
    )  # fmt: skip
    remove.set_defaults(run=cmd_delete)


def cmd_redrive(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup redrive GROUP [--shard ID ...] [--execute]``: poison shards granted again, isolated rows committed.

    Parked or stopped shards are released for the next Leader tick. Rows isolated from their shard
    (``on_poison: isolate``) are read again, transformed and committed here, with Spark, exactly once.
    """
    from icegroup.iceberg.store.dead_letters import latest, open_letters, redrive
    from icegroup.iceberg.store.dead_rows import (
        committed_whole,
        mark_redriven,
        mark_taken_in,
        pending_redrives,
        taken_in_unmarked,
    )

    group = pick(groups, args.group, args.groups)
    catalog = lakehouse.catalog()
    open_now = open_letters(catalog, group.name)
    wanted = set(args.shard or [])
    rows_now = [s for s in pending_redrives(catalog, group) if not wanted or s.shard_id in wanted]
    taken = [s for s in taken_in_unmarked(catalog, group) if not wanted or s.shard_id in wanted]
    whole = [(row, at) for row, at in committed_whole(catalog, group) if not wanted or row.shard_id in wanted]
    unknown = sorted(
        wanted - set(open_now) - {s.shard_id for s in [*rows_now, *taken]} - {r.shard_id for r, _ in whole}
    )
    if unknown:
        raise UsageError(
            f"shard(s) {unknown} of group {group.name!r} are not parked or stopped, and have no isolated rows to "
            f"re-drive; see `icegroup dead-letters {group.name}`"
        )
    if args.execute:
        chosen = redrive(catalog, group.name, args.shard)
        for resolved in taken:  # a replay or an earlier re-drive took them in: only the record is behind
            if resolved.redriven_in is not None:
                mark_taken_in(catalog, group.name, resolved, resolved.redriven_in)
        for at in sorted({at for _, at in whole}):  # their shard committed them whole: only the record is behind
            mark_redriven(catalog, group.name, [row for row, there in whole if there == at], at)
        redriven = execute_row_redrives(lakehouse, group, wanted, args.verbose) if rows_now else []
        rows = [(r.shard_id, r.rows, f" (sink snapshot {r.sink_snapshot})") for r in redriven]
    else:
        letters = latest(catalog, group.name)
        chosen = [letters[s] for s in sorted(open_now) if not wanted or s in wanted]
        rows = [(s.shard_id, s.rows, "") for s in rows_now]
    if args.json:
        shards = [{"shard": d.shard_id, "stream": d.stream} for d in chosen]
        isolated = [{"shard": shard, "rows": count} for shard, count, _ in rows]
        print(dumps({"group": group.name, "executed": args.execute, "shards": shards, "isolated_rows": isolated}))
        return Exit.OK
    verb = "re-driven" if args.execute else "would re-drive"
    for letter in chosen:
        print(f"{verb}: shard {letter.shard_id} (stream {letter.stream})")
    for shard, count, where in rows:
        print(f"{verb}: {count} isolated rows of shard {shard}{where}")
    for shard_id, at in sorted({(row.shard_id, at) for row, at in whole}):
        count = sum(1 for row, there in whole if row.shard_id == shard_id and there == at)
        print(f"{'marked' if args.execute else 'would mark'}: the {count} isolated rows of shard {shard_id} in the "
              f"sink, committed with their shard whole by sink snapshot {at} (after a crash)")  # fmt: skip
    for found in taken:
        done = "marked" if args.execute else "would mark"
        print(f"{done}: the {found.rows} isolated rows of shard {found.shard_id} re-driven, taken in by sink snapshot "
              f"{found.redriven_in} (a replay of their window, or a re-drive)")  # fmt: skip
    total = sum(count for _, count, _ in rows)
    if not args.execute:
        parts = [f"{len(chosen)} shard(s)"] if chosen or not rows else []
        parts += [f"{total} isolated row(s)"] if rows else []
        print(f"preview: nothing changed; `icegroup redrive {group.name} --execute` re-drives {' and '.join(parts)}")
    elif rows:
        also = f"; {len(chosen)} shard(s) re-driven, the next Leader tick grants them again" if chosen else ""
        print(f"{total} isolated row(s) committed to {group.sink}, exactly once{also}")
    elif chosen:
        print(f"{len(chosen)} shard(s) re-driven; the next Leader tick grants them again")
    elif not taken and not whole:
        print(f"group {group.name}: nothing to re-drive: no shard is parked or stopped, and no isolated row waits")
    return Exit.OK


def execute_row_redrives(
    lakehouse: LakehouseConfig, group: GroupConfig, shards: set[str], verbose: bool
) -> list[RowRedrive]:
    """Commit the group's isolated rows with Spark (``spark_jobs/redrive_rows.py``); its output goes to a log file."""
    from icegroup.spark_jobs.redrive_rows import redrive_rows  # Spark loads only for the commands that use it
    from icegroup.spark_jobs.session import get_session

    with run_output(dagster_home(), "redrive", verbose):
        return redrive_rows(get_session(lakehouse), lakehouse, group, f"redrive-{int(time.time())}", log_line, shards)


def cmd_migrate(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup migrate GROUP [--execute]``: rewrite the sink's rows that have no window, in one replace commit."""
    group = pick(groups, args.group, args.groups)
    if not args.execute:
        print(f"group {group.name}: {migrate_preview(lakehouse, group)}")
        return Exit.OK
    from icegroup.spark_jobs.session import get_session
    from icegroup.spark_jobs.sink.migrate import migrate_sink  # Spark loads only for the commands that use it

    with run_output(dagster_home(), "migrate", args.verbose):  # Spark's own output goes to the log file
        migrated = migrate_sink(get_session(lakehouse), lakehouse, group, progress=print)
    print(f"group {group.name}: {migrated.line()}")
    return Exit.OK


def migrate_preview(lakehouse: LakehouseConfig, group: GroupConfig) -> str:
    """What ``migrate --execute`` would rewrite, or the refusal it would make: the same history is asked."""
    from icegroup.iceberg.store.sink_windows import lost_windows, shard_windows, windowless, windowless_shards

    sink = load_optional(lakehouse.catalog(), group.sink)
    if sink is None or sink.current_snapshot() is None:
        return f"the sink {group.sink} holds no rows; nothing to migrate"
    files = list(sink.scan(row_filter=windowless(sink)).plan_files())
    if not files:
        return "every sink row has its window; nothing to migrate"
    shards = windowless_shards(sink)
    windows = shard_windows(sink, group.name, group.replay_window)
    unknown = sorted({str(s) for s in shards if s not in windows})
    if unknown:
        lost = sum(1 for s in shards if str(s) in unknown)
        return (
            f"preview: nothing changed; `icegroup migrate {group.name} --execute` would refuse: {lost} rows of "
            f"{len(shards)} with no window; {lost_windows(group.sink, unknown)}"
        )
    records = sum(t.file.record_count for t in files)
    return (
        f"preview: nothing changed; {len(shards)} rows with no window in {len(files)} files ({records} rows) of "
        f"{group.sink}; `icegroup migrate {group.name} --execute` rewrites those files with their windows"
    )


def cmd_delete(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup delete GROUP [--execute]``: what the group keeps, then, with ``--execute``, all of it removed."""
    from icegroup.iceberg.store.group_delete import check_deletable, delete_group, footprint, leases_in_flight

    group = pick(groups, args.group, args.groups)
    catalog = lakehouse.catalog()
    found = footprint(catalog, group.name, group.source, group.sink)
    now_ms = int(time.time() * 1000)
    if args.execute and not found.empty():
        check_deletable(found, now_ms)
        delete_group(catalog, found)
    report = {
        "group": group.name,
        "executed": bool(args.execute),
        "tables": found.tables,
        "sink_properties": found.sink_properties,
        "source_registration": found.registration,
        "source_branch": found.source_branch,
        "heartbeats": found.heartbeats,
        "leases_in_flight": leases_in_flight(found, now_ms),
        "sink": group.sink,
        "deleted_at_sink_snapshot": None if found.empty() else found.sink_snapshot,
    }
    if args.json:
        print(dumps(report))
        return Exit.OK
    if found.empty():
        print(f"group {group.name}: keeps no state; nothing to delete")
        return Exit.OK
    rows: list[dict[str, object]] = [{"kind": "table", "name": name} for name in found.tables]
    rows += [{"kind": f"property of {group.sink}", "name": key} for key in found.sink_properties]
    rows += [{"kind": f"property of {group.source}", "name": key} for key in [found.registration] if key]
    rows += [{"kind": f"branch of {group.source}", "name": ref} for ref in [found.source_branch] if ref]
    rows += [{"kind": "heartbeat", "name": holder} for holder in found.heartbeats]
    print(table(rows, ["kind", "name"]))
    flight = leases_in_flight(found, now_ms)
    if args.execute:
        print(
            f"deleted group {group.name}'s state; the sink {group.sink} and its rows are untouched. The next consume "
            "starts the group anew from its start config"
        )
    else:
        print(
            f"preview: nothing changed; `icegroup delete {group.name} --execute` removes the above; the sink "
            f"{group.sink} and its rows stay. Leases in flight: {text(flight)}"
        )
    return Exit.OK
