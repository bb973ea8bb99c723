"""Where a shard's task time goes, against the plain write of the same rows, from Java Flight Recorder samples.

``bench_lineage_cost.py`` times what a shard costs beyond a plain write; this says which code
spends it. One warm SparkSession runs ``bench_lineage_cost``'s arms on the same W1 shard
(``plain``, ``shard_read``, ``lineage``, ``staged``); after a warm-up round of every arm, each arm
runs ROUNDS times under a JFR recording of its own (started and stopped through the JVM's
``jdk.jfr.Recording``, the ``profile`` settings: every 10 ms, a sample of up to five threads
running Java code; a stack keeps its 64 frames nearest the running method).
Only the samples of Spark's executor task threads count, and each is put in the first category
(CATEGORIES, in order) that a frame of its stack names:

- ``partition routing``: the partitioned writer finding each row's window partition;
- ``encode strings`` / ``encode other values``: Parquet column writers, string columns or the rest;
- ``pages and files``: closing pages, row groups and files (compression, statistics, footers);
- ``read``: Iceberg's Parquet reader, to Spark's columnar batches;
- ``file reference``: each row's ``xxhash64(input_file_name())``;
- ``project and filter``: Spark's generated code between them: the ``_file`` filter, the
  transform's expressions, the lineage constants copied into each row;
- ``other``.

The figures are each arm's samples per category as a multiple of ``plain``'s total, so a bar's
length is the arm's task cost over the plain write's. Run: ``make bench`` (writes
tests/benchmarks/results/task_profile.json and task_profile.png).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from pyspark.sql import SparkSession

from icegroup.spark_jobs.session import get_session
from tests.benchmarks.bench_lineage_cost import STREAM, w1_shard

ROUNDS = 5
ARMS = ("plain", "shard_read", "lineage", "staged")
RESULTS = Path(__file__).parent / "results"
EXECUTOR_THREAD = "Executor task launch worker"
# A category and the frames (method names as JFR prints them, a regular expression) that put a sample in it.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("partition routing", r"PartitionKey\.|StructLikeMap\.|FanoutWriter\.writer|InternalRowWrapper\."),
    (
        "pages and files",
        r"ParquetWriter\.(close|flushRowGroup)|\.writePage|ColumnWriteStoreBase\.(sizeCheck|endRecord)",
    ),
    ("encode strings", r"SparkParquetWriters\$UTF8StringWriter\.write"),
    ("encode other values", r"ParquetValueWriters\$StructWriter\.write|ParquetWriter\.add"),
    ("read", r"iceberg\.spark\.source\.BaseReader\.next|ColumnarBatchReader|VectorizedParquetReader|BatchDataReader"),
    ("file reference", r"XXH64|InputFileBlockHolder"),
    ("project and filter", r"GeneratedClass\$GeneratedIterator"),
)
FRAME = re.compile(r"^\s+([\w$.<>]+)\(", re.MULTILINE)


def category(frames: list[str]) -> str:
    """The first category a frame of the stack belongs to, in CATEGORIES' order; ``other`` if none."""
    for name, pattern in CATEGORIES:
        if any(re.search(pattern, frame) for frame in frames):
            return name
    return "other"


def executor_samples(recording: Path, jfr: Path) -> Counter[str]:
    """The recording's executor-thread samples, counted per category (the JDK's ``jfr print`` reads the file)."""
    if not jfr.is_file():
        raise RuntimeError(f"{jfr}: missing; the session's Java has no jfr tool (a JDK 17 has it: make jvm)")
    command = [str(jfr), "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", str(recording)]
    printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    counts: Counter[str] = Counter()
    for sample in printed.split("jdk.ExecutionSample")[1:]:
        if EXECUTOR_THREAD in sample:
            counts[category(FRAME.findall(sample))] += 1
    return counts


def recorded(spark: SparkSession, path: Path, work: Callable[[], None]) -> Path:
    """Run ``work`` under a JFR recording of the session's JVM, written to ``path``; the JVM's ``jfr`` tool."""
    jvm: Any = spark._jvm
    recording = jvm.jdk.jfr.Recording(jvm.jdk.jfr.Configuration.getConfiguration("profile"))
    recording.start()
    try:
        work()
    finally:
        try:
            recording.stop()
            recording.dump(jvm.java.io.File(str(path)).toPath())
        finally:
            recording.close()
    return Path(str(jvm.java.lang.System.getProperty("java.home"))) / "bin" / "jfr"


def plot(shares: dict[str, dict[str, float]], png: Path) -> None:
    """A stacked bar per arm: its executor samples per category, as a multiple of the plain write's total."""
    figure = Figure(figsize=(10, 4.2))
    axes = figure.subplots()
    labels = list(shares)
    left = [0.0] * len(labels)
    for name in [*(c for c, _ in CATEGORIES), "other"]:
        widths = [shares[arm].get(name, 0.0) for arm in labels]
        bars = axes.barh(labels, widths, left=left, label=name)
        axes.bar_label(bars, labels=[f"{w:.2f}" if w >= 0.08 else "" for w in widths], label_type="center", fontsize=7)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for index, total in enumerate(left):
        axes.text(total + 0.01, index, f"{total:.2f}x", va="center", fontsize=8)
    axes.set_xlim(0, max(left) * 1.1)
    axes.invert_yaxis()
    axes.set_xlabel("executor CPU samples (JFR), as a multiple of the plain write's; one W1 shard, 1.68 M rows")
    axes.set_title("Where a shard's task time goes: plain write, pinned read, lineage columns, staged sink")
    figure.legend(fontsize=7, ncols=8, loc="lower center")
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(png, dpi=110)


def main() -> None:
    """Fill W1's source, cut its shards with a real Leader tick, profile every arm, record and draw the shares."""
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-profile-") as tmp:
        bench = w1_shard(Path(tmp) / "lake")
        shard, spark = bench.shard, get_session(bench.lakehouse)
        writers, name = bench.writers(spark), bench.lakehouse.catalog_name
        for arm in ARMS:  # warm-up: the JIT compiles every arm's code before any is recorded
            writers[arm](f"{name}.bench.{arm}_warm")
        counts: dict[str, Counter[str]] = {}
        for arm in ARMS:
            path = Path(tmp) / f"{arm}.jfr"

            def rounds(arm: str = arm) -> None:
                for index in range(ROUNDS):
                    writers[arm](f"{name}.bench.{arm}_{index}")

            counts[arm] = executor_samples(path, recorded(spark, path, rounds))
            print(f"{arm}: {sum(counts[arm].values())} executor samples {dict(counts[arm].most_common())}", flush=True)
        spark.stop()
    plain = sum(counts["plain"].values())
    if plain == 0:
        raise RuntimeError(f"no sample of a thread named {EXECUTOR_THREAD!r}: is the session's master local?")
    shares = {arm: {k: round(v / plain, 3) for k, v in c.items()} for arm, c in counts.items()}
    totals = {arm: round(sum(c.values()) / plain, 2) for arm, c in counts.items()}
    result = {
        "rounds": ROUNDS,
        "shard": {"rows": shard.rows, "files": len(shard.files), "stream": STREAM},
        "categories": [c for c, _ in CATEGORIES] + ["other"],
        "samples": {arm: dict(c) for arm, c in counts.items()},
        "over_plain": shares,
        "total_over_plain": totals,
    }
    (RESULTS / "task_profile.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(shares, RESULTS / "task_profile.png")
    print("task samples / plain: " + "  ".join(f"{a} {r}x" for a, r in totals.items()))


if __name__ == "__main__":
    main()
