"""`make demo`: a source, the demo group consuming it twice, describe, lineage, verify, expire, a canary, a replay.

A chained group, ``large``, consumes the demo group's sink and keeps its large events. The replay
remakes today's window with a corrected transform (``enrich_events_v2``: an event is large from
50.00, not 90.00) and cascades to ``large``: the demo window's rows changed while their count stayed
exact, and ``large`` holds exactly the events that are large now.

Runs on the embedded stack: SQLite catalog and warehouse under .lake/, Spark local[*], and the
Dagster instance in $DAGSTER_HOME (.dagster/), so `make ui` shows the runs afterwards. Every run
that reads or writes data sends its OpenLineage events to .lake/openlineage.jsonl (unless
``ICEGROUP_OPENLINEAGE_FILE`` names another file), one JSON event a line, for a lineage tool.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import yaml
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import main as icegroup_main
from icegroup.dagster_project.group_files import groups_path, load_checked_groups
from icegroup.iceberg.config.lakehouse import ENV_HOME, ENV_OPENLINEAGE_FILE, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW
from icegroup.iceberg.verify import verify_group
from icegroup.iceberg.window_audit import audit_sink
from icegroup.infra.demo_data import append_batches, create_source

GROUP = "demo"
CHAINED = "large"
FIRST_BATCHES = 6
MORE_BATCHES = 3
ROWS_PER_BATCH = 3_000
NEXT_STEPS = f"""
=== next: in a new shell in this folder, `source .venv/bin/activate`, then try
  icegroup list                                  # every group, its lag and state
  icegroup checkpoints {GROUP}                       # each sink commit: run, lease, source range, rows
  icegroup lineage {CHAINED} --row 'is_large = true' --through   # which source files made those rows
and `make ui` for the same groups in the Dagster UI (http://127.0.0.1:3000)."""


def icegroup(argv: list[str]) -> int:
    """The ``icegroup`` command on the demo's groups, as a user would type it after ``source .venv/bin/activate``."""
    return icegroup_main(["--groups", str(groups_path()), *argv])


def step(title: str) -> float:
    """Print a step header and return the time it started."""
    print(f"\n=== {title}", flush=True)
    return time.perf_counter()


def main() -> int:
    """Run the demo; exit 1 if the sink does not match the source exactly."""
    started = time.perf_counter()
    lineage = Path(os.environ.get(ENV_OPENLINEAGE_FILE) or lineage_file())
    if ENV_OPENLINEAGE_FILE not in os.environ:  # the demo's own file starts empty; a file of the user's is theirs
        os.environ[ENV_OPENLINEAGE_FILE] = str(lineage)
        lineage.unlink(missing_ok=True)
    lakehouse = load_lakehouse()
    groups = load_checked_groups(groups_path())
    group, chained = groups[GROUP], groups[CHAINED]
    catalog = lakehouse.catalog()
    timings: dict[str, float] = {}

    t = step(f"source {group.source}: partitioned by region (3 streams), {FIRST_BATCHES} appends")
    source = create_source(catalog, group.source)
    rows = append_batches(source, FIRST_BATCHES, ROWS_PER_BATCH)
    print(f"appended {rows} events in {FIRST_BATCHES} snapshots")
    timings["create+append"] = time.perf_counter() - t

    t = step(f"icegroup consume {GROUP} --until-caught-up, then the chained group {CHAINED}")
    if not consume_both():
        return 1
    timings["consume #1"] = time.perf_counter() - t

    t = step(f"append {MORE_BATCHES} more snapshots, consume again")
    rows = append_batches(catalog.load_table(group.source), MORE_BATCHES, ROWS_PER_BATCH)
    print(f"appended {rows} events in {MORE_BATCHES} snapshots")
    if not consume_both():
        return 1
    timings["append+consume #2"] = time.perf_counter() - t

    step(f"icegroup describe {GROUP}")
    icegroup(["describe", GROUP])

    t = step(f"icegroup lineage: a row of {CHAINED} back to its source file, and a source file forward")
    if not show_lineage(catalog, group, chained):
        return 1
    timings["lineage"] = time.perf_counter() - t

    t = step("verify the sink against the source, with pyiceberg only")
    result = verify_group(catalog, group, key="event_id")
    print(result.line())
    audit = audit_sink(catalog, group)
    print(f"exactly_once (the sink asset's check in Dagster, from the sink's metadata): {audit.describe()}")
    timings["verify"] = time.perf_counter() - t

    step("icegroup expire (a preview): what no group needs any more, and what pins the rest")
    icegroup(["expire"])

    window = datetime.now(UTC).strftime("%Y-%m-%d")
    t = step(f"icegroup canary: the corrected transform over window {window}, staged beside main, and its difference")
    canary = ["canary", GROUP, "--transform", "icegroup.spark_jobs.transforms:enrich_events_v2", "--window", window]
    if icegroup([*canary, "--key", "event_id"]) != 0:
        return 1
    timings["canary"] = time.perf_counter() - t

    t = step(f"replay window {window} with a corrected transform: large from 50.00 (it was 90.00), with --cascade")
    before = window_rows(catalog, group.sink, window)
    large_before = count(catalog, chained.sink)
    icegroup(["replay", GROUP, "--window", window, "--cascade"])
    with tempfile.TemporaryDirectory(prefix="icegroup-demo-") as folder:
        fixed = group.model_copy(update={"transform": "icegroup.spark_jobs.transforms:enrich_events_v2"})
        path = Path(folder) / "groups.yaml"
        dumped = [g.model_dump(mode="json", exclude_defaults=True) for g in (fixed, chained)]
        path.write_text(yaml.safe_dump({"groups": dumped}))
        if icegroup(["--groups", str(path), "replay", GROUP, "--window", window, "--cascade", "--execute"]) != 0:
            return 1
    after = window_rows(catalog, group.sink, window)
    print(f"window {window}: rows {before[0]} -> {after[0]}; is_large {before[1]} -> {after[1]}")
    print(f"{CHAINED} (the large events, a chained group): rows {large_before} -> {count(catalog, chained.sink)}")
    replayed = [verify_group(catalog, g, key="event_id") for g in (group, chained)]
    for check in replayed:
        print(check.line())
    audits = [audit, *(audit_sink(catalog, g) for g in (group, chained))]
    for replay_audit in audits[1:]:
        print(f"exactly_once: {replay_audit.describe()}")
    timings["replay"] = time.perf_counter() - t
    step(f"OpenLineage: the events of every run that read or wrote data, in {lineage}")
    print(lineage_summary(lineage))
    timings["total"] = time.perf_counter() - started
    print("timings: " + "  ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items()))
    exact = result.ok and all(check.ok for check in replayed) and all(a.ok for a in audits) and before[0] == after[0]
    if not exact or count(catalog, chained.sink) != after[1]:
        return 1
    print(NEXT_STEPS)
    return 0


def lineage_file() -> str:
    """Where the demo's OpenLineage events go: beside its lake."""
    return str(Path(os.environ.get(ENV_HOME, ".")).resolve() / ".lake" / "openlineage.jsonl")


def lineage_summary(path: Path) -> str:
    """The events by job and type, and the sink versions the runs wrote."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    kinds = Counter(f"{e['job']['name']} {e['eventType']}" for e in events)
    lines = [f"{count:4d} x {kind}" for kind, count in sorted(kinds.items())]
    return "\n".join([f"{len(events)} events", *lines])


def show_lineage(catalog: Catalog, group: GroupConfig, chained: GroupConfig) -> bool:
    """Ask both ways through the chain: a large event back to the first source, a source file forward."""
    first = catalog.load_table(chained.sink).scan(selected_fields=("event_id",), limit=1).to_arrow()
    event_id = first.column("event_id")[0].as_py()
    back = icegroup(["lineage", CHAINED, "--row", f"event_id = {event_id}", "--through"])
    path = sorted(catalog.load_table(group.source).inspect.files().column("file_path").to_pylist())[0]
    return back == 0 and icegroup(["lineage", GROUP, "--source-file", path, "--through"]) == 0


def consume_both() -> bool:
    """Consume the demo group, then the chained group over its sink."""
    return all(icegroup(["consume", name, "--until-caught-up"]) == 0 for name in (GROUP, CHAINED))


def count(catalog: Catalog, table: str) -> int:
    """Rows of a table as a reader of main sees them."""
    return catalog.load_table(table).scan(selected_fields=("event_id",)).to_arrow().num_rows


def window_rows(catalog: Catalog, sink: str, window: str) -> tuple[int, int]:
    """Rows of the sink's window, and how many of them are flagged large."""
    rows = catalog.load_table(sink).scan(row_filter=f"{COL_WINDOW} = '{window}'", selected_fields=("is_large",))
    flags = rows.to_arrow().column("is_large").to_pylist()
    return len(flags), sum(1 for flag in flags if flag)


if __name__ == "__main__":
    sys.exit(main())
