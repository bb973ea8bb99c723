"""A Leader tick of this tree against the same tick of another revision, side by side in one run.

A refactoring that moves the tick's reads must not make it slower. Each arm is a checkout (this one,
and ``--against REV`` checked out as a git worktree), and runs the same worker in a process of its
own: a fresh lake, a group over three streams driven for ``WARM`` busy ticks, then ``REPEATS`` busy
ticks (one new source snapshot to plan, the last lease's commit to reconcile and record, one grant)
and idle ticks (nothing new). The worker also counts how often one busy tick opens the sink. Arms
alternate (A B, then B A) over ``ROUNDS`` rounds, because these machines are noisy; the report is the
median of each round's ratio, this tree over the other.

Run: ``python -m tests.benchmarks.bench_tick --against b32c141`` (that commit or a later one) (writes
tests/benchmarks/results/tick_rooms.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.benchmarks.measure import provenance
from tests.conftest import repo_root

ROUNDS = 10
RESULTS = Path(__file__).parent / "results" / "tick_rooms.json"

# The worker runs in either tree: it imports what moved from wherever that tree keeps it.
WORKER = r"""
import inspect, json, statistics, sys, tempfile, time
from pathlib import Path
try:
    from icegroup.iceberg.config.lakehouse import load_lakehouse
    from icegroup.iceberg.protocol.group import GroupConfig
except ImportError:
    from icegroup.iceberg.lakehouse import load_lakehouse
    from icegroup.iceberg.groups import GroupConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from tests.factories import append_batches, create_source
from tests.sink_commits import commit_lease

WARM, REPEATS = 8, 9
home = Path(tempfile.mkdtemp(prefix="icegroup-bench-tick-"))
catalog = load_lakehouse(env={"ICEGROUP_HOME": str(home)}).catalog()
group = GroupConfig(name="bench", source="bench.events", sink="bench.out", shard_caps={"max_files": 1})
source = create_source(catalog, group.source)

def one_tick():
    started = time.perf_counter()
    result = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id="bench-borrower")
    elapsed = (time.perf_counter() - started) * 1000
    for lease in result.launch:
        commit_lease(catalog, group, result.state, lease, "bench-borrower")
    return elapsed

def busy():
    append_batches(source, 1, 6)
    return one_tick()

def idle():
    one_tick()
    return one_tick()

def sink_opens_in_a_busy_tick():
    # Opens of the sink by the tick (not the catalog's own read inside a commit), in a busy tick not timed.
    opens = []
    real_load = catalog.load_table

    def counting_load(identifier):
        name = identifier if isinstance(identifier, str) else ".".join(identifier)
        if name == group.sink and not any(f.function == "commit_table" for f in inspect.stack(context=0)):
            opens.append(name)
        return real_load(identifier)

    busy()  # its lease's commit is what the counted tick reconciles, records and retires
    append_batches(source, 1, 6)
    catalog.load_table = counting_load
    try:
        result = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id="bench-borrower")
    finally:
        catalog.load_table = real_load
    for lease in result.launch:
        commit_lease(catalog, group, result.state, lease, "bench-borrower")
    return len(opens)

for _ in range(WARM):
    busy()
busy_ms = [busy() for _ in range(REPEATS)]
idle_ms = [idle() for _ in range(REPEATS)]
print(json.dumps({
    "busy_ms": statistics.median(busy_ms),
    "idle_ms": statistics.median(idle_ms),
    "sink_opens_per_busy_tick": sink_opens_in_a_busy_tick(),
}))
"""


def run_arm(tree: Path) -> dict[str, float]:
    """One worker in ``tree``: its medians, as it prints them."""
    env = {**os.environ, "PYTHONPATH": f"{tree / 'build' / 'python'}{os.pathsep}{tree}"}
    done = subprocess.run(
        [sys.executable, "-c", WORKER], cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def checkout(revision: str, into: Path) -> Path:
    """``revision`` of this repository as a detached worktree in ``into``, with its import name ``icegroup`` linked.

    A tree's package folder (``build/python/icegroup``) is made by ``infra/package_links.sh``, not kept
    in git, so a fresh worktree has none until the script runs.
    """
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(into), revision], cwd=repo_root(), check=True, capture_output=True
    )
    if not (into / "infra" / "package_links.sh").is_file():
        raise SystemExit(f"{revision} predates the import name icegroup (b32c141): compare with b32c141 or later")
    subprocess.run(["bash", "infra/package_links.sh"], cwd=into, check=True, capture_output=True)
    return into


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print and record the ratios."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--against", required=True, help="the revision to compare with (a commit or a tag)")
    args.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of both arms (default %(default)s)")
    parsed = args.parse_args(argv)
    against, rounds = parsed.against, parsed.rounds
    other = Path(tempfile.mkdtemp(prefix="icegroup-bench-against-")) / "tree"
    try:
        arms = {"this": repo_root(), "against": checkout(against, other)}
        samples: dict[str, list[dict[str, float]]] = {"this": [], "against": []}
        for round_ in range(rounds):
            order = ["this", "against"] if round_ % 2 == 0 else ["against", "this"]
            for arm in order:
                samples[arm].append(run_arm(arms[arm]))
                print(f"round {round_ + 1}/{rounds} {arm}: {samples[arm][-1]}", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=repo_root(), check=False)
    report = report_of(against, samples)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def report_of(against: str, samples: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Medians per arm and the median of the per-round ratios (this tree over ``against``)."""

    def median(arm: str, key: str) -> float:
        return round(statistics.median(s[key] for s in samples[arm]), 2)

    def ratio(key: str) -> float:
        return round(
            statistics.median(t[key] / a[key] for t, a in zip(samples["this"], samples["against"], strict=True)), 2
        )

    return {
        "what": (
            "Leader tick of one group over 3 streams after warm-up; busy: one new source snapshot, the last "
            "lease's commit to reconcile and record, one grant; idle: nothing new. Each arm a process of its own, "
            f"alternating over {len(samples['this'])} rounds; ratio = this tree / the other, median of the rounds"
        ),
        "this": provenance()["commit"],
        "against": against,
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "median_ms": {arm: {key: median(arm, key) for key in ("busy_ms", "idle_ms")} for arm in samples},
        "sink_opens_per_busy_tick": {arm: median(arm, "sink_opens_per_busy_tick") for arm in samples},
        "ratio_this_over_against": {key: ratio(key) for key in ("busy_ms", "idle_ms")},
    }


if __name__ == "__main__":
    sys.exit(main())
