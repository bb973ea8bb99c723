"""What a Borrower that publishes many small commits pays for them: time and lost races, one slot or several.

The case group commit and a publish in flight are for (``spark_jobs/sink/group_commit.py``,
``spark_jobs/borrower/publishing.py``): one process holds a lease per slot (``leases_per_borrower: 1``,
``--borrowers`` slots, 3 by default) and every shard commits alone (``commit_batch_rows`` 1, a
shard per source file), so the threads publish small commits to one sink all the time; with one
slot, one lease stages and publishes shard after shard. One
process, one session warmed up first; ``--rounds`` times, a new group consumes the same source
(``--snapshots`` appends of 300 rows, round-robin over three streams) until caught up, into a sink of
its own, checked equal to the source key by key. Per round it records the seconds, the sink's
commits and the conflicting commits the publishes retried.

It measures one checkout; ``--label`` names it in ``results/group_commit.json``, so two checkouts
(before and after a change) can be run in turn, A B A B, and read side by side. Run:
``python -m tests.benchmarks.bench_group_commit --label after``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.spark_jobs.consume import ConsumeHooks, consume
from icegroup.spark_jobs.session import get_session
from tests.benchmarks.measure import check_same_rows
from tests.benchmarks.workloads import Workload, append_events, fill
from tests.factories import create_source
from tests.stack_env import home_env

SOURCE = "bench.events"
WARM_UP = "bench.warm_up"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
FIELDS = {"leases_per_borrower": 1, "commit_batch_rows": 1, "shard_caps": {"max_files": 1}}
RESULTS = Path(__file__).parent / "results" / "group_commit.json"


def run(snapshots: int, rounds: int, borrowers: int, home: Path) -> list[dict[str, float]]:
    """``rounds`` consumes of one source by new groups in one warm session; each round's figures."""
    lakehouse = load_lakehouse(env=home_env(home))
    catalog = lakehouse.catalog()
    fill(create_source(catalog, SOURCE), Workload("G", snapshots=snapshots, rows_per_snapshot=300))
    append_events(create_source(catalog, WARM_UP), 1_000_000_000, 300, seed=1)
    spark = get_session(lakehouse)
    figures = []
    for index in range(-1, rounds):
        name = "warm_up" if index < 0 else f"round_{index}"
        group = GroupConfig.model_validate(
            {"name": name, "source": WARM_UP if index < 0 else SOURCE, "sink": f"bench.out_{name}",
             "transform": TRANSFORM, "warm_borrowers": 0, "max_borrowers": borrowers, **FIELDS}
        )  # fmt: skip
        hooks = ConsumeHooks(spark=lambda: spark, observe_others=lambda _: RunState.MISSING, progress=lambda _: None)
        started = time.perf_counter()
        summary = consume(lakehouse, group, f"bench-{name}", hooks)
        elapsed = time.perf_counter() - started
        if not summary.caught_up:
            raise RuntimeError(f"{name}: consume ended before it caught up")
        if index < 0:
            continue
        check_same_rows(catalog, SOURCE, group.sink)
        sink = catalog.load_table(group.sink)
        commits = sum(1 for s in sink.snapshots() if (s.summary or {}).get("icegroup.group") == name)
        figures.append(
            {
                "seconds": round(elapsed, 2),
                "sink_commits": commits,
                "conflicts_retried": sum(report.commit_conflicts for report in summary.reports),
                "leases": summary.leases,
            }
        )
        print(f"round {index + 1}/{rounds}: {figures[-1]}, sink verified", flush=True)
    spark.stop()
    return figures


def main() -> None:
    """Run the rounds and record them under ``--label``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="what this checkout is (before, after)")
    parser.add_argument("--snapshots", type=int, default=30, help="source appends of 300 rows (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="consumes by new groups (default %(default)s)")
    parser.add_argument("--borrowers", type=int, default=3, help="leases at once, max_borrowers (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-group-commit-") as tmp:
        figures = run(args.snapshots, args.rounds, args.borrowers, Path(tmp) / "lake")
    result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs = result.setdefault(args.label, [])
    runs.append(
        {
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "snapshots": args.snapshots,
            "fields": FIELDS | {"max_borrowers": args.borrowers},
            "rounds": figures,
            "median": {key: statistics.median(f[key] for f in figures) for key in figures[0]},
        }
    )
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
