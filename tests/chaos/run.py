"""The chaos suite: real Borrower and Leader processes killed with ``kill -9`` while a producer appends.

``make chaos`` runs the full size and records ``tests/chaos/results/chaos_full.json``; ``make test``
runs a CI-sized setting through ``tests/chaos/test_chaos.py``. One run:

1. creates a source with three streams (identity partitions) and a group on it;
2. starts worker processes (``tests.chaos.worker consume``); each is a Leader and a Borrower, so
   Leaders race for the registry too. With ``borrowers`` (``--borrowers``) it starts the
   deployment Dagster runs instead: one Leader process that ticks as the sensor does
   (``worker leader``) and warm Borrower processes that take the leases it grants
   (``worker borrow``). Kills then land on the Leader, on a Borrower in the middle of a lease, and
   on a Borrower between leases or in its idle wait;
3. keeps appending source snapshots (up to ``max_snapshots``: every kill costs the group a session
   timeout, so an endless producer would outrun it) while it injects faults, one after another:
   ``kill -9`` of a worker at a random moment (often mid-write), or at an armed fail point (before a
   shard's read, with its output staged but not published, after the sink commit but before any
   registry update, and mid-tick: after liveness, after raising fences, after the registry commit
   but before the run is launched). A killed worker is started again. Every fourth fault is an
   operator action instead (``tests/chaos/admin.py``): a replay of the open window or a backward
   reset, as an ``icegroup`` process that is killed part-way half of the time. The group keeps the default
   liveness settings: a killed worker's run still looks alive, and only its stopped heartbeat gets
   its leases re-granted, ``session_timeout_s`` (30 s) later;
4. samples the registry all along: stream positions must never move back (except by a reset, which
   starts a new epoch), and a fault counts as
   recovered once every lease the killed process held has been re-granted or finished *and* the
   group has committed to the sink again since the kill (or has nothing left to do);
5. stops producing, waits until the group is caught up, and checks the sink against the source row
   by row, stream order, and that every lease is accounted for.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import LINEAGE_COLUMNS
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.iceberg.window_audit import audit_sink
from tests.chaos.admin import REPLAY, RESET, Admin, AdminRun
from tests.factories import append_batches, create_source
from tests.stack_env import home_env

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results"
POINTS = (
    "borrower.before_read",
    "borrower.after_stage",
    "borrower.after_commit",
    "leader.after_liveness",
    "leader.after_fence",
    "leader.after_registry",
)
RANDOM = "random"
LEADER = "leader"


@dataclass
class Settings:
    """Size of one run."""

    faults: int
    min_snapshots: int
    max_snapshots: int
    workers: int = 2
    rows_per_snapshot: int = 30
    produce_every_s: float = 2.0
    seed: int = 20261121
    borrowers: bool = False
    hit_timeout_s: float = 25.0
    catch_up_timeout_s: float = 600.0


@dataclass
class Fault:
    """One injected fault and when the group got over it."""

    kind: str
    worker: str
    at_s: float
    held: dict[str, int]
    cursor: int | None = None
    recovered_s: float | None = None


@dataclass
class Outcome:
    """Everything a run found; ``line()`` is the one-line summary."""

    faults: list[Fault] = field(default_factory=list)
    snapshots: int = 0
    streams: int = 0
    source_rows: int = 0
    sink_rows: int = 0
    lost: int = 0
    duplicated: int = 0
    rows_differ: int = 0
    position_regressions: list[str] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)
    lease_problems: list[str] = field(default_factory=list)
    worker_problems: list[str] = field(default_factory=list)
    audit_problems: list[str] = field(default_factory=list)
    leases_done: int = 0
    attempts_max: int = 0
    elapsed_s: float = 0.0
    catch_up_s: float = 0.0
    skipped_points: int = 0
    session_timeout_s: int = 0
    first_commit_s: float | None = None
    admin: list[AdminRun] = field(default_factory=list)

    @property
    def recovered(self) -> int:
        """Faults after which the group went on."""
        return sum(1 for f in self.faults if f.recovered_s is not None)

    @property
    def recoveries(self) -> list[float]:
        """Each recovered fault's time from the kill until the group went on; ``recovered`` counts the rest."""
        return [f.recovered_s for f in self.faults if f.recovered_s is not None]

    @property
    def max_recovery_s(self) -> float:
        """Longest time from a kill to the killed process's leases moving again."""
        return max((f.recovered_s or 0.0 for f in self.faults), default=0.0)

    @property
    def ok(self) -> bool:
        """The run kept every guarantee."""
        return (
            self.recovered == len(self.faults)
            and self.lost == 0
            and self.duplicated == 0
            and self.rows_differ == 0
            and not self.position_regressions
            and not self.order_violations
            and not self.lease_problems
            and not self.worker_problems
            and not self.audit_problems
            and not [run for run in self.admin if run.problem]
        )

    def line(self) -> str:
        """The summary line the suite ends with."""
        return (
            f"chaos: faults={len(self.faults)} recovered={self.recovered} lost={self.lost} "
            f"duplicated={self.duplicated} p95_recovery_s={spread(self.recoveries)['p95']:.1f} "
            f"max_recovery_s={self.max_recovery_s:.1f} "
            f"session_timeout_s={self.session_timeout_s}"
        )


class Workers:
    """The worker processes: start, find by pid, kill -9, restart."""

    def __init__(self, home: Path, groups: Path, group: str, folder: Path, logs: Path, mode: str = "consume") -> None:
        """Workers of ``group`` on the lakehouse at ``home``, sharing fail points and pid files in ``folder``.

        ``mode`` is the worker mode of every worker but the one named ``leader``, which runs the Leader alone.
        """
        # A killed driver leaves its Spark scratch behind (60 MB of jars copied for its tasks): in the run's
        # folder, not in /tmp for good.
        self.env = {
            **os.environ, **home_env(home), "ICEGROUP_FAILPOINTS": str(folder / "points"),
            "SPARK_LOCAL_DIRS": str(folder / "spark-scratch"),
        }  # fmt: skip
        self.groups, self.group, self.folder, self.logs, self.mode = groups, group, folder, logs, mode
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()

    def start(self, name: str) -> None:
        """Start (or restart) worker ``name``; its output goes to its log file."""
        log = (self.logs / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.worker", LEADER if name == LEADER else self.mode,
             "--groups", str(self.groups), "--group", self.group, "--folder", str(self.folder), "--name", name],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def by_pid(self, pid: int) -> str | None:
        """The name of the worker with this pid, if it is one of ours."""
        return next((name for name, p in self.procs.items() if p.pid == pid), None)

    def run_id(self, pid: int) -> str | None:
        """The owner id the process wrote into its pid file."""
        for pid_file in self.folder.glob("*.pid"):
            if pid_file.read_text().strip() == str(pid):
                return pid_file.stem
        return None

    def kill(self, name: str) -> int:
        """``kill -9`` worker ``name`` and reap it; returns the pid it had."""
        proc = self.procs[name]
        self.killed.add(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return proc.pid

    def crashed(self) -> list[str]:
        """Workers that exited on their own (an unexpected error): restarted, and reported."""
        found = []
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None and proc.pid not in self.killed:
                found.append(f"worker {name} (pid {proc.pid}) exited by itself with code {proc.returncode}")
                self.start(name)
        return found

    def tails(self, lines: int = 8) -> str:
        """The last lines of every worker's log, so a run that times out says what the workers were doing."""
        found = []
        for name in sorted(self.procs):
            log = self.logs / f"{name}.log"
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            found.append("\n".join([f"--- {name} ---", *text]))
        return "\n".join(found)

    def stop_all(self) -> list[str]:
        """Stop every worker; returns problems: a worker that failed or had to be killed."""
        (self.folder / "stop").touch()
        deadline = time.monotonic() + 60
        problems = []
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                problems.append(f"worker {name} did not stop")
            if proc.returncode != 0 and proc.pid not in self.killed:
                problems.append(f"worker {name} (pid {proc.pid}) ended with code {proc.returncode}")
        return problems


class Monitor(threading.Thread):
    """Samples the registry: positions never move back; faults recover."""

    def __init__(self, lakehouse: LakehouseConfig, group: str, outcome: Outcome, started: float) -> None:
        """A monitor of ``group`` that records what it finds in ``outcome``; times are from ``started``."""
        super().__init__(daemon=True)
        self.catalog = lakehouse.catalog()
        self.group, self.outcome, self.started = group, outcome, started
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.pending: list[Fault] = []
        self.positions: dict[str, int] = {}
        self.leases: dict[str, int] = {}
        self.epoch = 0

    def watch(self, fault: Fault) -> None:
        """Follow a fault until it is recovered, from the sink cursor it was injected at."""
        state = load_state(self.catalog, self.group).state
        fault.cursor = state.sink_cursor if state is not None else None
        with self.lock:
            self.pending.append(fault)

    def sample(self) -> None:
        """One look at the registry: record position regressions, lease attempts and recovered faults."""
        state = load_state(self.catalog, self.group).state
        if state is None:
            return
        now = time.monotonic() - self.started
        if self.outcome.first_commit_s is None and state.sink_cursor is not None:
            self.outcome.first_commit_s = round(now, 2)
        if state.epoch > self.epoch:  # a reset may move positions back; a rebuild never does
            self.epoch, self.positions = state.epoch, {}
        for name, stream in state.streams.items():
            before = self.positions.get(name, 0)
            if stream.position_sequence < before:
                self.outcome.position_regressions.append(f"{name}: {before} -> {stream.position_sequence}")
            self.positions[name] = max(before, stream.position_sequence)
        for lease_id, lease in state.leases.items():
            self.leases[lease_id] = max(self.leases.get(lease_id, 0), lease.attempt)
        with self.lock:
            for fault in self.pending:
                moved = all(
                    lease_id not in state.leases or state.leases[lease_id].attempt > attempt
                    for lease_id, attempt in fault.held.items()
                )
                going = state.sink_cursor != fault.cursor or state.is_idle()
                if moved and going:
                    fault.recovered_s = round(now - fault.at_s, 2)
            self.pending = [f for f in self.pending if f.recovered_s is None]

    def run(self) -> None:
        """Sample until halted."""
        while not self.halt.is_set():
            try:
                self.sample()
            except Exception as exc:  # a sample racing a commit is retried on the next round
                print(f"monitor: {type(exc).__name__}: {exc}", flush=True)
            time.sleep(0.2)


def held_by(lakehouse: LakehouseConfig, group: str, run_id: str | None) -> dict[str, int]:
    """Leases the process with this owner id holds, with their attempts."""
    state = load_state(lakehouse.catalog(), group).state
    if state is None or run_id is None:
        return {}
    return {lid: lease.attempt for lid, lease in state.leases.items() if lease.owner_run_id == run_id}


def inject(
    kind: str, workers: Workers, lakehouse: LakehouseConfig, settings: Settings, rng: random.Random
) -> tuple[str, dict[str, int]] | None:
    """Inject one fault; returns (worker, leases it held), or None if an armed point was not reached."""
    points = workers.folder / "points"
    if kind == RANDOM:
        name = rng.choice(sorted(workers.procs))
        time.sleep(rng.uniform(0.5, 4.0))
        pid = workers.kill(name)
        return name, held_by(lakehouse, workers.group, workers.run_id(pid))
    armed = points / kind
    armed.touch()
    deadline = time.monotonic() + settings.hit_timeout_s
    while time.monotonic() < deadline:
        if list(points.glob(f"hit.*.{kind}")):
            return kill_hit(kind, workers, lakehouse)
        time.sleep(0.05)
    try:
        armed.unlink()
    except FileNotFoundError:  # claimed just as the wait ended
        return kill_hit(kind, workers, lakehouse)
    return None


def kill_hit(kind: str, workers: Workers, lakehouse: LakehouseConfig) -> tuple[str, dict[str, int]] | None:
    """Kill -9 the worker waiting at the claimed point ``kind``; returns it and the leases it held."""
    for _ in range(100):
        hits = list((workers.folder / "points").glob(f"hit.*.{kind}"))
        if hits:
            pid = int(hits[0].name.split(".")[1])
            name = workers.by_pid(pid)
            if name is not None:
                workers.kill(name)
            hits[0].unlink()
            return (name, held_by(lakehouse, workers.group, workers.run_id(pid))) if name is not None else None
        time.sleep(0.05)
    return None


def check_sink(lakehouse: LakehouseConfig, group: GroupConfig, outcome: Outcome) -> None:
    """Compare the sink with the source row by row, and check order and lease accounting."""
    catalog = lakehouse.catalog()
    source = catalog.load_table(group.source)
    sink = catalog.load_table(group.sink)
    expected = source.scan().to_arrow()
    found = sink.scan().to_arrow()
    outcome.source_rows, outcome.sink_rows = expected.num_rows, found.num_rows
    want = Counter(expected.column("event_id").to_pylist())
    got = Counter(found.column("event_id").to_pylist())
    outcome.lost = sum(max(n - got[k], 0) for k, n in want.items())
    outcome.duplicated = sum(max(n - want[k], 0) for k, n in got.items())
    data = found.drop_columns([c for c in LINEAGE_COLUMNS if c in found.column_names])
    key = [("event_id", "ascending")]
    left, right = expected.sort_by(key), data.select(expected.column_names).sort_by(key)
    if left.num_rows == right.num_rows:
        outcome.rows_differ = sum(
            1 for a, b in zip(left.to_pylist(), right.to_pylist(), strict=True) if a != b
        )  # fmt: skip
    else:
        outcome.rows_differ = abs(left.num_rows - right.num_rows)

    sequence = {s.snapshot_id: s.sequence_number for s in source.snapshots()}
    outcome.snapshots = len(source.snapshots())
    history = read_sink_history(catalog, group.sink, group.name, None)
    last: dict[tuple[int, str], int] = {}
    shards: Counter[str] = Counter()
    for commit in history.commits:
        for shard in commit.shards:
            shards[shard.shard_id] += 1
            seq = sequence[shard.to_snapshot]
            if seq <= last.get((commit.epoch, shard.stream), 0):
                outcome.order_violations.append(f"{shard.stream}: shard {shard.shard_id} after sequence {seq}")
            last[(commit.epoch, shard.stream)] = seq
    outcome.streams = len({stream for _, stream in last})
    outcome.lease_problems.extend(f"shard {s} committed {n} times" for s, n in shards.items() if n > 1)
    outcome.audit_problems = [window.describe() for window in audit_sink(catalog, group).failing()]
    state = load_state(catalog, group.name).state
    assert state is not None
    leases = {c.lease_id for c in history.commits}
    outcome.leases_done = state.leases_done
    outcome.attempts_max = max((c.attempt for c in history.commits), default=0)
    if state.leases or state.shards:
        outcome.lease_problems.append(f"{len(state.leases)} leases, {len(state.shards)} shards still open")
    resets = any(run.kind == RESET and run.completed for run in outcome.admin)
    if state.leases_done != len(leases) and not resets:  # a reset drops leases that had committed part
        outcome.lease_problems.append(f"registry counts {state.leases_done} leases done, sink has {len(leases)}")


def run_chaos(settings: Settings, home: Path, emit: Callable[[str], None] = print) -> Outcome:
    """One chaos run in ``home`` (a fresh folder); returns what it found."""
    rng = random.Random(settings.seed)
    lakehouse = load_lakehouse(env=home_env(home))
    catalog = lakehouse.catalog()
    group = GroupConfig(
        name="chaos", source="chaos.events", sink="chaos.events_out", max_borrowers=settings.workers,
        shard_caps={"max_files": 1}, lease_max_shards=2,
    )  # fmt: skip
    source = create_source(catalog, group.source)
    append_batches(source, 2, settings.rows_per_snapshot)
    folder = home / "chaos"
    (folder / "points").mkdir(parents=True, exist_ok=True)
    groups = folder / "groups.yaml"
    groups.write_text(yaml.safe_dump({"groups": [group.model_dump(mode="json", exclude_defaults=True)]}))
    workers = Workers(home, groups, group.name, folder, folder, "borrow" if settings.borrowers else "consume")
    admin = Admin(home, groups, group.name, folder, rng)
    outcome = Outcome(session_timeout_s=group.session_timeout_s)
    started = time.monotonic()
    monitor = Monitor(lakehouse, group.name, outcome, started)
    producing = threading.Event()
    producing.set()

    def produce() -> None:
        table = lakehouse.catalog().load_table(group.source)
        while producing.is_set() or len(table.snapshots()) < settings.min_snapshots:
            if len(table.snapshots()) < settings.max_snapshots:
                append_batches(table, 1, settings.rows_per_snapshot)
            time.sleep(settings.produce_every_s)

    producer = threading.Thread(target=produce, daemon=True)
    if settings.borrowers:
        workers.start(LEADER)
    for index in range(settings.workers):
        workers.start(f"{'b' if settings.borrowers else 'w'}{index}")
    monitor.start()
    producer.start()
    kinds = [RANDOM, *POINTS]
    tries = 0
    try:
        while len(outcome.faults) < settings.faults and tries < settings.faults * 4:
            tries += 1
            outcome.worker_problems.extend(workers.crashed())
            if len(outcome.faults) % 4 == 3:
                operate(admin, REPLAY if len(outcome.faults) % 8 == 3 else RESET, outcome, monitor, started, emit)
                continue
            kind = rng.choice(kinds)
            injected = inject(kind, workers, lakehouse, settings, rng)
            if injected is None:
                outcome.skipped_points += 1
                continue
            name, held = injected
            fault = Fault(kind=kind, worker=name, at_s=round(time.monotonic() - started, 2), held=held)
            outcome.faults.append(fault)
            monitor.watch(fault)
            emit(f"fault {len(outcome.faults)}/{settings.faults}: kill -9 {name} at {kind} holding {len(held)} leases")
            workers.start(name)
            time.sleep(rng.uniform(0.0, 1.0))
        producing.clear()
        producer.join()
        emit("faults done; waiting for the group to catch up")
        faults_done = time.monotonic()
        try:
            wait_caught_up(lakehouse, group, settings.catch_up_timeout_s)
        except TimeoutError as exc:
            problems = [run.problem for run in outcome.admin if run.problem]
            raise TimeoutError(f"{exc}; operator actions' problems: {problems or 'none'}\n{workers.tails()}") from exc
        outcome.catch_up_s = round(time.monotonic() - faults_done, 1)
        emit(f"caught up {outcome.catch_up_s:.0f}s after the last fault")
        time.sleep(0.5)
    finally:
        outcome.worker_problems.extend(workers.crashed() + workers.stop_all())
        monitor.halt.set()
        monitor.join()
    monitor.sample()
    check_sink(lakehouse, group, outcome)
    outcome.elapsed_s = round(time.monotonic() - started, 1)
    return outcome


def operate(
    admin: Admin, kind: str, outcome: Outcome, monitor: Monitor, started: float, emit: Callable[[str], None]
) -> None:
    """Run one operator action as a fault: a replay or a reset, killed part-way half of the time."""
    fault = Fault(kind=kind, worker="admin", at_s=round(time.monotonic() - started, 2), held={})
    monitor.watch(fault)
    run = admin.run(kind)
    outcome.faults.append(fault)
    outcome.admin.append(run)
    how = "killed with kill -9" if run.killed else f"exit {run.exit_code}"
    emit(f"fault {len(outcome.faults)}: {run.command} ({how}; completed: {run.completed}, tries {run.attempts})")


def wait_caught_up(lakehouse: LakehouseConfig, group: GroupConfig, timeout_s: float) -> None:
    """Until the registry has nothing open and has planned through the source head."""
    catalog = lakehouse.catalog()
    deadline = time.monotonic() + timeout_s
    state, head = None, None
    while time.monotonic() < deadline:
        state = load_state(catalog, group.name).state
        head = catalog.load_table(group.source).current_snapshot()
        if state is not None and state.is_idle() and head is not None and state.planned_through == head.snapshot_id:
            return
        time.sleep(0.5)
    found = (
        f"{len(state.leases)} leases and {len(state.shards)} shards open, planned through {state.planned_through} "
        f"of head {head.snapshot_id if head else None}, epoch {state.epoch}"
        if state is not None
        else "no registry"
    )
    raise TimeoutError(f"group {group.name} did not catch up within {timeout_s:.0f}s: {found}")


def spread(values: list[float]) -> dict[str, float]:
    """Median, p90, p95 and max of ``values`` (nearest rank); zeros when there are none."""
    ranked = sorted(values)
    if not ranked:
        return {"n": 0, "median": 0.0, "p90": 0.0, "p95": 0.0, "max": 0.0}

    def at(q: float) -> float:
        return ranked[min(len(ranked) - 1, int(len(ranked) * q))]

    return {"n": len(ranked), "median": at(0.5), "p90": at(0.9), "p95": at(0.95), "max": ranked[-1]}


def target(fault: Fault) -> str:
    """What a fault hit: an operator action, the Leader, or a worker in the middle of a lease or between leases."""
    if fault.worker == "admin":
        return fault.kind
    if fault.worker == LEADER:
        return LEADER
    return "worker mid-lease" if fault.held else "worker between leases or idle"


def overlapped(faults: list[Fault]) -> list[bool]:
    """For each fault, whether another fault came between its injection and its recovery, or it came in another's.

    The suite injects a fault every few seconds, faster than a restarted worker's JVM start, so a
    kill often lands while the group is still getting over the last one, and each prolongs the
    other's recovery. A fault with no other in its span measures one recovery alone; since a long
    recovery is more likely to be overlapped, the figure for those alone leans short.
    """
    spans = [(f.at_s, f.at_s + (f.recovered_s or 0.0)) for f in faults]
    return [
        any(other_at < end and at < other_end for j, (other_at, other_end) in enumerate(spans) if j != i)
        for i, (at, end) in enumerate(spans)
    ]


def recovery_parts(outcome: Outcome) -> dict[str, dict[str, float]]:
    """Recovery of every fault, split by what the group was doing when it came.

    Before the group's first sink commit its workers are still starting (a cold JVM each), so a
    fault then is timed against the whole start. After it, a fault either lands on a group that
    recovers with no other fault in its span (``alone``) or overlaps another (``overlapped``).
    """
    first = outcome.first_commit_s
    overlaps = overlapped(outcome.faults)
    parts: dict[str, list[float]] = {"before the first commit": [], "alone": [], "overlapped": []}
    for fault, overlap in zip(outcome.faults, overlaps, strict=True):
        if first is None or fault.at_s < first:
            part = "before the first commit"
        else:
            part = "overlapped" if overlap else "alone"
        parts[part].append(fault.recovered_s or 0.0)
    after = parts["alone"] + parts["overlapped"]
    return {**{name: spread(values) for name, values in parts.items()}, "after the first commit": spread(after)}


def record(outcome: Outcome, settings: Settings, path: Path) -> None:
    """Keep a run's figures in the repo, with recovery measured against the session timeout."""
    holding = [f.recovered_s or 0.0 for f in outcome.faults if f.held]
    session_timeout_s = outcome.session_timeout_s
    data = {
        "line": outcome.line(),
        "ok": outcome.ok,
        "settings": asdict(settings),
        "snapshots": outcome.snapshots,
        "streams": outcome.streams,
        "source_rows": outcome.source_rows,
        "sink_rows": outcome.sink_rows,
        "rows_differ": outcome.rows_differ,
        "leases_done": outcome.leases_done,
        "max_attempt": outcome.attempts_max,
        "faults_by_kind": dict(Counter(f.kind for f in outcome.faults)),
        "faults_by_target": dict(Counter(target(f) for f in outcome.faults)),
        "recovery_s_by_target": {
            name: spread([f.recovered_s or 0.0 for f in outcome.faults if target(f) == name])
            for name in sorted({target(f) for f in outcome.faults})
        },
        "armed_points_not_reached": outcome.skipped_points,
        "session_timeout_s": session_timeout_s,
        "recovery_s": spread(outcome.recoveries),
        "first_commit_s": outcome.first_commit_s,
        "recovery_s_by_moment": recovery_parts(outcome),
        "recovery_s_of_faults_holding_leases": spread(holding),
        "recovery_over_session_timeout_of_faults_holding_leases": {
            k: round(v / session_timeout_s, 2) if k != "n" else v for k, v in spread(holding).items()
        },
        "position_regressions": outcome.position_regressions,
        "order_violations": outcome.order_violations,
        "lease_problems": outcome.lease_problems,
        "worker_problems": outcome.worker_problems,
        "elapsed_s": outcome.elapsed_s,
        "catch_up_s": outcome.catch_up_s,
        "faults": [asdict(f) for f in outcome.faults],
        "operator_actions": [asdict(run) for run in outcome.admin],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.chaos.run [--full] [--faults N]``."""
    parser = argparse.ArgumentParser(prog="tests.chaos.run")
    parser.add_argument("--full", action="store_true", help="the full size: 50 faults, 30 to 150 snapshots")
    parser.add_argument("--faults", type=int)
    parser.add_argument(
        "--borrowers", action="store_true", help="a Leader process and warm Borrower processes, as under Dagster"
    )
    parser.add_argument("--home", type=Path, help="folder for the run's lakehouse (default: a new temp folder)")
    args = parser.parse_args(argv)
    # After 50 faults, with resets among them, one stream can be far behind; its shards commit in
    # order, two per lease (lease_max_shards), so catching up can take several minutes.
    full = Settings(faults=50, min_snapshots=30, max_snapshots=150, catch_up_timeout_s=1200.0)
    settings = full if args.full else Settings(faults=8, min_snapshots=20, max_snapshots=45)
    if args.faults:
        settings.faults = args.faults
    settings.borrowers = args.borrowers
    home = args.home or Path(os.environ.get("TMPDIR", "/tmp")) / f"icegroup-chaos-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    outcome = run_chaos(settings, home)
    if args.full:
        record(outcome, settings, RESULTS / ("chaos_borrowers.json" if args.borrowers else "chaos_full.json"))
    problems = outcome.position_regressions + outcome.order_violations + outcome.lease_problems
    for problem in problems + outcome.worker_problems:
        print(f"problem: {problem}")
    print(outcome.line())
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
