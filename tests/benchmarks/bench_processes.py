"""One consumer process or two: does a second ``icegroup consume`` on the same machine help?

A second process can take leases the first is not working on, but it starts a second JVM and its
own Spark. On a 2-core machine the two share the cores. The benchmark measures it, side by side:

- arm ``one``: one ``icegroup consume GROUP --until-caught-up`` on a fresh lakehouse;
- arm ``two``: two of them started at the same moment on a fresh lakehouse of the same data;
- every arm consumes the same source (SNAPSHOTS appends over 3 streams, ROWS_PER_SNAPSHOT rows each)
  in 18 shards of 4 files, 2 shards a lease, with ``max_borrowers: 2``; its sink is verified equal
  to its source, and the arms alternate
  (one, two, two, one, ...) for ROUNDS rounds so drift in the machine hits both alike.

The figure is wall time from start until every process has exited caught up, as a ratio to arm
``one``. Run: ``make bench`` (writes tests/benchmarks/results/consumer_processes.json).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.verify import verify_group
from tests.factories import append_batches, create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 2
SNAPSHOTS = 24
ROWS_PER_SNAPSHOT = 20_000
REPO = Path(__file__).resolve().parents[2]
ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
RESULTS = Path(__file__).parent / "results" / "consumer_processes.json"


def run_arm(processes: int, folder: Path) -> float:
    """Seconds until ``processes`` consumers started together have all caught up; the sink is verified."""
    home = folder / "lake"
    lakehouse = load_lakehouse(env=home_env(home))
    group = GroupConfig(
        name="bench", source="bench.events", sink="bench.events_out", max_borrowers=2,
        shard_caps={"max_files": 4}, lease_max_shards=2,
    )  # fmt: skip
    append_batches(create_source(lakehouse.catalog(), group.source), SNAPSHOTS, ROWS_PER_SNAPSHOT)
    groups = write_groups(folder / "groups.yaml", group)
    env = {**os.environ, **home_env(home), "DAGSTER_HOME": str(folder / "dagster")}
    command = [ICEGROUP, "--groups", str(groups), "consume", group.name, "--until-caught-up", "--max-wait", "300"]
    started = time.perf_counter()
    procs = [
        subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(processes)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"consume exited {proc.returncode}: {err.decode()[-2000:]}")
    elapsed = time.perf_counter() - started
    report = verify_group(lakehouse.catalog(), group, key="event_id")
    if not report.ok:
        raise RuntimeError(f"sink does not equal source: {report.line()}")
    return elapsed


def main() -> None:
    """Run the arms interleaved and record medians and the ratio of two processes to one."""
    times: dict[str, list[float]] = {"one": [], "two": []}
    order = ["one", "two", "two", "one"] * ((ROUNDS + 1) // 2)
    for index, arm in enumerate(order[: 2 * ROUNDS]):
        with tempfile.TemporaryDirectory(prefix=f"icegroup-bench-{arm}-") as folder:
            seconds = run_arm(1 if arm == "one" else 2, Path(folder))
        times[arm].append(round(seconds, 1))
        print(f"run {index + 1}/{2 * ROUNDS}: {arm} process(es): {seconds:.1f}s", flush=True)
    one, two = statistics.median(times["one"]), statistics.median(times["two"])
    result = {
        "workload": {
            "snapshots": SNAPSHOTS,
            "rows_per_snapshot": ROWS_PER_SNAPSHOT,
            "streams": 3,
            "shards": 18,
            "lease_max_shards": 2,
            "max_borrowers": 2,
        },
        "cores": os.cpu_count(),
        "seconds": times,
        "median_s": {"one": one, "two": two},
        "two_over_one": round(two / one, 2),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"two processes / one process, wall time to caught up: {result['two_over_one']}x")


if __name__ == "__main__":
    main()
