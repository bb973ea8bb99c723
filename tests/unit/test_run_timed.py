"""``run_timed`` times an arm to its own exit, but returns only once no process of its session still runs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.benchmarks import measure

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def running(pid_file: Path) -> bool:
    """Whether the process whose pid the arm wrote is still running (not gone, not a zombie)."""
    try:
        state = (Path("/proc") / pid_file.read_text().strip() / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_child_that_outlives_the_arm_is_killed_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(measure, "LEFTOVER_GRACE_S", 1.0)
    pid = tmp_path / "child.pid"
    started = time.perf_counter()

    elapsed = measure.run_timed(["bash", "-c", f"sleep 60 & echo $! > {pid}"], ENV, tmp_path / "arm.log")

    assert elapsed < 1.0, "the arm is timed to its own exit, not its child's"
    assert time.perf_counter() - started >= 1.0, "the call waited the grace for the child"
    assert not running(pid), "the child left running was killed"


def test_a_child_that_ends_within_the_grace_is_waited_for(tmp_path: Path) -> None:
    started = time.perf_counter()

    measure.run_timed(["bash", "-c", "sleep 0.5 &"], ENV, tmp_path / "arm.log")

    assert 0.5 <= time.perf_counter() - started < measure.LEFTOVER_GRACE_S


def test_a_failed_arm_names_its_log_after_its_children_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(measure, "LEFTOVER_GRACE_S", 1.0)
    pid = tmp_path / "child.pid"

    with pytest.raises(measure.ArmFailed, match=r"exited 3; see .*arm\.log") as failed:
        measure.run_timed(["bash", "-c", f"sleep 60 & echo $! > {pid}; exit 3"], ENV, tmp_path / "arm.log")

    assert not running(pid)
    assert failed.value.elapsed_s < 1.0, "its time is to its exit, not to the end of the cleanup"


def test_a_child_in_a_process_group_of_its_own_is_stopped_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "LEFTOVER_GRACE_S", 0.5)
    pid = tmp_path / "child.pid"
    moves_away = f"import os, time; os.setpgid(0, 0); open({str(pid)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    measure.run_timed(["bash", "-c", f"{sys.executable} -c {moves_away!r} & sleep 0.5"], ENV, tmp_path / "arm.log")

    assert pid.exists(), "the child started"
    assert not running(pid), "PySpark's workers leave the arm's process group, not its session"
