"""Forward lineage from a source file, checked row by row: precision and recall, by file and by shard.

A group with the demo transform (a select: rows keep their file's reference) consumes a source of
many small appends, so each shard reads several files. For a random sample of source files, the
truth is the event ids the file holds, read from the file itself. Two answers are scored:

- ``by_file``: the rows ``icegroup lineage --source-file`` names (its ``sink_filter``: the file's
  shards, and within them the rows whose ``_ig_file`` is the file's reference);
- ``by_shard``: every row of the file's shards, what the answer named before rows carried their
  file.

Precision is the share of named rows that came from the file; recall, the share of the file's rows
that were named. Then the consumed windows are replayed (``replay_window``) and the same files
scored again (``after_replay``): a replayed window's rows must keep their file references.
Run: ``make bench`` (writes tests/benchmarks/results/lineage_precision.json).
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.lineage import by_source_file
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import shard_filter
from icegroup.iceberg.store.tables import shards_as_numbers
from icegroup.spark_jobs.replay import replay_window
from icegroup.spark_jobs.session import get_session
from tests.benchmarks.workloads import Workload, fill
from tests.factories import create_source, today
from tests.integration.helpers import drive, quiet

WORKLOAD = Workload("P", snapshots=40, rows_per_snapshot=2_000)
SAMPLE = 25
RESULTS = Path(__file__).parent / "results" / "lineage_precision.json"


def file_events(table: Table) -> dict[str, set[int]]:
    """Every data file of the table and the event ids it holds, read from the file itself."""
    held = {}
    for path in table.inspect.files().column("file_path").to_pylist():
        with table.io.new_input(path).open() as stream:
            held[path] = set(pq.read_table(stream, columns=["event_id"]).column("event_id").to_pylist())
    return held


def scored(named: list[int], truth: set[int]) -> tuple[float, float]:
    """Precision and recall of the named event ids against the file's own."""
    hits = sum(1 for event_id in named if event_id in truth)
    return hits / len(named) if named else 0.0, len(truth & set(named)) / len(truth)


def score(
    catalog: Catalog, group: GroupConfig, held: dict[str, set[int]], paths: list[str]
) -> tuple[dict[str, list[tuple[float, float]]], list[float]]:
    """Both answers' precision and recall for each of ``paths``, and how long each answer took."""
    sink = catalog.load_table(group.sink)
    scores: dict[str, list[tuple[float, float]]] = {"by_file": [], "by_shard": []}
    answer_s = []
    for path in paths:
        started = time.perf_counter()
        found = by_source_file(catalog, group, path)
        answer_s.append(time.perf_counter() - started)
        assert found.sink_filter is not None
        exact = sink.scan(row_filter=found.sink_filter, selected_fields=("event_id",)).to_arrow()
        shards = shard_filter({e.shard_id for e in found.found}, shards_as_numbers(sink))
        whole = sink.scan(row_filter=shards, selected_fields=("event_id",)).to_arrow()
        scores["by_file"].append(scored(exact.column("event_id").to_pylist(), held[path]))
        scores["by_shard"].append(scored(whole.column("event_id").to_pylist(), held[path]))
    return scores, answer_s


def figures(values: list[tuple[float, float]]) -> dict[str, float]:
    """The lowest and mean precision and the lowest recall of an answer over the sampled files."""
    return {
        "precision_min": round(min(p for p, _ in values), 4),
        "precision_mean": round(statistics.mean(p for p, _ in values), 4),
        "recall_min": round(min(r for _, r in values), 4),
    }


def main() -> None:
    """Consume the source and score both answers for a sample of its files; replay the windows and score again."""
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-precision-") as tmp:
        lakehouse = load_lakehouse(env={"ICEGROUP_HOME": str(Path(tmp) / "lake")})
        catalog = lakehouse.catalog()
        transform = "icegroup.spark_jobs.transforms:enrich_events"
        group = GroupConfig(name="bench", source="bench.events", sink="bench.events_out", transform=transform)
        fill(create_source(catalog, group.source), WORKLOAD)
        spark = get_session(lakehouse)
        windows = {today(group)}
        drive(spark, lakehouse, group)
        windows.add(today(group))
        held = file_events(catalog.load_table(group.source))
        paths = random.Random(27).sample(sorted(held), SAMPLE)
        scores, answer_s = score(catalog, group, held, paths)
        replays = [replay_window(spark, lakehouse, group, window, progress=quiet) for window in sorted(windows)]
        assert sum(r.shards for r in replays) > 0, f"the replays replaced nothing: {replays}"
        spark.stop()
        replayed, _ = score(catalog, group, held, paths)
    result = {
        "workload": {"snapshots": WORKLOAD.snapshots, "rows_per_snapshot": WORKLOAD.rows_per_snapshot},
        "source_files": len(held),
        "sampled_files": SAMPLE,
        "transform": group.transform,
        "answer_median_s": round(statistics.median(answer_s), 3),
        **{arm: figures(values) for arm, values in scores.items()},
        "after_replay": {arm: figures(values) for arm, values in replayed.items()},
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
