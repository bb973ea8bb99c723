"""Where a consume's CPU goes, against the plain Spark job (A2) that moves the same rows: W1, by thread kind.

On this 2-core machine a W1 run keeps both cores busy from the JVM's start to its end, so its wall
time follows the CPU it spends, and every CPU second either arm spends beyond the other's costs
about half a second. ``bench_breakdown.py`` cuts the wall time into phases; this cuts the CPU by who
spent it:

- ``python``: the arm's Python process (imports, Dagster's run, the Leader's tick, the registry);
- ``jit``: the driver JVM's compiler threads (C1 and C2), compiling the code the run went through;
- ``tasks``: Spark's task threads, which read, transform and write the rows;
- ``gc``: the JVM's garbage collector threads;
- ``jvm rest``: every other JVM thread (the driver's planning, the catalog, py4j, Spark's services),
  and the launcher JVM that ``spark-submit`` starts first.

Each arm is a process of its own, ``A2`` (``baselines.py batch``) and ``consume`` (``icegroup consume
GROUP --until-caught-up``) in turn for ROUNDS rounds. A process's threads are read from ``/proc``
every POLL_S while it runs, and the JVMs it started until they have exited too: a driver JVM stops
on its own once its Python process has gone, and what it spends then is its arm's. That also keeps
each arm from starting beside the last one's JVM. A thread that ends is counted as last read, so each
figure may miss up to POLL_S of CPU per short-lived thread. Every sink is checked equal to its source.
Run: ``python -m tests.benchmarks.bench_cpu`` (writes tests/benchmarks/results/cpu.json and cpu.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.figure import Figure

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import REPO, check_same_rows, consume_command
from tests.benchmarks.plot import stacked_bars
from tests.benchmarks.spark_fill import fill_with_spark
from tests.benchmarks.workloads import W1
from tests.dagster_dev import dagster_env
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 3
ARMS = ("A2", "consume")
KINDS = ("python", "jit", "tasks", "gc", "jvm rest")
POLL_S = 0.2
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results"
GC_THREADS = ("GC Thread", "G1 ")


def thread_kind(name: str) -> str:
    """The kind of a JVM thread, from the name the JVM gives it (``/proc/<pid>/task/<tid>/comm``, 15 characters)."""
    if name.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "jit"
    if name.startswith("Executor task"):
        return "tasks"
    if name.startswith(GC_THREADS):
        return "gc"
    return "jvm rest"


@dataclass
class Tree:
    """The CPU seconds of one arm's processes, by thread, as last read."""

    root: int
    ticks: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    members: set[int] = field(default_factory=set)

    def read(self) -> bool:
        """Read every thread of the root and its descendants; whether any of them is still there."""
        alive = False
        children = _children()
        pending = [self.root]
        while pending:
            pid = pending.pop()
            self.members.add(pid)
            pending.extend(children.get(pid, ()))
        for pid in list(self.members):
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except FileNotFoundError:
                continue
            alive = alive or _running(pid)
            for tid in threads:
                stat = _stat(f"/proc/{pid}/task/{tid}/stat")
                if stat is not None:
                    self.ticks[(pid, int(tid))] = stat
        return alive

    def seconds(self) -> dict[str, float]:
        """CPU seconds by kind: the root's threads are ``python``, every other process's are the JVM's."""
        spent: Counter[str] = Counter()
        for (pid, _tid), (name, ticks) in self.ticks.items():
            spent["python" if pid == self.root else thread_kind(name)] += ticks
        per_second = os.sysconf("SC_CLK_TCK")
        return {kind: round(spent[kind] / per_second, 2) for kind in KINDS}


def _children() -> dict[int, list[int]]:
    """Every process's children, from ``/proc``."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _fields(f"/proc/{entry}/stat")
            if stat is not None:
                found.setdefault(int(stat[1][1]), []).append(int(entry))
    return found


def _fields(path: str) -> tuple[str, list[str]] | None:
    """A ``stat`` file's name and the fields after it, or None once the process or thread is gone."""
    try:
        text = Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _stat(path: str) -> tuple[str, int] | None:
    """A thread's name and its CPU ticks (user and system)."""
    found = _fields(path)
    if found is None:
        return None
    name, rest = found
    return name, int(rest[11]) + int(rest[12])


def _running(pid: int) -> bool:
    """Whether the process is there and not a zombie."""
    found = _fields(f"/proc/{pid}/stat")
    return found is not None and found[1][0] != "Z"


@dataclass
class ArmRun:
    """One arm's process: its wall seconds to its exit, how long its JVMs outlived it, its CPU seconds by kind."""

    wall_s: float
    jvm_outlived_s: float
    cpu_s: dict[str, float]

    @property
    def cpu_total_s(self) -> float:
        """Its CPU seconds in all."""
        return round(sum(self.cpu_s.values()), 2)

    def figures(self) -> dict[str, float]:
        """Its figures by name, as recorded and summed up."""
        return {
            "wall_s": self.wall_s,
            "jvm_outlived_s": self.jvm_outlived_s,
            "cpu_total_s": self.cpu_total_s,
            **self.cpu_s,
        }


def run_arm(command: list[str], env: dict[str, str], log: Path) -> ArmRun:
    """Run one arm with its output in ``log``, reading its threads' CPU until its JVMs are gone too."""
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        tree = Tree(process.pid)
        while process.poll() is None:
            tree.read()
            time.sleep(POLL_S)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}; see {log}")
    while tree.read():  # the JVMs the arm started, until they are gone
        time.sleep(POLL_S)
    return ArmRun(round(wall, 2), round(time.perf_counter() - started - wall, 2), tree.seconds())


def run_rounds(rounds: int, folder: Path) -> dict[str, list[ArmRun]]:
    """Both arms ``rounds`` times on one W1 source, alternating which goes first; every sink checked."""
    home = folder / "lake"
    catalog = load_lakehouse(env=home_env(home)).catalog()
    create_source(catalog, SOURCE)
    fill_with_spark(home, SOURCE, W1)
    groups = [
        GroupConfig(name=f"consume_{i}", source=SOURCE, sink=f"bench.consume_{i}", transform=TRANSFORM)
        for i in range(rounds)
    ]
    env = dagster_env(home, write_groups(folder / "groups.yaml", *groups), folder / "dagster")
    runs: dict[str, list[ArmRun]] = {arm: [] for arm in ARMS}
    for index in range(rounds):
        for arm in ARMS if index % 2 == 0 else ARMS[::-1]:
            sink = f"bench.{arm.lower()}_{index}"
            command = (
                [sys.executable, "-m", "tests.benchmarks.baselines", "batch", SOURCE, sink]
                if arm == "A2"
                else consume_command(env["ICEGROUP_GROUPS"], sink.split(".")[1])
            )
            runs[arm].append(run_arm(command, env, folder / f"{arm}_{index}.log"))
            check_same_rows(catalog, SOURCE, sink)
            print(f"round {index}: {arm} {json.dumps(runs[arm][-1].figures())}", flush=True)
    return runs


def summary(runs: dict[str, list[ArmRun]]) -> dict[str, dict[str, float]]:
    """Each arm's medians (wall, JVM linger, CPU by kind and in all), and consume's minus A2's."""
    medians: dict[str, dict[str, float]] = {}
    for arm, found in runs.items():
        figures = [run.figures() for run in found]
        medians[arm] = {key: round(statistics.median(f[key] for f in figures), 2) for key in figures[0]}
    medians["consume - A2"] = {key: round(medians["consume"][key] - medians["A2"][key], 2) for key in medians["A2"]}
    return medians


def plot(medians: dict[str, dict[str, float]], png: Path) -> None:
    """A stacked bar of each arm's median CPU seconds by kind, with its median wall time beside it."""
    figure = Figure(figsize=(10, 3.2))
    axes = figure.subplots()
    parts = {kind: [medians[arm][kind] for arm in ARMS] for kind in KINDS}
    left = stacked_bars(axes, list(ARMS), parts, label_from=1.2)
    for row, arm in enumerate(ARMS):
        axes.annotate(f"wall {medians[arm]['wall_s']:.1f} s", (left[row], row), xytext=(6, 0),
                      textcoords="offset points", va="center", fontsize=8)  # fmt: skip
    axes.set_xlim(0, max(left) * 1.3)
    axes.set_xlabel("CPU seconds, median of the rounds (2 cores: a run's wall time is about half its CPU)")
    axes.set_title("Who spends the CPU: icegroup consume against a plain Spark job (A2) on W1")
    axes.legend(fontsize=8, ncols=2, loc="upper right")
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def main() -> None:
    """Run the rounds, record them with their medians, and draw them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-cpu-") as tmp:
        runs = run_rounds(args.rounds, Path(tmp))
    medians = summary(runs)
    result = {
        "workload": {"snapshots": W1.snapshots, "rows_per_snapshot": W1.rows_per_snapshot, "filled_by": "spark_fill"},
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "commit": commit.stdout.strip(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "median": medians,
        "runs": {arm: [run.figures() for run in found] for arm, found in runs.items()},
    }
    (RESULTS / "cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(medians, RESULTS / "cpu.png")
    print(json.dumps(medians, indent=2))


if __name__ == "__main__":
    main()
