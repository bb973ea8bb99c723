"""``icegroup consume``: its arguments, and the command, which makes a run only when the group has work.

The run itself (the group's consume job in the Dagster instance, with progress bars) is in
``cli/consume_run.py``, imported only when there is a run to make, so an idle consume never loads
Dagster or starts a JVM.
"""

from __future__ import annotations

import argparse

from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli.arguments import ACTS_AT_ONCE, Commands, command, group_argument, json_option
from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.output import JSON_HELP, dumps
from icegroup.dagster_project.cli.support import dagster_home, pick, render, view_json
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import Interrupted
from icegroup.iceberg.lag import Work, pending_work
from icegroup.iceberg.protocol.consume import DEFAULTS
from icegroup.iceberg.protocol.group import GroupConfig


def add_consume(sub: Commands) -> None:
    """The ``consume`` command's arguments."""
    consume = command(
        sub, "consume", f"run the Leader and Borrowers headless, as a Dagster run; {ACTS_AT_ONCE}",
        group_argument(), json_option(f"{JSON_HELP}; no progress bars"),
    )  # fmt: skip
    consume.add_argument("--until-caught-up", action="store_true", help="repeat until the source head is committed")
    consume.add_argument(
        "--max-wait", type=float, default=DEFAULTS.max_wait_s, help="seconds to wait on leases held elsewhere"
    )
    consume.add_argument(
        "--follow", action="store_true", help="keep consuming new source commits after catching up, until Ctrl-C"
    )
    consume.add_argument(
        "--poll",
        type=float,
        default=DEFAULTS.poll_s,
        help="seconds between looks at the source while following (at its multiples, like a processingTime trigger)",
    )
    consume.set_defaults(run=cmd_consume)


def cmd_consume(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup consume GROUP``: the group's consume job, executed here against the Dagster instance.

    A group with nothing to do (``pending_work``: no shard or lease open, no source commit to plan,
    no window to report complete) is answered from its registry without a run, a JVM or even
    Dagster's import, so a scheduled consume that finds nothing new costs under two seconds. A group
    that only has windows to report gets its run, without a JVM.
    """
    group = pick(groups, args.group, args.groups)
    catalog = lakehouse.catalog()
    work = pending_work(catalog, group)
    run_id: str | None = None
    success = True
    stopped: str | None = None
    if work is not Work.NONE or args.follow:
        from icegroup.dagster_project.cli.logfile import run_output

        with run_output(dagster_home(), "consume", args.verbose) as output:  # before the JVM: it inherits stderr
            if work is Work.DATA:
                from icegroup.spark_jobs.session import start_in_background  # Spark loads only when it has work

                start_in_background(lakehouse)  # the JVM boots while Dagster is imported and sets up the run
            from icegroup.dagster_project.cli.consume_run import run_consume  # Dagster loads only for a run

            try:
                run_id, success = run_consume(args, lakehouse, groups, group, output.terminal)
            except Interrupted as exc:
                stopped = stopped_caught_up(catalog, group, exc)
    from icegroup.iceberg.describe import describe_group  # not at the top: a consume with work starts its JVM first

    view = describe_group(catalog, group)
    if args.json:
        found = {"run_id": run_id, "success": success, "stopped_by_signal": stopped is not None}
        print(dumps({**found, "group": view_json(catalog, group, view)}))
    else:
        ran = f"run {run_id}: {'success' if success else 'failure'} (instance {dagster_home()})"
        print(stopped or (ran if run_id else f"group {group.name}: nothing to consume; no run started"))
        print(render(view))
    return Exit.OK if success else Exit.RUN_FAILED


def stopped_caught_up(catalog: Catalog, group: GroupConfig, exc: Interrupted) -> str:
    """A consume stopped by a signal: done when the group was caught up with nothing in flight, else stopped short.

    Its leases end after the shard in flight and the rest go back to the group, so what the signal
    left depends on when it came. Caught up, nothing was handed back and there is nothing to run
    again: the consume did its work, and this says so. Otherwise the error says what is left.
    """
    from icegroup.iceberg.describe import describe_group

    view = describe_group(catalog, group)
    if view.status == "caught up" and not view.leases_in_flight:
        return f"group {group.name}: stopped by a signal once caught up; nothing was handed back"
    raise Interrupted(
        f"{exc} The group is {view.status}, with {view.lag_rows} rows to consume and {view.leases_in_flight} "
        f"leases in flight: run `icegroup consume {group.name}` again to go on"
    ) from None
