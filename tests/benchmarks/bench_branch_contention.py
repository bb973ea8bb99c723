"""What a group's source branch costs the producer: its commit retries and latency, with and without the branch.

Moving the group's branch (``iceberg/store/source_branch.py``) is a commit to the source table, which
is the producer's table. The producer's own commits then contend with it: a commit that loses
the race must load the table again and retry. Java's Iceberg retries on its own; pyiceberg does
not, so the producer here retries the way a pyiceberg producer has to. The arms run side by side
in one run, ROUNDS times, interleaved:

- ``no group``: the producer alone, appending every PRODUCE_EVERY_S;
- ``group, no branch``: a group follows it. Its Leader ticks every TICK_EVERY_S, and each lease is
  committed to the sink at once, as a Borrower would (no Spark). The branch move is switched off;
  the registration still writes to the source;
- ``group, branch``: the same, as shipped, with the branch moved whenever planning reached a newer
  snapshot.

Each arm reports the producer's appends, the share that had to retry, retries per append, and the
append latency (p50, p95) as a ratio to ``no group``. It also counts the group's own writes to the
source per minute: branch moves and registrations.

Run: ``python -m tests.benchmarks.bench_branch_contention`` (writes
tests/benchmarks/results/branch_contention.json).
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.errors import RegistryConflict
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registrations import register
from icegroup.iceberg.store.source_branch import keep_ref
from tests.factories import create_source, events, next_event_id
from tests.sink_commits import commit_lease
from tests.stack_env import home_env

ARMS = ("no group", "group, no branch", "group, branch")
ROUNDS = 3
SECONDS = 20.0
PRODUCE_EVERY_S = 1.0
TICK_EVERY_S = 1.0
ROWS = 50
RESULTS = Path(__file__).parent / "results" / "branch_contention.json"


class Retries(logging.Handler):
    """Counts pyiceberg's own commit retries on one thread: it retries a lost append by itself, and logs each."""

    def __init__(self, thread: int) -> None:
        """Only retries on ``thread`` (the producer's) count."""
        super().__init__()
        self.thread = thread
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        """One more retry, if this is one of the producer's."""
        if record.thread == self.thread and record.getMessage().startswith("Commit failed due to a concurrent update"):
            self.count += 1


def produce(catalog: Catalog, source: str, stop: threading.Event, first_id: int) -> list[tuple[float, int]]:
    """Append every PRODUCE_EVERY_S until stopped; each append's latency (ms) and how many retries it took.

    pyiceberg retries a commit that lost the race by itself (4 times by default); a commit that still
    fails is loaded again and tried again here, as a producer has to.
    """
    done: list[tuple[float, int]] = []
    retries = Retries(threading.get_ident())
    logging.getLogger("pyiceberg.table").addHandler(retries)
    try:
        while not stop.wait(PRODUCE_EVERY_S):
            started = time.perf_counter()
            before = retries.count
            failed = 0
            while True:
                table = catalog.load_table(source)
                try:
                    table.append(events(first_id + len(done) * ROWS, ROWS, seed=len(done)))
                    break
                except CommitFailedException:
                    failed += 1
            done.append(((time.perf_counter() - started) * 1000, retries.count - before + failed))
    finally:
        logging.getLogger("pyiceberg.table").removeHandler(retries)
    return done


def follow(catalog: Catalog, group: GroupConfig, stop: threading.Event) -> None:
    """The group's Leader every TICK_EVERY_S, each lease it grants committed to the sink at once."""
    while not stop.wait(TICK_EVERY_S):
        try:
            result = tick(catalog, group, lambda _: RunState.SUCCEEDED)
        except RegistryConflict:
            continue
        for lease in result.launch:
            commit_lease(catalog, group, result.state, lease)


@contextmanager
def counting(arm: str, writes: dict[str, int]) -> Iterator[None]:
    """The Leader's two writes to the source, counted; in ``group, no branch`` the branch never moves."""

    def moved(*args: Any) -> object:
        move = None if arm == "group, no branch" else keep_ref(*args)
        writes["branch"] += move is not None
        return move

    def registered(*args: Any) -> bool:
        wrote = register(*args)
        writes["registration"] += wrote
        return wrote

    with (
        mock.patch("icegroup.iceberg.leader.keep_ref", moved),
        mock.patch("icegroup.iceberg.leader.register", registered),
    ):
        yield


def run_arm(catalog: Catalog, group: GroupConfig, arm: str) -> tuple[list[tuple[float, int]], dict[str, int]]:
    """One arm for SECONDS: the producer's appends, and the group's writes to the source meanwhile."""
    stop = threading.Event()
    appended: list[tuple[float, int]] = []
    writes = {"branch": 0, "registration": 0}

    first_id = next_event_id(catalog.load_table(group.source))

    def producer() -> None:
        appended.extend(produce(catalog, group.source, stop, first_id))

    threads = [threading.Thread(target=producer)]
    if arm != "no group":
        threads.append(threading.Thread(target=follow, args=(catalog, group, stop)))
    with counting(arm, writes):
        for thread in threads:
            thread.start()
        time.sleep(SECONDS)
        stop.set()
        for thread in threads:
            thread.join()
    return appended, writes


def main() -> int:
    """Run the arms interleaved, print and record the producer's figures as ratios to the arm without a group."""
    home = Path(tempfile.mkdtemp(prefix="icegroup-bench-branch-"))
    catalog = load_lakehouse(env=home_env(home)).catalog()
    group = GroupConfig.model_validate({"name": "follow", "source": "bc.events", "sink": "bc.out"})
    create_source(catalog, group.source).append(events(1, ROWS, seed=0))
    tick(catalog, group, lambda _: RunState.MISSING)
    appends: dict[str, list[tuple[float, int]]] = {arm: [] for arm in ARMS}
    writes = {arm: {"branch": 0, "registration": 0} for arm in ARMS}
    for _ in range(ROUNDS):
        for arm in ARMS:
            done, wrote = run_arm(catalog, group, arm)
            appends[arm] += done
            for kind, count in wrote.items():
                writes[arm][kind] += count
    minutes = ROUNDS * SECONDS / 60
    summary: dict[str, dict[str, float]] = {}
    for arm in ARMS:
        latencies = sorted(ms for ms, _ in appends[arm])
        retries = [n for _, n in appends[arm]]
        summary[arm] = {
            "appends": len(retries),
            "retried_share": round(sum(1 for n in retries if n) / len(retries), 3),
            "retries_per_append": round(sum(retries) / len(retries), 3),
            "latency_ms_p50": round(statistics.median(latencies), 1),
            "latency_ms_p95": round(latencies[int(0.95 * (len(latencies) - 1))], 1),
            "branch_moves_per_min": round(writes[arm]["branch"] / minutes, 1),
            "registrations_per_min": round(writes[arm]["registration"] / minutes, 1),
        }
    base = summary["no group"]
    for arm, row in summary.items():
        row["latency_p50_ratio"] = round(row["latency_ms_p50"] / base["latency_ms_p50"], 2)
        row["latency_p95_ratio"] = round(row["latency_ms_p95"] / base["latency_ms_p95"], 2)
        print(
            f"{arm}: {row['appends']:.0f} appends, {row['retried_share']:.1%} retried "
            f"({row['retries_per_append']} retries each), latency p50 {row['latency_ms_p50']} ms "
            f"({row['latency_p50_ratio']}x), p95 {row['latency_ms_p95']} ms ({row['latency_p95_ratio']}x); "
            f"the group's writes to the source: {row['branch_moves_per_min']} branch moves and "
            f"{row['registrations_per_min']} registrations a minute"
        )
    record = {
        "produce_every_s": PRODUCE_EVERY_S,
        "tick_every_s": TICK_EVERY_S,
        "seconds_per_arm": SECONDS,
        "rounds": ROUNDS,
        "catalog": "SQLite (the embedded default)",
        "arms": summary,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(f"recorded {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
