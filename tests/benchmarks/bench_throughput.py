"""Throughput side by side: icegroup against a plain Spark job and Structured Streaming, on the same data.

For each workload (``workloads.py``: W1, 12 snapshots of 420,000 rows; W2, 300 snapshots of 300
rows) one source table is filled, and every arm moves all of it, with the same transform
(``icegroup.spark_jobs.transforms:enrich_events``), into a sink of its own:

- ``A2``: a plain Spark batch job (``baselines.py batch``), a process of its own;
- ``A2_warm``: the same job in a session that has already run it once on a small table (``batch
  --warm-up``), timed from that job's start to its end: the baseline a warm Borrower is compared
  with, since neither pays a JVM start;
- ``B1``: Structured Streaming with trigger ``AvailableNow`` (``baselines.py stream``), a process;
- ``consume``: ``icegroup consume GROUP --until-caught-up``, a process, as the docs tell users to run it;
- ``dagster``: what a deployment gets by default, a running ``dagster dev`` (daemon and webserver)
  over a group with the default ``warm_borrowers: 1``: its Leader keeps a Borrower run up, Spark
  started, before any work. Each round's group reads a source of its own: one small commit
  (``WARM_UP_ROWS``) is consumed first, as a deployed group has consumed before, and the Borrower,
  idle then, rehearses its lease path (``borrower_rehearsal_rows``), as a deployed one has done by
  the time a backlog comes: the round waits for the run to say it did; then the workload's backlog
  (the same data as the others') is written to a branch of that source and
  ``main`` moves to it in one commit (``fill_at_once``), and the arm is timed from that commit, the
  append, to the sink commit that catches the group up. The Leader sensor runs all along; the warm
  Borrower's look at the source (it ticks itself when the source moved) or the sensor's tick,
  whichever grants first, counts. The run launch and the JVM start were paid when the group was
  deployed, so they do not;
- ``dagster_cold``: the fallback, ``warm_borrowers: 0``: the group's Leader sensor is turned on
  once the backlog is committed (``dagster sensor start``); the arm is timed from then until the
  sink commit that catches the group up. Its Leader ticks, the Borrower run the daemon launches
  (in its own process, with the one-op job's in-process executor), and that run's cold Spark all
  count;

The process arms (but ``A2_warm``) are timed from process start to exit, so each pays its own JVM
start, as a user's job would. A2, A2_warm, B1 and consume alternate in a rotating order for ROUNDS
rounds; the Dagster rounds run after them, with the daemon up only then so it does not take cores
from the other arms. Every sink is checked equal to its source, key by key. The figures are
medians, and throughput ratios to A2 (``A2 seconds / arm seconds``: above 1 is faster than A2);
the warm Borrower is also set against A2_warm. Run: ``make bench`` (writes
tests/benchmarks/results/throughput.json and throughput_latency.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from dagster_graphql import DagsterGraphQLClient
from pyiceberg.catalog import Catalog

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.heartbeats import read_beats
from tests.benchmarks.measure import (
    baseline_command,
    caught_up,
    check_same_rows,
    consume_command,
    provenance,
    run_timed,
    visible_ms,
    wait_for,
)
from tests.benchmarks.plot import plot
from tests.benchmarks.workloads import W1, W2, Workload, append_events, fill, fill_at_once
from tests.dagster_dev import dagster_dev, dagster_env, new_instance, set_sensor, ui_answers
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 3
ARMS = ("A2", "A2_warm", "B1", "consume", "dagster", "dagster_cold")
PROCESS_ARMS = ARMS[:4]
JVM_STARTED = frozenset({"A2", "B1", "consume", "dagster_cold"})  # arms whose time includes starting Spark's JVM
WARM_UP_TABLE = "bench.warm_up"
WARM_UP_ROWS = 300
WARM_UP_FIRST_ID = 1_000_000_000  # after any workload's event ids, so the warm-up rows are keys of their own
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results" / "throughput.json"


def group(name: str) -> GroupConfig:
    """A process or cold Dagster arm's group: no warm Borrower, one that exits 10 s after its last lease."""
    return GroupConfig(
        name=name, source=SOURCE, sink=f"bench.{name}", transform=TRANSFORM, borrower_idle_s=10, warm_borrowers=0
    )


def warm_group(index: int) -> GroupConfig:
    """The default Dagster arm's group of round ``index``: a source of its own, every other setting the default."""
    name = f"dagster_{index}"
    return GroupConfig(name=name, source=f"bench.source_dagster_{index}", sink=f"bench.{name}", transform=TRANSFORM)


def process_arm(arm: str, index: int, folder: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """The sink and the command line of one round of a process arm."""
    sink = f"bench.{arm.lower()}_{index}"
    if arm == "A2":
        return sink, baseline_command("batch", SOURCE, sink)
    if arm == "A2_warm":
        return sink, baseline_command("batch", SOURCE, sink, "--warm-up", WARM_UP_TABLE)
    if arm == "B1":
        return sink, baseline_command("stream", SOURCE, sink, "--checkpoint", str(folder / f"checkpoint_{index}"))
    return sink, consume_command(env["ICEGROUP_GROUPS"], sink.split(".")[1])


def run_workload(workload: Workload, rounds: int, folder: Path) -> tuple[dict[str, list[float]], int]:
    """Every arm ``rounds`` times on one source; seconds per arm (every sink checked) and the source's bytes."""
    home = folder / "lake"
    catalog = load_lakehouse(env=home_env(home)).catalog()
    print(f"{workload.name}: {workload.snapshots} snapshots of {workload.rows_per_snapshot} rows", flush=True)
    source = create_source(catalog, SOURCE)
    fill(source, workload)
    head = source.current_snapshot()
    assert head is not None
    assert head.summary is not None
    source_bytes = int(head.summary["total-files-size"])
    append_events(create_source(catalog, WARM_UP_TABLE), WARM_UP_FIRST_ID, WARM_UP_ROWS, seed=1)
    groups = [group(f"{arm}_{i}") for i in range(rounds) for arm in ("consume", "dagster_cold")]
    groups += [warm_group(i) for i in range(rounds)]
    env = dagster_env(home, write_groups(folder / "groups.yaml", *groups), folder / "dagster")
    new_instance(folder / "dagster")
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for index in range(rounds):
        turn = index % len(PROCESS_ARMS)
        order = PROCESS_ARMS[turn:] + PROCESS_ARMS[:turn]
        for arm in order:
            sink, command = process_arm(arm, index, folder, env)
            log = folder / f"{arm}_{index}.log"
            elapsed = run_timed(command, env, log)
            if arm == "A2_warm":
                elapsed = job_seconds(log)
            check_same_rows(catalog, SOURCE, sink)
            seconds[arm].append(round(elapsed, 2))
            print(f"{workload.name} round {index + 1}/{rounds}: {arm} {elapsed:.1f}s, sink verified", flush=True)
    for index in range(rounds):
        set_sensor(f"dagster_cold_{index}_leader", running=False, env=env)
        set_sensor(f"dagster_{index}_leader", running=False, env=env)
    log = folder / "dagster.log"
    with dagster_dev(env, log) as port:
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        wait_for(lambda: ui_answers(client), 180, "Dagster webserver", log)
        for index in range(rounds):
            name = f"dagster_cold_{index}"
            set_sensor(f"{name}_leader", running=True, env=env)
            started_ms = time.time() * 1000
            wait_for(lambda name=name: caught_up(catalog, name), 900, f"{name} caught up", log)
            elapsed = (visible_ms(catalog.load_table(f"bench.{name}"))[-1][0] - started_ms) / 1000
            check_same_rows(catalog, SOURCE, f"bench.{name}")
            seconds["dagster_cold"].append(round(elapsed, 2))
            print(f"{workload.name} round {index + 1}/{rounds}: dagster_cold {elapsed:.1f}s, sink verified", flush=True)
            set_sensor(f"{name}_leader", running=False, env=env)
            time.sleep(15)  # the round's Borrower exits after borrower_idle_s; the next round starts cold
        for index in range(rounds):
            elapsed = warm_round(workload, warm_group(index), catalog, client, env, log)
            seconds["dagster"].append(round(elapsed, 2))
            print(f"{workload.name} round {index + 1}/{rounds}: dagster {elapsed:.1f}s, sink verified", flush=True)
    return seconds, source_bytes


def job_seconds(log: Path) -> float:
    """The seconds ``baselines.py batch --warm-up`` printed for its timed job."""
    lines = [line for line in log.read_text().splitlines() if line.startswith("job seconds: ")]
    if len(lines) != 1:
        raise RuntimeError(f"no 'job seconds:' line in {log}")
    return float(lines[0].removeprefix("job seconds: "))


def warm_round(
    workload: Workload,
    warm: GroupConfig,
    catalog: Catalog,
    client: DagsterGraphQLClient,
    env: dict[str, str],
    log: Path,
) -> float:
    """One round of ``dagster``: the group's warm Borrower consumes a small commit, then the backlog is timed.

    Returns the seconds from the commit that shows the backlog on ``main`` to the sink commit that
    catches the group up. The Borrower run is ended afterwards, so it takes no cores
    from the next round.
    """
    source = create_source(catalog, warm.source)
    append_events(source, WARM_UP_FIRST_ID, WARM_UP_ROWS, seed=1)
    sensor = f"{warm.name}_leader"
    set_sensor(sensor, running=True, env=env)
    wait_for(lambda: caught_up(catalog, warm.name), 300, f"{warm.name} warmed up", log)
    borrowers = list(read_beats(catalog, warm.name))
    if len(borrowers) != 1:
        raise RuntimeError(f"{warm.name}: expected one warm Borrower run beating, found {borrowers}; see {log}")
    if warm.borrower_rehearsal_rows:
        instance = DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"]))
        wait_for(lambda: rehearsal_over(instance, borrowers[0]), 300, f"{warm.name}'s rehearsal", log)
    started_ms = fill_at_once(source, workload)
    wait_for(lambda: caught_up(catalog, warm.name), 900, f"{warm.name} caught up", log)
    elapsed = (visible_ms(catalog.load_table(warm.sink))[-1][0] - started_ms) / 1000
    check_same_rows(catalog, warm.source, warm.sink)
    if list(read_beats(catalog, warm.name)) != borrowers:
        raise RuntimeError(f"{warm.name}: the backlog was not consumed by the warm Borrower run {borrowers[0]}")
    set_sensor(sensor, running=False, env=env)
    client.terminate_run(borrowers[0])
    return elapsed


def rehearsal_over(instance: DagsterInstance, run_id: str) -> bool:
    """Whether the warm Borrower run has said how its rehearsal went (``spark_jobs/borrower/rehearsal.py``)."""
    return any("rehears" in event.user_message for event in instance.all_logs(run_id))


def summary(workload: Workload, seconds: dict[str, list[float]], source_bytes: int) -> dict[str, object]:
    """Medians, rows per second and ratios to A2 and to B1, for the arms that ran."""
    medians = {arm: round(statistics.median(values), 2) for arm, values in seconds.items()}
    return {
        "rounds": len(seconds["A2"]),  # per workload: a later run of one workload may use another count
        "workload": {
            "snapshots": workload.snapshots,
            "rows_per_snapshot": workload.rows_per_snapshot,
            "rows": workload.rows,
            "streams": 3,
            "source_bytes": source_bytes,
        },
        "seconds": seconds,
        "median_s": medians,
        "rows_per_s": {arm: round(workload.rows / median) for arm, median in medians.items()},
        "throughput_over_A2": {arm: round(medians["A2"] / median, 2) for arm, median in medians.items()},
        "throughput_over_B1": {arm: round(medians["B1"] / median, 2) for arm, median in medians.items()},
        "warm_borrower_over_A2_warm": round(medians["A2_warm"] / medians["dagster"], 2),
        "includes_jvm_start": {arm: arm in JVM_STARTED for arm in medians},
    }


def main() -> None:
    """Run both workloads and record them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    parser.add_argument("--workload", choices=("W1", "W2"), action="append", help="default: both")
    args = parser.parse_args()
    chosen = [w for w in (W1, W2) if args.workload is None or w.name in args.workload]
    result: dict[str, object] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    result.update({"cores": os.cpu_count(), "rounds": args.rounds, "transform": TRANSFORM})
    for workload in chosen:
        before = result.pop(workload.name, None)
        measured = provenance()  # before the rounds: the commit whose code they run
        with tempfile.TemporaryDirectory(
            prefix=f"icegroup-bench-{workload.name}-", ignore_cleanup_errors=True
        ) as folder:
            seconds, source_bytes = run_workload(workload, args.rounds, Path(folder))
        entry: dict[str, object] = {**measured, **summary(workload, seconds, source_bytes)}
        if isinstance(before, dict):  # one run back, as record_beside_the_run_before keeps it
            entry["run_before"] = {k: v for k, v in before.items() if k != "run_before"}
        result[workload.name] = entry
        ratios = result[workload.name]["throughput_over_A2"]  # type: ignore[index]
        print(f"{workload.name} throughput / A2: " + "  ".join(f"{a} {r}x" for a, r in ratios.items()), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    plot()


if __name__ == "__main__":
    main()
