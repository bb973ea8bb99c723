"""The ``icegroup`` command: every subcommand, from ``list`` and ``consume`` to ``lineage`` and ``reset``.

Every command shares one error handler: any ``IcegroupError`` is printed as
``icegroup: error: <message and remedy>`` and the command exits 2.

A command imports the modules that only it uses when it runs, not here: every command's start pays
for what this module imports, and ``consume`` starts its JVM only after its first look at the group,
so anything imported before that look delays its Spark session.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict

from icegroup.dagster_project.cli.arguments import (
    ACTS_AT_ONCE,
    PREVIEW_RULE,
    RULE,
    Commands,
    command,
    execute_option,
    group_argument,
    json_option,
)
from icegroup.dagster_project.cli.canary import add_canary
from icegroup.dagster_project.cli.configs import load_configs, package_version
from icegroup.dagster_project.cli.consume import add_consume
from icegroup.dagster_project.cli.dead_letters import add_dead_letters
from icegroup.dagster_project.cli.exits import Exit, epilog, exit_for, lost_answer
from icegroup.dagster_project.cli.expire import add_expire
from icegroup.dagster_project.cli.init import add_init, cmd_init
from icegroup.dagster_project.cli.lineage import add_lineage
from icegroup.dagster_project.cli.logfile import log_traceback, pointer
from icegroup.dagster_project.cli.metrics import add_metrics
from icegroup.dagster_project.cli.output import dumps, stdout_closed
from icegroup.dagster_project.cli.support import dagster_home, pick, render, table, view_json
from icegroup.dagster_project.cli.verbs import add_verbs
from icegroup.iceberg.config.lakehouse import ENV_CONFIG, ENV_HOME, LakehouseConfig
from icegroup.iceberg.config.search import ENV_GROUPS
from icegroup.iceberg.errors import IcegroupError, UsageError
from icegroup.iceberg.protocol.durations import option_value, parse_time
from icegroup.iceberg.protocol.group import GroupConfig


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``icegroup`` console script."""
    args = parser().parse_args(argv)
    try:
        if args.run is cmd_init:
            return cmd_init(args)
        lakehouse, groups = load_configs(args)
        result: int = args.run(args, lakehouse, groups)
        return result
    except IcegroupError as exc:
        label, code = exit_for(exc)
        print(f"icegroup: {label}: {exc}{logged(exc)}", file=sys.stderr)
        return code
    except Exception as exc:
        if args.verbose or not lost_answer(exc):
            return unforeseen(args, exc)
        path = log_traceback(dagster_home(), args.run.__name__.removeprefix("cmd_").replace("_", "-"), exc)
        cause = (str(exc).strip().splitlines() or [""])[0][:300]
        print(
            f"icegroup: stopped: the catalog did not answer ({type(exc).__name__}: {cause}). A commit it was "
            "making may have landed or not: run the same command again once the catalog answers; it reads what "
            f"landed from the tables and does not do it twice ({pointer(path)})",
            file=sys.stderr,
        )
        return Exit.INCOMPLETE


def unforeseen(args: argparse.Namespace, exc: Exception) -> int:
    """A failure icegroup did not foresee: one line on stderr, the traceback in a log file; exit 1."""
    if args.verbose or (isinstance(exc, BrokenPipeError) and stdout_closed()):
        raise exc  # with --verbose, or when the reader went away (``| head``): ``entry.main`` ends quietly
    command = args.run.__name__.removeprefix("cmd_").replace("_", "-")
    path = log_traceback(dagster_home(), command, exc)
    cause = (str(exc).strip().splitlines() or [""])[0][:300]
    print(f"icegroup: unexpected error: {type(exc).__name__}: {cause} ({pointer(path)})", file=sys.stderr)
    return Exit.RUN_FAILED


def logged(exc: Exception) -> str:
    """Where the error's traceback went, when a run's output went to a log file (``cli/logfile.py``)."""
    path = getattr(exc, "log_file", None)
    return f" ({pointer(path)})" if path is not None else ""


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(
        prog="icegroup",
        description=f"Consumer groups for Apache Iceberg tables.\n\n{RULE}",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"icegroup {package_version()}")
    shared_options(top, default=None)
    sub = top.add_subparsers(required=True, metavar="COMMAND")
    group, as_json = group_argument(), json_option()
    add_init(sub)
    command(sub, "list", "list the groups and their lag", as_json).set_defaults(run=cmd_list)

    describe = command(sub, "describe", "per stream: position, head, lag, leases in flight", group, as_json)
    describe.add_argument("--as-of", help="the group as its registry held it then (ISO-8601; UTC if no zone)")
    describe.add_argument(
        "--plot", action="store_true", help="then draw its lag after each lease and its rows per window (terminal bars)"
    )
    describe.set_defaults(run=cmd_describe)
    add_consume(sub)

    add_dead_letters(sub)
    pause = command(sub, "pause", f"grant nothing new; leases in flight finish; {ACTS_AT_ONCE}", group)
    pause.set_defaults(run=cmd_pause)
    resume = command(sub, "resume", f"continue a paused group from the same positions; {ACTS_AT_ONCE}", group)
    resume.set_defaults(run=cmd_resume)

    points = command(
        sub, "checkpoints", "the group's sink commits: run, lease, epoch, source range, rows", group, as_json
    )
    points.add_argument("--window", help="only this replay window (a partition key such as 2026-01-31)")
    points.set_defaults(run=cmd_checkpoints)

    rebuild = command(sub, "rebuild", f"rebuild the registry from the sink's commits; {PREVIEW_RULE}", group, as_json)
    rebuild.add_argument("--execute", action="store_true", help="commit the rebuilt registry in a new epoch")
    rebuild.set_defaults(run=cmd_rebuild)
    for add in (add_replay, add_reset, add_lineage, add_expire, add_metrics, add_verbs, add_canary):
        add(sub)
    for each in sub.choices.values():  # the options that apply to every command, also after its name
        shared_options(each, default=argparse.SUPPRESS)
    return top


def shared_options(command: argparse.ArgumentParser, default: object) -> None:
    """``--groups``, ``--lakehouse`` and ``--verbose``, on the top level and on each command.

    On a command they default to ``SUPPRESS``: given there they win, left out they leave what the
    top level parsed, so ``icegroup --groups F list`` and ``icegroup list --groups F`` mean the same.
    """
    command.add_argument(
        "--groups",
        default=default,
        help=f"group definitions YAML (else ${ENV_GROUPS}, ./groups.yaml, ~/.icegroup/groups.yaml)",
    )
    command.add_argument(
        "--lakehouse",
        default=default,
        help=f"lakehouse config YAML (else ${ENV_CONFIG}, ./lakehouse.yaml, ~/.icegroup/lakehouse.yaml, "
        f"a local lake in ${ENV_HOME}/.lake or ./.lake)",
    )
    command.add_argument(
        "--verbose",
        action="store_true",
        default=False if default is None else default,
        help="print Dagster's event log, Spark's output, warnings and full tracebacks, instead of writing a run's "
        "output to a log file under $DAGSTER_HOME/logs/",
    )


def add_replay(sub: Commands) -> None:
    """The ``replay`` command's arguments."""
    replay = command(
        sub, "replay",
        f"remake windows of the sink from the source with today's transform, replacing their rows; {PREVIEW_RULE}",
        group_argument(), json_option(), execute_option(),
    )  # fmt: skip
    replay.add_argument("--window", action="append", help="a window's partition key, such as 2026-01-31 (repeatable)")
    replay.add_argument("--from", dest="start", help="replay every window from this time (ISO-8601; UTC if no zone)")
    replay.add_argument("--to", dest="end", help="... up to this time (exclusive)")
    replay.add_argument(
        "--cascade",
        action="store_true",
        help="then make every chained group downstream follow: replay its windows that consumed the replaced rows",
    )
    replay.add_argument(
        "--follow-upstream",
        action="store_true",
        help="replay this group's windows that consumed rows an upstream replay replaced (no windows named)",
    )
    replay.set_defaults(run=cmd_replay)


def add_reset(sub: Commands) -> None:
    """The ``reset`` command's arguments."""
    reset = command(
        sub, "reset", f"move the group's positions; {PREVIEW_RULE}", group_argument(), json_option(), execute_option()
    )
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-earliest", action="store_true", help="before the oldest source snapshot still there")
    where.add_argument("--to-latest", action="store_true", help="the source head: skip everything not consumed yet")
    where.add_argument("--to-snapshot", metavar="ID", help="through this source snapshot")
    where.add_argument("--to-datetime", metavar="T", help="before the first snapshot committed at or after T")
    where.add_argument("--by-duration", metavar="D", help="as --to-datetime now minus D (PT1H, P1D, 15m, 2d)")
    where.add_argument("--shift-by", metavar="N", type=int, help="N of each stream's own snapshots (negative: back)")
    where.add_argument("--to-checkpoint", metavar="SINK_SNAPSHOT", help="the positions a sink commit recorded")
    reset.add_argument("--keep-output", action="store_true", help="moving back, keep the output consumed again")
    reset.set_defaults(run=cmd_reset)


def cmd_replay(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup replay``: see ``cli/rewind.py``, imported here because it loads Dagster."""
    from icegroup.dagster_project.cli import rewind

    return rewind.cmd_replay(args, lakehouse, groups)


def cmd_reset(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup reset``: see ``cli/rewind.py``, imported here because it loads Dagster."""
    from icegroup.dagster_project.cli import rewind

    return rewind.cmd_reset(args, lakehouse, groups)


def cmd_list(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup list``."""
    from icegroup.iceberg.describe import describe_group

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
                "leases_parked": view.leases_parked,
                "status": view.status,
            }
        )
    if args.json:
        print(dumps(rows))
        return Exit.OK
    print(table(rows, list(rows[0]) if rows else ["group"]))
    return Exit.OK


def cmd_describe(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup describe GROUP [--as-of T] [--plot]``."""
    from icegroup.iceberg.describe import describe_as_of, describe_group

    group = pick(groups, args.group, args.groups)
    if args.plot and (args.json or args.as_of is not None):
        raise UsageError("--plot: draws the group's history as it is now, for a person; leave out --json and --as-of")
    if args.as_of is None:
        view = describe_group(lakehouse.catalog(), group)
    else:
        view = describe_as_of(lakehouse.catalog(), group, option_value("--as-of", parse_time, args.as_of))
    if args.json:
        print(dumps(view_json(lakehouse.catalog(), group, view)))
    else:
        print(render(view))
    if args.plot:
        from icegroup.dagster_project.cli.plots import plot_lines

        print("\n".join(plot_lines(lakehouse.catalog(), group, dagster_home(create=False), lakehouse.catalog_name)))
    return Exit.OK


def cmd_checkpoints(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup checkpoints GROUP [--window W]``: one line per sink commit of the group, oldest first."""
    from icegroup.iceberg.checkpoints import list_checkpoints

    group = pick(groups, args.group, args.groups)
    rows = [asdict(point) for point in list_checkpoints(lakehouse.catalog(), group, args.window)]
    if args.json:
        print(dumps(rows))
        return Exit.OK
    columns = [
        "committed_at", "kind", "sink_snapshot", "run_id", "lease", "epoch", "stream", "source_range", "window", "rows"
    ]  # fmt: skip
    print(table(rows, columns))
    print(f"{len(rows)} checkpoints of group {group.name} in {group.sink}")
    return Exit.OK


def cmd_pause(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup pause GROUP``: the Leader grants nothing new until ``resume``."""
    from icegroup.iceberg.pause import set_paused

    group = pick(groups, args.group, args.groups)
    state, changed = set_paused(lakehouse.catalog(), group, paused=True)
    flight = f"{len(state.leases)} leases in flight finish" if state.leases else "no leases in flight"
    print(f"group {group.name}: {'paused' if changed else 'already paused'}; {flight}; nothing new is granted")
    return Exit.OK


def cmd_resume(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup resume GROUP``: the Leader grants again, from the same positions."""
    from icegroup.iceberg.pause import set_paused

    group = pick(groups, args.group, args.groups)
    _, changed = set_paused(lakehouse.catalog(), group, paused=False)
    print(f"group {group.name}: {'resumed' if changed else 'not paused'}; the next Leader tick grants again")
    return Exit.OK


def cmd_rebuild(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup rebuild GROUP [--execute]``: per stream, the registry's position and the sink's."""
    from icegroup.iceberg.rebuild import rebuild_registry

    group = pick(groups, args.group, args.groups)
    found = rebuild_registry(lakehouse.catalog(), group, execute=args.execute)
    stored = found.stored.streams if found.stored else {}
    rebuilt = found.rebuilt.streams
    rows: list[dict[str, object]] = [
        {
            "stream": name,
            "registry_position": stored[name].position if name in stored else None,
            "sink_position": rebuilt[name].position if name in rebuilt else None,
            "committed_shards": rebuilt[name].committed_shards if name in rebuilt else 0,
            "committed_rows": rebuilt[name].committed_rows if name in rebuilt else 0,
        }
        for name in sorted(set(stored) | set(rebuilt))
    ]
    if found.stored is None:
        verdict = "missing"
    else:
        verdict = f"epoch {found.stored.epoch}, " + (found.disagreement or "agrees with the sink")
    if args.json:
        print(dumps({
            "group": group.name, "registry_found": found.stored is not None,
            "registry_epoch": found.stored.epoch if found.stored else None, "disagreement": found.disagreement,
            "epoch": found.rebuilt.epoch, "committed": found.committed, "streams": rows,
        }))  # fmt: skip
        return Exit.OK
    print(f"group {group.name}: registry {verdict}; sink {group.sink}: {found.rebuilt.leases_done} leases committed")
    print(table(rows, ["stream", "registry_position", "sink_position", "committed_shards", "committed_rows"]))
    if found.committed:
        print(f"rebuilt: the registry is at epoch {found.rebuilt.epoch}; leases of older epochs can no longer commit")
    else:
        print(
            f"preview: nothing changed. `icegroup rebuild {group.name} --execute` commits this registry in epoch "
            f"{found.rebuilt.epoch}; leases in flight then can no longer commit and are granted again"
        )
    return Exit.OK
