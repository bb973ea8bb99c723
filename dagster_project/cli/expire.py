"""``icegroup expire``: consumer-aware snapshot expiry of every table the groups touch (``iceberg/retention.py``)."""

from __future__ import annotations

import argparse
import json

from dagster_project.cli.exits import Exit
from dagster_project.cli.support import pick, table
from iceberg.config.lakehouse import LakehouseConfig
from iceberg.errors import UsageError
from iceberg.protocol.durations import option_value, parse_duration
from iceberg.protocol.group import GroupConfig
from iceberg.retention import StateRetention, TableExpiry, expire


def add_expire(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``expire`` command's arguments."""
    command = sub.add_parser(
        "expire", help="expire the snapshots no group needs: sources, sinks, registry, lineage, dead letters"
    )
    command.add_argument("group", nargs="*", help="only the tables of these groups (default: every group)")
    command.add_argument("--dry-run", action="store_true", help="list what would expire, what stays and what pins it")
    command.add_argument(
        "--keep-state", type=int, default=StateRetention.keep_last, metavar="N",
        help="snapshots each registry, lineage and dead-letter table keeps at least (default %(default)s)",
    )  # fmt: skip
    command.add_argument(
        "--keep-state-for", default="7d", metavar="D",
        help="and those younger than this (default %(default)s; 12h, 30d, P1D)",
    )  # fmt: skip
    command.add_argument("--json", action="store_true", help="print JSON")
    command.set_defaults(run=cmd_expire)


def cmd_expire(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup expire [GROUP ...] [--dry-run]``: exit 3 if a table moved under it and was left for next time."""
    chosen = {name: pick(groups, name, args.groups) for name in args.group} if args.group else groups
    if args.keep_state < 1:
        raise UsageError(f"--keep-state: {args.keep_state} keeps no snapshot; give 1 or more")
    keep_for = option_value("--keep-state-for", parse_duration, args.keep_state_for)
    plans = expire(lakehouse.catalog(), chosen, StateRetention(args.keep_state, keep_for), execute=not args.dry_run)
    if args.json:
        print(json.dumps([plan_json(p) for p in plans], indent=2))
    else:
        print(as_text(plans, args.dry_run))
    return Exit.INCOMPLETE if any(p.error for p in plans) else Exit.OK


def plan_json(plan: TableExpiry) -> dict[str, object]:
    """One table's verdict with every pin on it."""
    return {
        **plan.row(),
        "expire_snapshots": [s.snapshot_id for s in plan.judged.expire],
        "staged_snapshots": plan.staged,
        "pins": [pin.describe() for pin in plan.pins],
        "lapsed_registrations": plan.lapsed,
    }


def as_text(plans: list[TableExpiry], dry_run: bool) -> str:
    """A line per table, then the registrations that lapsed, then what was done."""
    columns = ["table", "roles", "snapshots", "expire", "staged_expire", "keep", "oldest_kept", "held_by", "status"]
    lines = [table([p.row() for p in plans], columns)]
    for plan in plans:
        for name in plan.lapsed:
            lines.append(f"{plan.table}: group {name}'s registration lapsed (its Leader stopped ticking); not pinning")
    expiring = sum(len(p.judged.expire) + len(p.staged) for p in plans)
    if dry_run:
        lines.append(f"dry run: nothing expired; without --dry-run, {expiring} snapshots expire")
    else:
        lines.append(f"expired {sum(len(p.judged.expire) + len(p.staged) for p in plans if p.done)} snapshots")
    return "\n".join(lines)
