"""An arm's CPU seconds by who spent them, read from Linux's ``/proc`` while its processes run.

Kept apart from ``bench_cpu.py`` (which fills a lake and draws) so that it imports nothing but the
standard library. The arm's own process is the ``python`` kind, read once more as it exits (before
it is reaped, so the figure is its whole life's). Every process it starts, and every process those
start, is read by thread until it is gone, also after the arm's process has exited and its driver
JVM was handed to ``init``: a JVM stops on its own once its Python process has gone, and what it
spends then is its arm's. Each of those threads is classed by the name the JVM gives it, and CPU a
process spent in threads that ended between two reads goes to ``jvm rest``. What such a process
spends after the last read before it exits (at most POLL_S) is not seen.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("python", "jit", "tasks", "gc", "jvm rest")
POLL_S = 0.2
GC_THREADS = ("GC Thread", "G1 ")
LINGER_LIMIT_S = 120.0


def thread_kind(name: str) -> str:
    """The kind of a JVM thread, from the name the JVM gives it (``/proc/<pid>/task/<tid>/comm``, 15 characters).

    Any thread of a process other than the arm's own counts as the JVM's: the driver JVM, the
    launcher JVM that ``spark-submit`` runs first (its compiler and GC threads by their kind) and the
    launcher's shell scripts, which land in ``jvm rest``.
    """
    if name.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "jit"
    if name.startswith("Executor task"):
        return "tasks"
    if name.startswith(GC_THREADS):
        return "gc"
    return "jvm rest"


@dataclass
class Tree:
    """The CPU ticks of one arm's processes, by process and thread, as last read."""

    root: int
    started: dict[int, str] = field(default_factory=dict)  # pid -> its start time, so a reused pid is not counted
    threads: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    processes: dict[int, int] = field(default_factory=dict)  # pid -> the whole process's ticks, ended threads too

    def read(self) -> bool:
        """Read every process of the arm and their threads; whether any of them still runs."""
        children = _children()
        pending = [self.root, *self.started]  # a JVM handed to init may start processes of its own
        while pending:
            pid = pending.pop()
            if pid not in self.started:
                found = _fields(f"/proc/{pid}/stat")
                if found is None:
                    continue
                self.started[pid] = found[1][19]
            pending.extend(child for child in children.get(pid, ()) if child not in self.started)
        alive = False
        for pid, start in self.started.items():
            found = _fields(f"/proc/{pid}/stat")
            if found is None or found[1][19] != start:
                continue
            self.processes[pid] = _ticks(found[1])
            alive = alive or found[1][0] != "Z"
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                thread = _fields(f"/proc/{pid}/task/{tid}/stat")
                if thread is not None:
                    self.threads[(pid, int(tid))] = (thread[0], _ticks(thread[1]))
        return alive

    def seconds(self) -> dict[str, float]:
        """CPU seconds by kind: the arm's own process is ``python``, every other one the JVM's, by thread."""
        spent: Counter[str] = Counter()
        by_thread: Counter[int] = Counter()
        for (pid, _tid), (name, ticks) in self.threads.items():
            by_thread[pid] += ticks
            if pid != self.root:
                spent[thread_kind(name)] += ticks
        for pid, ticks in self.processes.items():
            if pid == self.root:
                spent["python"] += ticks
            else:
                spent["jvm rest"] += max(0, ticks - by_thread[pid])  # threads that ended between two reads
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
    """A ``stat`` file's name and the fields after it (state first), or None once the process or thread is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _ticks(fields: list[str]) -> int:
    """User and system CPU ticks from a ``stat`` file's fields after the name."""
    return int(fields[11]) + int(fields[12])


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
        totals = {"wall_s": self.wall_s, "jvm_outlived_s": self.jvm_outlived_s, "cpu_total_s": self.cpu_total_s}
        return {**totals, **self.cpu_s}


def run_arm(command: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> ArmRun:
    """Run one arm with its output in ``log``, reading its CPU until the processes it started are gone too."""
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        tree = Tree(process.pid)
        while not _exited(process.pid):
            tree.read()
            time.sleep(POLL_S)
        tree.read()  # its last figures, before it is reaped
        code = process.wait()
    wall = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited {code}; see {log}")
    while tree.read():  # the JVMs the arm started, until they are gone
        if time.perf_counter() - started - wall > LINGER_LIMIT_S:
            raise RuntimeError(f"{' '.join(command)}: a process it started still runs {LINGER_LIMIT_S:.0f}s after it")
        time.sleep(POLL_S)
    return ArmRun(round(wall, 2), round(time.perf_counter() - started - wall, 2), tree.seconds())


def _exited(pid: int) -> bool:
    """Whether a child has exited, leaving it unreaped so that its ``/proc`` figures can still be read."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
