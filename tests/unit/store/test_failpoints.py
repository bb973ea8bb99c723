"""Fail points: free without ICEGROUP_FAILPOINTS, and an armed point is claimed once and blocks until released."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from icegroup.iceberg.failpoints import ENV, failpoint

WAIT_S = 10.0


def wait_for(predicate: object, timeout_s: float = WAIT_S) -> bool:
    """Poll ``predicate`` until it is true or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


class Reach(threading.Thread):
    """Reach a fail point on a daemon thread, so a wrongly blocking point cannot hang the suite."""

    def __init__(self, name: str) -> None:
        """A thread that reaches fail point ``name`` once started."""
        super().__init__(daemon=True)
        self.point = name
        self.error: BaseException | None = None

    def run(self) -> None:
        """Reach the point; an error it raises is kept for the test."""
        try:
            failpoint(self.point)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc


def start(name: str) -> Reach:
    thread = Reach(name)
    thread.start()
    return thread


def returned(thread: Reach) -> bool:
    """The thread got past its fail point, without an error."""
    thread.join(WAIT_S)
    return not thread.is_alive() and thread.error is None


def test_without_the_variable_a_fail_point_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "leader.after_fence").touch()  # armed in the working directory, but no variable names it

    thread = start("leader.after_fence")
    assert returned(thread)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leader.after_fence"]


def test_an_empty_variable_disables_fail_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "leader.after_fence").touch()

    thread = start("leader.after_fence")
    assert returned(thread)
    assert (tmp_path / "leader.after_fence").exists()


def test_a_point_that_is_not_armed_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    (tmp_path / "leader.after_registry").touch()  # another point is armed

    thread = start("leader.after_fence")
    assert returned(thread)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leader.after_registry"]


def test_a_missing_folder_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "nope"))

    failpoint("leader.after_fence")  # returns at once


def test_an_armed_point_is_claimed_and_blocks_until_its_hit_file_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    (tmp_path / "leader.after_fence").touch()
    hit = tmp_path / f"hit.{os.getpid()}.leader.after_fence"

    thread = start("leader.after_fence")

    assert wait_for(hit.exists), "the armed point was not claimed"
    assert not (tmp_path / "leader.after_fence").exists()
    time.sleep(0.2)
    assert thread.is_alive(), "the fail point returned while its hit file still exists"

    hit.unlink()
    assert returned(thread), "deleting the hit file did not release the fail point"


def test_an_armed_point_is_claimed_by_one_process_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    (tmp_path / "borrower.before_commit").touch()
    hit = tmp_path / f"hit.{os.getpid()}.borrower.before_commit"

    first = start("borrower.before_commit")
    assert wait_for(hit.exists)
    second = start("borrower.before_commit")  # the point is claimed already: this one goes on

    assert returned(second)
    assert first.is_alive()
    hit.unlink()
    assert returned(first)
