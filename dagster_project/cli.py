"""The ``icegroup`` command: list, describe and consume groups, and look at or re-drive poison shards.

Every command shares one error handler: any ``IcegroupError`` is printed as
``icegroup: error: <message and remedy>`` and the command exits 2.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from dagster_project.definitions import ENV_GROUPS, build_definitions, groups_path, load_checked_groups
from iceberg.dead_letters import latest, open_letters, redrive
from iceberg.describe import GroupView, describe_group
from iceberg.errors import IcegroupError, NotCaughtUp, UsageError
from iceberg.groups import GroupConfig
from iceberg.lakehouse import ENV_CONFIG, ENV_HOME, LakehouseConfig, load_lakehouse
from iceberg.protocol.shards import snapshot_range

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_ERROR = 2
EXIT_NOT_CAUGHT_UP = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``icegroup`` console script."""
    args = parser().parse_args(argv)
    args.lakehouse = Path(args.lakehouse).resolve() if args.lakehouse else None
    args.groups = groups_path(args.groups)
    try:
        lakehouse = load_lakehouse(args.lakehouse)
        groups = load_checked_groups(args.groups)
        result: int = args.run(args, lakehouse, groups)
        return result
    except NotCaughtUp as exc:
        print(f"icegroup: not caught up: {exc}", file=sys.stderr)
        return EXIT_NOT_CAUGHT_UP
    except IcegroupError as exc:
        print(f"icegroup: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(
        prog="icegroup",
        description="Consumer groups for Apache Iceberg tables.",
        epilog="exit codes: 0 done; 1 a run failed unexpectedly (the traceback and the Dagster run say why); "
        "2 an error icegroup names, with its remedy (bad input, a stopped group, a refused commit); "
        "3 consume --until-caught-up stopped without catching up (it names the leases held elsewhere)",
    )
    top.add_argument("--groups", help=f"group definitions YAML (default: ${ENV_GROUPS} or the packaged one)")
    top.add_argument("--lakehouse", help=f"lakehouse config YAML (default: ${ENV_CONFIG} or .lake/ in ${ENV_HOME})")
    sub = top.add_subparsers(required=True, metavar="COMMAND")

    listing = sub.add_parser("list", help="list the groups and their lag")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=cmd_list)

    describe = sub.add_parser("describe", help="per stream: position, head, lag, leases in flight")
    describe.add_argument("group")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(run=cmd_describe)

    consume = sub.add_parser("consume", help="run the Leader and Borrowers headless, as a Dagster run")
    consume.add_argument("group")
    consume.add_argument("--until-caught-up", action="store_true", help="repeat until the source head is committed")
    consume.add_argument("--max-wait", type=float, default=600.0, help="seconds to wait on leases held elsewhere")
    consume.set_defaults(run=cmd_consume)

    letters = sub.add_parser("dead-letters", help="poison shards: parked, stopped and re-driven")
    letters.add_argument("group")
    letters.add_argument("--json", action="store_true", help="print JSON")
    letters.set_defaults(run=cmd_dead_letters)

    again = sub.add_parser("redrive", help="release parked or stopped shards so the Leader grants them again")
    again.add_argument("group")
    again.add_argument("--shard", action="append", help="only this shard (repeatable); default: all open ones")
    again.set_defaults(run=cmd_redrive)
    return top


def pick(groups: dict[str, GroupConfig], name: str, source: Path) -> GroupConfig:
    """The named group, or an error listing the defined ones."""
    if name not in groups:
        raise UsageError(f"group {name!r} is not defined in {source}; defined: {sorted(groups) or 'none'}")
    return groups[name]


def cmd_list(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup list``."""
    catalog = lakehouse.catalog()
    rows = []
    for group in groups.values():
        view = describe_group(catalog, group)
        rows.append(
            {
                "group": group.name,
                "source": group.source,
                "sink": group.sink,
                "leader": f"schedule {group.schedule}" if group.schedule else "sensor",
                "max_borrowers": group.max_borrowers,
                "streams": len(view.streams),
                "lag_rows": view.lag_rows,
                "leases_in_flight": view.leases_in_flight,
                "state": view.status,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(table(rows, list(rows[0]) if rows else ["group"]))
    return 0


def cmd_describe(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup describe GROUP``."""
    view = describe_group(lakehouse.catalog(), pick(groups, args.group, args.groups))
    if args.json:
        print(json.dumps(view.as_dict(), indent=2, default=str))
    else:
        print(render(view))
    return 0


def render(view: GroupView) -> str:
    """``describe`` as text: a header, then one line per stream."""
    head = (
        f"group {view.group}: {view.source} -> {view.sink}  epoch {view.epoch}  {view.status}\n"
        f"source head {view.source_head}  planned through {view.planned_through}  "
        f"pending shards {view.pending_shards}  leases in flight {view.leases_in_flight}  "
        f"leases done {view.leases_done}  lag {view.lag_snapshots} snapshots / {view.lag_rows} rows"
    )
    rows: list[dict[str, object]] = [
        {
            "stream": s.stream,
            "position": s.position,
            "head": s.head,
            "lag_snapshots": s.lag_snapshots,
            "lag_rows": s.lag_rows,
            "committed_rows": s.committed_rows,
            "leases": ",".join(s.leases) or "-",
        }
        for s in view.streams
    ]
    columns = ["stream", "position", "head", "lag_snapshots", "lag_rows", "committed_rows", "leases"]
    holds = "".join(f"\n  {line}" for line in view.hold_lines())
    return f"{head}\n{table(rows, columns)}" + (f"\nleases in flight:{holds}" if holds else "")


def table(rows: list[dict[str, object]], columns: list[str]) -> str:
    """Left-aligned columns, upper-case headers."""
    cells = [[c.upper() for c in columns]] + [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def dagster_home() -> Path:
    """``$DAGSTER_HOME``, else ``.dagster`` under ``$ICEGROUP_HOME``: the instance ``make ui`` shows."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path(os.environ.get(ENV_HOME, ".")) / ".dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


@contextmanager
def open_instance(home: Path) -> Iterator[dg.DagsterInstance]:
    """The Dagster instance in ``home``; opening it is serialized across processes by a file lock.

    Opening a SQLite-backed instance creates and migrates its databases the first time. Consumers
    started at the same moment on a fresh home would race through that (tables that already exist,
    two alembic heads), so the opening, and only the opening, takes turns.
    """
    with (home / ".icegroup-instance.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = dg.DagsterInstance.from_config(str(home))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    with instance:
        yield instance


def cmd_consume(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup consume GROUP``: the group's consume job, executed here against the Dagster instance."""
    group = pick(groups, args.group, args.groups)
    home = dagster_home()
    job = build_definitions(groups, lakehouse.catalog_name, args.lakehouse).resolve_job_def(f"{group.name}_consume")
    run_config = {
        "loggers": {"console": {"config": {"log_level": "INFO"}}},
        "ops": {
            f"{group.name}_consume_op": {
                "config": {"until_caught_up": args.until_caught_up, "max_wait_s": args.max_wait}
            }
        },
    }
    with open_instance(home) as instance:
        try:
            result = job.execute_in_process(run_config=run_config, instance=instance)
        except Exception as exc:
            # Dagster raises the op's own error, or wraps it in a step error: unwrap that.
            wrapped = isinstance(exc, dg.DagsterExecutionStepExecutionError) and exc.__cause__ is not None
            failed = exc.__cause__ if wrapped and exc.__cause__ is not None else exc
            if isinstance(failed, IcegroupError):
                raise failed from None
            traceback.print_exception(failed, file=sys.stderr)
            print(
                f"icegroup: run failed: {type(failed).__name__}: {failed} (the run is in the instance at {home}; "
                "`make ui` shows its logs)",
                file=sys.stderr,
            )
            return EXIT_RUN_FAILED
    print(f"run {result.run_id}: {'success' if result.success else 'failure'} (instance {home})")
    print(render(describe_group(lakehouse.catalog(), group)))
    return EXIT_OK if result.success else EXIT_RUN_FAILED


def cmd_dead_letters(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup dead-letters GROUP``: each poison shard's latest state."""
    group = pick(groups, args.group, args.groups)
    rows: list[dict[str, object]] = [
        {
            "shard": d.shard_id,
            "stream": d.stream,
            "state": d.action,
            "source_snapshots": snapshot_range(d.from_snapshot, d.to_snapshot),
            "lease": f"{d.lease_id}#{d.attempt}",
            "error": d.error,
        }
        for d in latest(lakehouse.catalog(), group.name).values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(table(rows, ["shard", "stream", "state", "source_snapshots", "lease", "error"]))
    return 0


def cmd_redrive(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup redrive GROUP [--shard ID ...]``: the next Leader tick grants these shards again."""
    group = pick(groups, args.group, args.groups)
    catalog = lakehouse.catalog()
    unknown = sorted(set(args.shard or []) - set(open_letters(catalog, group.name)))
    if unknown:
        raise UsageError(
            f"shard(s) {unknown} of group {group.name!r} are not parked or stopped; "
            f"see `icegroup dead-letters {group.name}`"
        )
    released = redrive(catalog, group.name, args.shard)
    for letter in released:
        print(f"re-driven: shard {letter.shard_id} (stream {letter.stream})")
    print(f"{len(released)} shard(s) re-driven; the next Leader tick grants them again")
    return 0
