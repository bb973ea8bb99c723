"""``icegroup consume`` on a group with nothing to do: how long until it says so, against what bounds it.

A scheduled consume run usually finds little or nothing new. A group with nothing to do (no shard
or lease open, no source commit to plan, no window to report complete) is answered from its
registry: no Dagster run, no JVM, and no import of Dagster. Side by side, in one run, on one
caught-up lakehouse (one consume until caught up leaves nothing, windows reported included):

- arm ``consume``: ``icegroup consume GROUP`` as a user runs it, a new process each time;
- arm ``imports``: a new Python process that only imports the ``icegroup`` command's module, the
  floor any ``icegroup`` command pays;
- arm ``with_dagster``: the same imports and Dagster's, what an idle consume paid while it made a run;
- arm ``spark_start``: those imports and the lakehouse's SparkSession, what every consume paid
  before it started Spark lazily.

The arms alternate for ROUNDS rounds; the figures are medians, and ratios to ``imports``. Run:
``make bench`` (writes tests/benchmarks/results/idle_consume.json).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.lag import Work, pending_work
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import provenance, record_beside_the_run_before
from tests.factories import append_batches, create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 5
REPO = Path(__file__).resolve().parents[2]
ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
RESULTS = Path(__file__).parent / "results" / "idle_consume.json"
IMPORTS = "import icegroup.dagster_project.cli.entry"  # the package itself imports nothing until asked
DAGSTER = f"{IMPORTS}\nimport dagster"
SPARK = (
    f"{IMPORTS}\nfrom icegroup.iceberg.config.lakehouse import load_lakehouse\n"
    "from icegroup.spark_jobs.session import get_session\n"
    "get_session(load_lakehouse()).stop()"
)


def timed(command: list[str], env: dict[str, str]) -> float:
    """Seconds one process takes from start to exit; it must succeed."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    """Make a caught-up group, then time the arms interleaved and record medians and ratios."""
    measured = provenance()
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-idle-") as tmp:
        folder = Path(tmp)
        home = folder / "lake"
        lakehouse = load_lakehouse(env=home_env(home))
        # The day of the source's commits, which the command line takes for an unset window_start: the
        # check below then counts the windows the consume reports, not every day since the default's.
        today = datetime.now(UTC).date()
        group = GroupConfig(name="bench", source="bench.events", sink="bench.events_out", window_start=today)
        append_batches(create_source(lakehouse.catalog(), group.source), 3, 300)
        groups = write_groups(folder / "groups.yaml", group)
        env = {**os.environ, **home_env(home), "DAGSTER_HOME": str(folder / "dagster")}
        consume = [ICEGROUP, "--groups", str(groups), "consume", group.name, "--until-caught-up"]
        timed(consume, env)
        if pending_work(lakehouse.catalog(), group) is not Work.NONE:
            raise RuntimeError(f"group {group.name} still has work after a consume until caught up")
        arms = {
            "consume": consume,
            "imports": [sys.executable, "-c", IMPORTS],
            "with_dagster": [sys.executable, "-c", DAGSTER],
            "spark_start": [sys.executable, "-c", SPARK],
        }
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        for index in range(ROUNDS):
            for arm in arms if index % 2 == 0 else reversed(arms):
                times[arm].append(round(timed(arms[arm], env), 2))
            print(f"round {index + 1}/{ROUNDS}: " + "  ".join(f"{a} {t[-1]:.2f}s" for a, t in times.items()))
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    result = {
        **measured,
        "workload": "a caught-up group (3 snapshots of 300 rows consumed, windows reported); each arm a new process",
        "cores": os.cpu_count(),
        "seconds": times,
        "median_s": medians,
        "over_imports": {arm: round(m / medians["imports"], 2) for arm, m in medians.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    record_beside_the_run_before(RESULTS, result)
    print(
        f"idle consume {medians['consume']:.2f}s; imports alone {medians['imports']:.2f}s; "
        f"with Dagster's {medians['with_dagster']:.2f}s; with a SparkSession {medians['spark_start']:.2f}s"
    )


if __name__ == "__main__":
    main()
