"""Operator actions among the chaos suite's faults: replays of the open window and backward resets.

Each runs as an ``icegroup`` process while the workers consume and the producer appends; half of
them are killed with ``kill -9`` part-way. A killed replay leaves its ticket to expire after the
session timeout. A killed reset is run again until it completes, as its error message tells an
operator to. An action refused for a reason icegroup names (a replay still holding the window, a
reset waiting for one) is expected; a crash or any other refusal is a problem.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tests.stack_env import home_env

REPLAY = "replay"
RESET = "reset"
ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
EXPECTED_REFUSALS = (
    "is being replayed by",
    "replays are in flight",
    "kept moving",
    "replay fenced",
    "epoch fenced",
    "raised the sink's epoch",
)


@dataclass
class AdminRun:
    """One operator action: what ran, whether it was killed, how it ended."""

    kind: str
    command: str
    killed: bool
    exit_code: int | None
    completed: bool
    attempts: int
    problem: str | None = None


class Admin:
    """Runs replays and resets of one group as ``icegroup`` processes."""

    def __init__(self, home: Path, groups: Path, group: str, folder: Path, rng: random.Random) -> None:
        """Actions on ``group`` of the lakehouse at ``home``; their Dagster runs go to ``folder``/dagster."""
        self.env = {**os.environ, **home_env(home), "DAGSTER_HOME": str(folder / "dagster")}
        (folder / "dagster").mkdir(parents=True, exist_ok=True)
        self.groups, self.group, self.folder, self.rng = groups, group, folder, rng
        self.log = folder / "admin.log"

    def command(self, kind: str) -> list[str]:
        """A replay of today's window (the open one), or a reset back by one to three snapshots."""
        base = [ICEGROUP, "--groups", str(self.groups)]
        if kind == REPLAY:
            return [*base, "replay", self.group, "--window", datetime.now(UTC).strftime("%Y-%m-%d"), "--execute"]
        return [*base, "reset", self.group, "--shift-by", str(-self.rng.randint(1, 3)), "--execute"]

    def start(self, command: list[str]) -> subprocess.Popen[bytes]:
        """Start one ``icegroup`` process, its output appended to the admin log."""
        with self.log.open("ab") as log:
            log.write(f"$ {' '.join(command[1:])}\n".encode())
            log.flush()
            return subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def run(self, kind: str) -> AdminRun:
        """Run one action; kill it part-way half of the time."""
        command = self.command(kind)
        proc = self.start(command)
        killed = False
        if self.rng.random() < 0.5:
            try:
                proc.wait(timeout=self.rng.uniform(1.0, 12.0))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
        code = proc.wait(timeout=600)
        run = AdminRun(kind, " ".join(command[3:]), killed, code, code == 0, 1)
        if kind == RESET and not run.completed:
            self.complete(run, command)
        elif not killed and code != 0 and not self.expected(code):
            run.problem = f"{run.command} ended with code {code}: {self.tail()}"
        return run

    def complete(self, run: AdminRun, command: list[str]) -> None:
        """Run a reset again until it completes (each try waits a little for replays to end)."""
        for _ in range(40):
            if run.exit_code not in (None, 0, -signal.SIGKILL) and not self.expected(run.exit_code):
                run.problem = f"{run.command} ended with code {run.exit_code}: {self.tail()}"
                return
            time.sleep(3.0)
            run.attempts += 1
            run.exit_code = self.start(command).wait(timeout=600)
            if run.exit_code == 0:
                run.completed = True
                return
        run.problem = f"{run.command} did not complete in {run.attempts} tries: {self.tail()}"

    def expected(self, code: int) -> bool:
        """An exit with an error icegroup names and expects under these faults."""
        return code == 2 and any(reason in self.tail() for reason in EXPECTED_REFUSALS)

    def tail(self) -> str:
        """The last error line of the admin log."""
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if "error" in line.lower()]
        return lines[-1][-400:] if lines else "(no error line)"
