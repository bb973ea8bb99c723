"""`make demo`: a partitioned source, the demo group consuming it twice, describe, verify, then a replay.

The replay remakes today's window with a corrected transform (``enrich_events_v2``: an event is
large from 50.00, not 90.00) and shows the window's rows changed while their count stayed exact.

Runs on the embedded stack: SQLite catalog and warehouse under .lake/, Spark local[*], and the
Dagster instance in $DAGSTER_HOME (.dagster/), so `make ui` shows the runs afterwards.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml
from pyiceberg.catalog import Catalog

from dagster_project.cli import main as icegroup
from dagster_project.definitions import groups_path, load_checked_groups
from iceberg.lakehouse import load_lakehouse
from iceberg.protocol.lineage import COL_WINDOW
from iceberg.verify import verify_group
from infra.demo_data import append_batches, create_source

GROUP = "demo"
FIRST_BATCHES = 6
MORE_BATCHES = 3
ROWS_PER_BATCH = 3_000


def step(title: str) -> float:
    """Print a step header and return the time it started."""
    print(f"\n=== {title}", flush=True)
    return time.perf_counter()


def main() -> int:
    """Run the demo; exit 1 if the sink does not match the source exactly."""
    started = time.perf_counter()
    lakehouse = load_lakehouse()
    group = load_checked_groups(groups_path())[GROUP]
    catalog = lakehouse.catalog()
    timings: dict[str, float] = {}

    t = step(f"source {group.source}: partitioned by region (3 streams), {FIRST_BATCHES} appends")
    source = create_source(catalog, group.source)
    rows = append_batches(source, FIRST_BATCHES, ROWS_PER_BATCH)
    print(f"appended {rows} events in {FIRST_BATCHES} snapshots")
    timings["create+append"] = time.perf_counter() - t

    t = step(f"icegroup consume {GROUP} --until-caught-up")
    if icegroup(["consume", GROUP, "--until-caught-up"]) != 0:
        return 1
    timings["consume #1"] = time.perf_counter() - t

    t = step(f"append {MORE_BATCHES} more snapshots, consume again")
    rows = append_batches(catalog.load_table(group.source), MORE_BATCHES, ROWS_PER_BATCH)
    print(f"appended {rows} events in {MORE_BATCHES} snapshots")
    if icegroup(["consume", GROUP, "--until-caught-up"]) != 0:
        return 1
    timings["append+consume #2"] = time.perf_counter() - t

    step(f"icegroup describe {GROUP}")
    icegroup(["describe", GROUP])

    t = step("verify the sink against the source, with pyiceberg only")
    result = verify_group(catalog, group, key="event_id")
    print(result.line())
    timings["verify"] = time.perf_counter() - t

    window = datetime.now(UTC).strftime("%Y-%m-%d")
    t = step(f"replay window {window} with a corrected transform: large from 50.00 (it was 90.00)")
    before = window_rows(catalog, group.sink, window)
    icegroup(["replay", GROUP, "--window", window, "--dry-run"])
    with tempfile.TemporaryDirectory(prefix="icegroup-demo-") as folder:
        fixed = group.model_copy(update={"transform": "spark_jobs.transforms:enrich_events_v2"})
        groups = Path(folder) / "groups.yaml"
        groups.write_text(yaml.safe_dump({"groups": [fixed.model_dump(mode="json", exclude_defaults=True)]}))
        if icegroup(["--groups", str(groups), "replay", GROUP, "--window", window]) != 0:
            return 1
    after = window_rows(catalog, group.sink, window)
    print(f"window {window}: rows {before[0]} -> {after[0]}; is_large {before[1]} -> {after[1]}")
    replayed = verify_group(catalog, group, key="event_id")
    print(replayed.line())
    timings["replay"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - started
    print("timings: " + "  ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items()))
    return 0 if result.ok and replayed.ok and before[0] == after[0] else 1


def window_rows(catalog: Catalog, sink: str, window: str) -> tuple[int, int]:
    """Rows of the sink's window, and how many of them are flagged large."""
    rows = catalog.load_table(sink).scan(row_filter=f"{COL_WINDOW} = '{window}'", selected_fields=("is_large",))
    flags = rows.to_arrow().column("is_large").to_pylist()
    return len(flags), sum(1 for flag in flags if flag)


if __name__ == "__main__":
    sys.exit(main())
