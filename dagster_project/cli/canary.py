"""``icegroup canary``: try a new transform on one window beside main, see the difference, then promote it."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from icegroup.dagster_project.cli.arguments import Commands, command, group_argument, json_option
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.logfile import log_line, run_output
from icegroup.dagster_project.cli.output import dumps
from icegroup.dagster_project.cli.support import dagster_home, pick, table
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig

if TYPE_CHECKING:
    from icegroup.iceberg.protocol.canary import CanaryDiff


def add_canary(sub: Commands) -> None:
    """The arguments of ``canary``."""
    canary = command(
        sub, "canary",
        "run a new transform over one window into a staged snapshot of the sink (main is untouched) and show "
        "how its output differs from main's; --promote then makes it the window's output in one commit",
        group_argument(), json_option(),
    )  # fmt: skip
    canary.add_argument("--transform", help="the new transform, as module:function (not with --promote)")
    canary.add_argument("--window", help="the window to try it on (default: the newest window with output)")
    canary.add_argument("--key", help="a column that identifies a row, to tell changed rows from added and removed")
    canary.add_argument(
        "--promote",
        action="store_true",
        help="publish the canary already staged as its window's output, in one fenced commit, once the groups file "
        "names its transform; previews it unless --execute is given",
    )
    canary.add_argument(
        "--execute", action="store_true", help="with --promote: do it (else only show what it would do)"
    )
    canary.set_defaults(run=cmd_canary)


def cmd_canary(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup canary GROUP --transform NEW [--window W] [--key COL] [--promote]``."""
    from icegroup.spark_jobs.canary import promote_canary, run_canary  # Spark loads only for the commands that use it
    from icegroup.spark_jobs.session import get_session

    group = pick(groups, args.group, args.groups)
    if args.promote == bool(args.transform):
        raise UsageError("canary: give --transform to try one, or --promote (alone) to publish the one tried")
    if args.execute and not args.promote:
        raise UsageError("canary: --execute goes with --promote; trying a transform changes nothing on main")
    if args.promote and not args.execute:
        return preview_promotion(lakehouse, group, args.json)
    run_id = f"canary-{int(time.time())}"
    with run_output(dagster_home(), "canary", args.verbose):
        spark = get_session(lakehouse)
        if args.promote:
            report = promote_canary(spark, lakehouse, group, run_id, log_line)
        else:
            diff = run_canary(spark, lakehouse, group, args.transform, args.window, args.key, log_line)
    if args.promote:
        if args.json:
            print(dumps(asdict(report)))
            return Exit.OK
        print(f"promoted: {report.line()}")
        return Exit.OK
    if args.json:
        print(dumps(asdict(diff)))
        return Exit.OK
    print(render(diff, group))
    return Exit.OK


def preview_promotion(lakehouse: LakehouseConfig, group: GroupConfig, as_json: bool) -> int:
    """What ``canary --promote --execute`` would publish, checked as the execution checks it; no Spark, no change."""
    from icegroup.iceberg.store.canaries import promotable
    from icegroup.iceberg.store.tables import load_optional

    catalog = lakehouse.catalog()
    sink = load_optional(catalog, group.sink)
    if sink is None:
        raise UsageError(f"canary: group {group.name!r} has no sink yet, so no canary to promote")
    record = promotable(catalog, sink, group)
    if as_json:
        print(dumps({"group": group.name, "executed": False, **record.model_dump()}))
        return Exit.OK
    print(
        f"would promote: the canary of window {record.window} (transform {record.transform}, staged snapshot "
        f"{record.staged_snapshot}) as the window's output, replacing it in one fenced commit\n"
        f"preview: nothing changed; `icegroup canary {group.name} --promote --execute` promotes it"
    )
    return Exit.OK


def render(diff: CanaryDiff, group: GroupConfig) -> str:
    """The difference as a person reads it: the counts, each column on both sides, a sample of changes."""
    lines = [diff.line()]
    stats = [
        {"column": s.column, "main_nulls": s.main_nulls, "canary_nulls": s.canary_nulls, "main_min": s.main_min,
         "canary_min": s.canary_min, "main_max": s.main_max, "canary_max": s.canary_max}
        for s in diff.columns
    ]  # fmt: skip
    lines.append(table(stats, list(stats[0]) if stats else ["column"]))
    if diff.sample:
        what = "changed rows (old, new)" if diff.key else "rows only the canary has"
        lines.append(f"a sample of the {what}:")
        lines += [f"  {json.dumps(row, default=str)}" for row in diff.sample]
    lines.append(
        f"main's rows are untouched. To make this window {diff.window}'s output: set `transform: {diff.transform}` "
        f"for {group.name} in its groups file, then `icegroup canary {group.name} --promote` (one commit)"
    )
    return "\n".join(lines)
