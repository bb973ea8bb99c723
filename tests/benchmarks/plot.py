"""The benchmark plot: throughput ratios per arm and workload, and the latency of each append per arm.

Reads the JSON that ``bench_throughput.py`` and ``bench_latency.py`` record, so either can redraw it
after a run; a part whose JSON is missing is left out. Writes tests/benchmarks/results/throughput_latency.png.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

RESULTS = Path(__file__).parent / "results"
PNG = RESULTS / "throughput_latency.png"
THROUGHPUT_ARMS = ("A2", "A2_warm", "B1", "consume", "dagster", "dagster_cold")
LATENCY_ARMS = {"dagster": "Dagster, sensor 5 s", "B1": "B1 processingTime 5 s", "follow": "consume --follow --poll 5"}


def plot() -> Path:
    """Draw what the results hold; returns the PNG's path."""
    throughput = _load("throughput.json")
    latency = _load("latency.json")
    figure = Figure(figsize=(12, 4.8))  # no pyplot: no GUI backend, no global figure state
    left, right = figure.subplots(1, 2)
    workloads = [w for w in ("W1", "W2") if w in throughput]
    width = 0.8 / max(1, len(workloads))
    for offset, workload in enumerate(workloads):
        ratios = throughput[workload]["throughput_over_A2"]
        ran = [i for i, arm in enumerate(THROUGHPUT_ARMS) if arm in ratios]  # an arm not run has no bar, not a 0
        xs = [i + offset * width for i in ran]
        heights = [ratios[THROUGHPUT_ARMS[i]] for i in ran]
        bars = left.bar(xs, heights, width, label=_label(throughput[workload]))
        left.bar_label(bars, fmt="%.2f", fontsize=8)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set_xticks([i + width * (len(workloads) - 1) / 2 for i in range(len(THROUGHPUT_ARMS))], THROUGHPUT_ARMS)
    left.set_ylabel("throughput / plain Spark batch (A2)")
    left.set_title(f"Throughput, median of {throughput.get('rounds', '?')} rounds (higher is better)")
    left.legend(fontsize=8)
    if latency:
        arms = [a for a in LATENCY_ARMS if a in latency["latency_s"]]
        right.boxplot([latency["latency_s"][a] for a in arms], whis=(5, 95))
        right.set_xticks(range(1, len(arms) + 1), [LATENCY_ARMS[a] for a in arms])
        for index, arm in enumerate(arms, start=1):
            values = latency["latency_s"][arm]
            right.scatter([index] * len(values), values, s=8, alpha=0.5)
        right.set_ylabel("seconds, source commit to visible in the sink")
        work = latency["workload"]
        right.set_title(f"Latency of {work['appends']} appends of {work['rows_per_append']} rows (whiskers p5-p95)")
    figure.tight_layout()
    figure.savefig(PNG, dpi=110)
    return PNG


def _load(name: str) -> dict:  # type: ignore[type-arg]
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else {}


def _label(result: dict) -> str:  # type: ignore[type-arg]
    work = result["workload"]
    return f"{work['snapshots']} snapshots x {work['rows_per_snapshot']:,} rows"


def stacked_bars(axes: Axes, labels: list[str], parts: Mapping[str, list[float]], label_from: float) -> list[float]:
    """One horizontal bar per label, of ``parts`` stacked in their order, the first label on top.

    Each part's value is written inside it when it is at least ``label_from``, so that a thin part
    stays legible. Returns where each bar ends, for a note beside it.
    """
    left = [0.0] * len(labels)
    for name, widths in parts.items():
        bars = axes.barh(labels, widths, left=left, label=name)
        written = [f"{w:.1f}" if w >= label_from else "" for w in widths]
        axes.bar_label(bars, labels=written, label_type="center", fontsize=8)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.invert_yaxis()
    return left


if __name__ == "__main__":
    print(plot())
