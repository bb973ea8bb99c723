"""``icegroup replay`` and ``icegroup reset``: go back over a group's history.

A replay from the command line is the same Dagster run a backfill launched from the UI is: the
sink asset's partition, run in the instance without a lease tag, so the UI shows it with the rest.
A reset moves the group's positions, after ``kafka-consumer-groups --reset-offsets``. Both preview
by default and act only with ``--execute``, like every verb that rewrites state. Their arguments are
in ``cli/commands.py``, which imports this module (and so Dagster) only when one of them runs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import dagster as dg

from icegroup.dagster_project.cli.exits import Exit
from icegroup.dagster_project.cli.logfile import run_output
from icegroup.dagster_project.cli.output import dumps
from icegroup.dagster_project.cli.support import dagster_home, pick, table
from icegroup.dagster_project.definitions import build_definitions
from icegroup.dagster_project.openlineage_runs import reset_run
from icegroup.dagster_project.runs.execute import execute, open_instance
from icegroup.dagster_project.runs.observer import terminate_runs
from icegroup.iceberg.cascade import downstream_of, plan_follows, record_follows
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.cascade import FollowPlan
from icegroup.iceberg.protocol.durations import option_value, parse_time
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import still_beating
from icegroup.iceberg.protocol.replay import check_window, windows_between
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.replay import ReplayPlan, plan_replay
from icegroup.iceberg.reset import ResetPlan, plan_reset
from icegroup.iceberg.store.heartbeats import read_beats
from icegroup.iceberg.store.registry import load_state


def windows_of(args: argparse.Namespace, group: GroupConfig) -> list[str]:
    """The windows the arguments name, each checked; an error names the options to use."""
    if args.follow_upstream:
        if args.window or args.start or args.end:
            raise UsageError(
                "replay --follow-upstream: the upstream replays decide which windows are replayed; name no windows"
            )
        return []
    if args.window and (args.start or args.end):
        raise UsageError("replay: give --window, or --from and --to, not both")
    if args.window:
        windows = list(dict.fromkeys(args.window))
    elif args.start and args.end:
        windows = windows_between(
            group, option_value("--from", parse_time, args.start), option_value("--to", parse_time, args.end)
        )
    else:
        raise UsageError("replay: name the windows: --window 2026-01-31 (repeatable), or --from T --to T")
    for window in windows:
        check_window(group, window)
    return windows


def plan_row(plan: ReplayPlan) -> dict[str, object]:
    """One window's preview as a row: ``missing`` lists what the window's replay lacks (empty: nothing)."""
    return {
        "window": plan.window,
        "shards": len(plan.shards),
        "source_rows": plan.rows,
        "sink_rows_now": plan.sink_rows,
        "complete": not plan.missing,
        "missing": list(plan.missing),
    }


def cmd_replay(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup replay GROUP``: a preview shows each window's plan; with ``--execute``, one run per window.

    ``--cascade`` then makes each chained group downstream follow, and theirs in turn;
    ``--follow-upstream`` makes this group follow the replays of its own source.
    """
    group = pick(groups, args.group, args.groups)
    windows = windows_of(args, group)
    following = [group] if args.follow_upstream else downstream_of(groups, group) if args.cascade else []
    if not args.execute:
        return preview(args, lakehouse, group, windows, following)
    home = dagster_home()
    definitions = build_definitions(groups, lakehouse.catalog_name, args.lakehouse)
    follows: list[dict[str, object]] = []
    with run_output(home, "replay", args.verbose), open_instance(home) as instance:
        done = run_replays(definitions, instance, home, group, windows)
        queue = list(following)
        while queue:
            downstream = queue.pop(0)
            outcome = follow(lakehouse, definitions, instance, home, downstream)
            follows.extend(outcome[0])
            done.extend(outcome[1])
            if args.cascade:
                queue.extend(downstream_of(groups, downstream))
    # A refused follow is an error that names its remedy (2); one that has to wait is not done yet,
    # like a consume that did not catch up (3).
    statuses = [str(row["status"]) for row in follows]
    code = Exit.ERROR if "refused" in statuses else Exit.INCOMPLETE if "waits" in statuses else Exit.OK
    if args.json:
        print(dumps({"replays": done, "follows": follows} if following else done))
        return code
    columns = ["group", "window", "generations", "shards", "rows_in", "rows_out", "rows_replaced", "sink_snapshots"]
    if done:
        print(table(done, [*columns, "run_id"]))
    if follows:
        print(table([follow_text(row) for row in follows], FOLLOW_COLUMNS))
    elif args.follow_upstream:
        print(f"group {group.name}: no upstream replay to follow")
    return code


FOLLOW_COLUMNS = ["group", "upstream_replay", "upstream_group", "window", "windows", "status"]


def preview(
    args: argparse.Namespace,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    windows: list[str],
    following: list[GroupConfig],
) -> int:
    """Each window's plan, and what each group that follows would do now."""
    catalog = lakehouse.catalog()
    rows = [plan_row(plan_replay(catalog, group, window)) for window in windows]
    follows = [follow_row(g, p, done=False) for g in following for p in plan_follows(catalog, g)]
    if args.json:
        print(dumps({"replays": rows, "follows": follows} if following else rows))
        return Exit.OK
    if rows:
        print(table(rows, ["window", "shards", "source_rows", "sink_rows_now", "complete", "missing"]))
    if args.follow_upstream:
        shown = table([follow_text(row) for row in follows], FOLLOW_COLUMNS)
        print(shown if follows else f"group {group.name}: no upstream replay to follow")
        print("preview: nothing replaced; add --execute to follow the replays shown ready")
        return Exit.OK
    if following:
        names = ", ".join(g.name for g in following)
        print(f"--cascade: after the replay, the groups downstream follow it: {names}, and theirs in turn")
    print(f"preview: nothing replaced; add --execute to replay {len(windows)} windows")
    return Exit.OK


def run_replays(
    definitions: dg.Definitions,
    instance: dg.DagsterInstance,
    home: Path,
    group: GroupConfig,
    windows: list[str],
) -> list[dict[str, object]]:
    """Replay each window as a run of the group's sink partition (as a UI backfill does); a failed run raises."""
    job = definitions.resolve_job_def(f"{group.name}_replay")
    done: list[dict[str, object]] = []
    for window in windows:
        result = execute(job, instance, home, partition_key=window)
        # The run's steps are the sink asset's and its checks'; only the asset's step materializes.
        (materialization,) = [m for n in result.job_def.nodes for m in result.asset_materializations_for_node(n.name)]
        # The replay's own report; Dagster's standard table metadata (``dagster/...``) is the table's, for the UI.
        meta = {key: value.value for key, value in materialization.metadata.items() if not key.startswith("dagster/")}
        done.append({"group": group.name, "window": window, "run_id": result.run_id, **meta})
    return done


def follow(
    lakehouse: LakehouseConfig,
    definitions: dg.Definitions,
    instance: dg.DagsterInstance,
    home: Path,
    group: GroupConfig,
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Make ``group`` follow the replays of its source that it can follow now: replay its windows, then record it.

    Returns the follow rows and the replays run. A failed replay run raises before anything is recorded,
    so the group's Leader still stops at those replays and this can be run again.
    """
    catalog = lakehouse.catalog()
    plans = plan_follows(catalog, group)
    ready = [p for p in plans if p.ready]
    windows = sorted({w for p in ready for w in p.windows})
    done = run_replays(definitions, instance, home, group, windows)
    record_follows(catalog, group, {p.replay.snapshot_id for p in ready})
    return [follow_row(group, p, done=True) for p in plans], done


def follow_row(group: GroupConfig, plan: FollowPlan, done: bool) -> dict[str, object]:
    """One upstream replay, and what following it takes (or took, once ``done``), or why it has to wait.

    ``status`` is one word (refused, waits, ready, followed); ``reason`` says why, for a person.
    """
    if plan.missing:
        status, reason = "refused", "; ".join(plan.missing)
    elif plan.unconsumed:
        status, reason = (
            "waits",
            (
                f"{group.name} has not committed {len(plan.unconsumed)} of the commits it replaced yet (first "
                f"{plan.unconsumed[0]}); let it consume up to the replay (its Leader stops there, naming it; a poison "
                f"shard needs `icegroup redrive {group.name} --execute`), then run "
                f"`icegroup replay {group.name} --follow-upstream --execute`"
            ),
        )
    else:
        count = f"{len(plan.windows)} window{'s' if len(plan.windows) != 1 else ''}"
        status = "followed" if done else "ready"
        if not plan.windows:
            reason = "it replaced nothing this group consumed"
        else:
            reason = f"{count} replayed" if done else f"replays {count}"
    return {
        "group": group.name,
        "upstream_replay": plan.replay.snapshot_id,
        "upstream_group": plan.replay.group,
        "window": plan.replay.window,
        "windows": plan.windows,
        "status": status,
        "reason": reason,
    }


def follow_text(row: dict[str, object]) -> dict[str, object]:
    """A follow row as the text table shows it: the status and its reason in one cell."""
    return {**row, "status": f"{row['status']}: {row['reason']}"}


TARGETS = {
    "to_earliest": "earliest",
    "to_latest": "latest",
    "to_snapshot": "snapshot",
    "to_datetime": "datetime",
    "by_duration": "duration",
    "shift_by": "shift",
    "to_checkpoint": "checkpoint",
}


def reset_target(args: argparse.Namespace) -> ResetTarget:
    """The one target option given."""
    for option, how in TARGETS.items():
        value = getattr(args, option)
        if value is True:
            return ResetTarget(how)  # type: ignore[arg-type]
        if value is not None and value is not False:
            return ResetTarget(how, str(value))  # type: ignore[arg-type]
    raise UsageError("reset: name a target, such as --to-earliest or --to-snapshot ID")


def reset_report(plan: ResetPlan, executed: bool) -> dict[str, object]:
    """The plan as JSON."""
    return {
        "group": plan.group,
        "target": plan.target.describe(),
        "epoch": plan.epoch,
        "executed": executed,
        "completes_interrupted": plan.completes_interrupted,
        "already_committed": plan.already_committed,
        "keep_output": plan.keep_output,
        "streams": plan.rows(),
        "windows_replaced": [] if plan.keep_output else plan.windows,
        "shards_replaced": len(plan.replaced_shards),
    }


def cmd_reset(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """``icegroup reset GROUP --to-...``: show the move, or apply it with ``--execute``."""
    group = pick(groups, args.group, args.groups)
    catalog = lakehouse.catalog()
    target = reset_target(args)
    if args.execute:
        before = load_state(catalog, group.name).state
        plan = reset_run(lakehouse, group, target, keep_output=args.keep_output)
        # The runs of the epochs the reset left behind (a reset that had committed already may find some), but for
        # those whose process still beats: they go on in the new epoch by themselves.
        beats = {holder: beat.beat_ms for holder, beat in read_beats(catalog, group.name).items()}
        now_ms = int(time.time() * 1000)
        leases = [
            lease
            for lease in (before.leases.values() if before else [])
            if lease.epoch < plan.epoch and not still_beating(lease, beats, now_ms, group.session_timeout_s)
        ]
        if leases:
            home = dagster_home()
            with run_output(home, "reset", args.verbose), open_instance(home) as instance:
                terminate_runs(instance, group.name, leases, reason=f"group reset ({target.describe()})")
    else:
        plan = plan_reset(catalog, group, target, keep_output=args.keep_output)
    if args.json:
        print(dumps(reset_report(plan, args.execute)))
        return Exit.OK
    if plan.already_committed:
        print(
            f"reset group {group.name} {plan.target.describe()}: epoch {plan.epoch} was committed before the run that "
            "made it stopped; its marker is cleared, and nothing moves again"
        )
        return Exit.OK
    print(f"reset group {group.name} {plan.target.describe()}: into epoch {plan.epoch}")
    # A position before the table's first snapshot is its start, as a source range writes it (``start..B``).
    # The skipped rows counted from live files are said below the table, when there are any.
    shown = [{key: value for key, value in row.items() if key != "skipped_rows_expired"} for row in plan.rows()]
    rows = [{**row, "current": row["current"] or "start", "new": row["new"] or "start"} for row in shown]
    print(table(rows, list(rows[0]) if rows else ["stream"]))
    expired = sum(move.skipped_expired_rows for move in plan.moves)
    if expired:
        print(
            f"{expired} of the skipped rows were committed by snapshots that have expired: they are counted from the "
            "data files live now, so a compaction or delete since then makes the figure approximate"
        )
    replaced = "kept (--keep-output)" if plan.keep_output else (", ".join(plan.windows) or "none")
    print(f"output replaced in windows: {replaced} ({len(plan.replaced_shards)} shards' rows deleted, consumed again)")
    done = "done: the Leader goes on from the new positions"
    print(done if args.execute else "preview: nothing changed; add --execute to apply it")
    return Exit.OK
