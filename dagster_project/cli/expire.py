"""``icegroup expire``: consumer-aware snapshot expiry of every table the groups touch (``iceberg/retention.py``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from icegroup.dagster_project.cli.arguments import PREVIEW_RULE, Commands, command, execute_option, json_option
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.output import dumps
from icegroup.dagster_project.cli.support import pick, table
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.durations import option_value, parse_duration
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.protocol.source_branch import ref_name

if TYPE_CHECKING:
    from icegroup.iceberg.retention import TableExpiry


def add_expire(sub: Commands) -> None:
    """The ``expire`` command's arguments."""
    expire = command(
        sub, "expire",
        f"expire the snapshots no group needs: sources, sinks, registry, lineage, dead letters; {PREVIEW_RULE}",
        json_option(), execute_option(),
    )  # fmt: skip
    expire.add_argument("group", nargs="*", help="only the tables of these groups (default: every group)")
    expire.add_argument(
        "--keep-state", type=int, default=StateRetention.keep_last, metavar="N",
        help="snapshots each registry, lineage and dead-letter table keeps at least (default %(default)s)",
    )  # fmt: skip
    expire.add_argument(
        "--keep-state-for", default="7d", metavar="D",
        help="and those younger than this (default %(default)s; 12h, 30d, P1D)",
    )  # fmt: skip
    expire.set_defaults(run=cmd_expire)


def cmd_expire(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup expire [GROUP ...] [--execute]``: what would expire, what stays and what pins it; then expire it.

    Exit 3 if a table moved under it and was left for next time. The run's OpenLineage events are
    sent from ``openlineage_runs``, imported here: only this command needs it.
    """
    from icegroup.dagster_project.openlineage_runs import expire_run

    chosen = {name: pick(groups, name, args.groups) for name in args.group} if args.group else groups
    if args.keep_state < 1:
        raise UsageError(f"--keep-state: {args.keep_state} keeps no snapshot; give 1 or more")
    keep_for = option_value("--keep-state-for", parse_duration, args.keep_state_for)
    plans = expire_run(lakehouse, chosen, StateRetention(args.keep_state, keep_for), execute=args.execute)
    if args.json:
        print(dumps({"executed": args.execute, "tables": [plan_json(p) for p in plans]}))
    else:
        print(as_text(plans, preview=not args.execute))
    return Exit.INCOMPLETE if any(p.error for p in plans) else Exit.OK


def plan_json(plan: TableExpiry) -> dict[str, object]:
    """One table's verdict with every pin on it, as fields: ``status`` is one word, ``error`` the reason if any."""
    return {
        **plan.row(),
        "roles": list(plan.roles),
        "held_by": list(plan.judged.held_by),
        "status": "error" if plan.error else "expired" if plan.done else "planned",
        "error": plan.error or None,
        "expire_snapshots": [s.snapshot_id for s in plan.judged.expire],
        "staged_snapshots": plan.staged,
        "pins": [
            {"holder": pin.holder, "sequence": pin.sequence, "since_ms": pin.since_ms, "last": pin.last}
            for pin in plan.pins
        ],
        "lapsed_registrations": plan.lapsed,
        "stray_branches": [ref_name(group) for group in plan.stray_refs],
    }


def as_text(plans: list[TableExpiry], preview: bool) -> str:
    """A line per table, then the registrations that lapsed, then what was done."""
    columns = ["table", "roles", "snapshots", "expire", "staged_expire", "keep", "oldest_kept", "held_by", "status"]
    lines = [table([p.row() for p in plans], columns)]
    for plan in plans:
        for name in plan.lapsed:
            lines.append(f"{plan.table}: group {name}'s registration lapsed (its Leader stopped ticking); not pinning")
        for name in plan.stray_refs:
            done = "would be removed (--execute)" if preview else "removed"
            lines.append(f"{plan.table}: branch {ref_name(name)} of inactive group {name} {done}; it keeps nothing now")
    expiring = sum(len(p.judged.expire) + len(p.staged) for p in plans)
    if preview:
        lines.append(f"preview: nothing expired; with --execute, {expiring} snapshots expire")
    else:
        lines.append(f"expired {sum(len(p.judged.expire) + len(p.staged) for p in plans if p.done)} snapshots")
    return "\n".join(lines)
