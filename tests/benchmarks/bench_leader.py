"""Leader planning cost: does a tick stay proportional to the new snapshots, not to history?

Arms, side by side in one run on the same tables (JMH-style: 1 warm-up, then measured repeats):
- ``icegroup``: ``plan_increment`` for a fixed gap of new snapshots (what a Leader tick plans);
- ``baseline``: pyiceberg's own ``incremental_append_scan(...).plan_files()`` for the same gap;
- ``plan_all``: both of them for the whole history at once, what a new group's first tick plans
  (Iceberg's incremental scan reads every new snapshot's manifest list; icegroup reads the newest);
- ``idle_tick``: a whole Leader tick of a caught-up group (registry load, sink check, empty plan);
- ``full_tick``: the first tick of a new group over the whole history, capped at
  ``max_snapshots_per_tick`` (plan, cut, assign, registry CAS): the longest a tick gets.
Each is measured at two history sizes. Reported as ratios (icegroup / baseline, and large history /
small history), because absolute times on a shared 2-core machine are noise.

Run: ``make bench`` (writes tests/benchmarks/results/leader_planning.json).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pyiceberg.table import Table

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.shards import plan_increment
from tests.factories import append_batches, create_source
from tests.stack_env import home_env

HISTORIES = (50, 400)
GAP = 10
REPEATS = 7
RESULTS = Path(__file__).parent / "results" / "leader_planning.json"


def measure(fn: Callable[[], object]) -> float:
    """Median milliseconds of REPEATS runs after one warm-up."""
    fn()
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def planned_by_pyiceberg(table: Table) -> int:
    """How many files pyiceberg's incremental scan plans over the table's whole history."""
    return len(list(table.incremental_append_scan().plan_files()))


def main() -> int:
    """Build the tables, run the arms, print and record the ratios."""
    home = Path(tempfile.mkdtemp(prefix="icegroup-bench-"))
    catalog = load_lakehouse(env=home_env(home)).catalog()
    rows: dict[int, dict[str, float]] = {}
    for history in HISTORIES:
        name = f"h{history}"
        source = create_source(catalog, f"{name}.events")
        append_batches(source, history, 3)
        table = catalog.load_table(f"{name}.events")
        position = table.current_snapshot()
        append_batches(table, GAP, 3)
        table = catalog.load_table(f"{name}.events")
        after = position.snapshot_id if position else None
        group = GroupConfig(name=name, source=f"{name}.events", sink=f"{name}.out")
        rows[history] = {
            "icegroup_plan_ms": measure(
                lambda table=table, after=after, group=group: plan_increment(table, after, group)
            ),
            "baseline_plan_ms": measure(
                lambda table=table, after=after: list(
                    table.incremental_append_scan(from_snapshot_id_exclusive=after).plan_files()
                )
            ),
        }
        everything = GroupConfig(
            name=f"{name}_all", source=f"{name}.events", sink=f"{name}.all_out", max_snapshots_per_tick=history + GAP
        )
        rows[history] |= {
            "icegroup_plan_all_ms": measure(partial(plan_increment, table, None, everything)),
            "baseline_plan_all_ms": measure(partial(planned_by_pyiceberg, table)),
        }
        tick_group = GroupConfig(name=f"{name}_tick", source=f"{name}.events", sink=f"{name}.tick_out", start="latest")
        tick(catalog, tick_group, lambda lease: RunState.MISSING)
        rows[history]["idle_tick_ms"] = measure(lambda g=tick_group: tick(catalog, g, lambda lease: RunState.MISSING))
        started = time.perf_counter()
        tick(
            catalog,
            GroupConfig(name=f"{name}_full", source=f"{name}.events", sink=f"{name}.full_out"),
            lambda _: RunState.MISSING,
        )
        rows[history]["full_tick_ms"] = (time.perf_counter() - started) * 1000
    small, large = rows[HISTORIES[0]], rows[HISTORIES[-1]]
    report = {
        "what": f"plan a gap of {GAP} new snapshots, and the whole history; histories {HISTORIES}; "
        f"median of {REPEATS} after warm-up",
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "arms_ms": {str(h): {k: round(v, 1) for k, v in r.items()} for h, r in rows.items()},
        "ratios": {
            f"icegroup_vs_baseline_at_{h}": round(r["icegroup_plan_ms"] / r["baseline_plan_ms"], 2)
            for h, r in rows.items()
        }
        | {
            f"icegroup_vs_baseline_planning_all_{h + GAP}_at_{h}": round(
                r["icegroup_plan_all_ms"] / r["baseline_plan_all_ms"], 2
            )
            for h, r in rows.items()
        }
        | {
            "icegroup_growth_large_vs_small_history": round(large["icegroup_plan_ms"] / small["icegroup_plan_ms"], 2),
            "baseline_growth_large_vs_small_history": round(large["baseline_plan_ms"] / small["baseline_plan_ms"], 2),
            "idle_tick_growth_large_vs_small_history": round(large["idle_tick_ms"] / small["idle_tick_ms"], 2),
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
