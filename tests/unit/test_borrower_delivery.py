"""The Borrower's redelivery of a failing shard and its error lines, with fake callables (no Spark)."""

from __future__ import annotations

from typing import Any

import pytest

from iceberg.errors import ConfigError, IcegroupError, SinkError
from iceberg.groups import GroupConfig
from iceberg.shards import Shard
from spark_jobs import borrower
from spark_jobs.borrower import LeaseReport, StaleLease, _first_line, stage_with_redelivery

SHARD = Shard(
    shard_id="0123456789abcdef",
    stream="0/region=eu",
    from_snapshot=100,
    to_snapshot=103,
    to_sequence=7,
    schema_id=0,
    window_start_ms=1_767_225_600_000,
    snapshots=[101, 103],
    files=["wh/a.parquet"],
    rows=12,
    bytes=1200,
)


def report() -> LeaseReport:
    return LeaseReport(lease_id="fedcba9876543210", attempt=1, epoch=0, window_start_ms=0, shards_total=1)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every backoff the Borrower sleeps, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(borrower.time, "sleep", slept.append)
    return slept


class Deliveries:
    """``output`` and ``stage`` fakes: each delivery either raises the next planned error or stages a token."""

    def __init__(self, *errors: Exception | None) -> None:
        self.errors = list(errors)
        self.outputs = 0
        self.staged: list[object] = []

    def output(self) -> Any:
        self.outputs += 1
        return f"frame {self.outputs}"

    def stage(self, frame: Any) -> str:
        self.staged.append(frame)
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return f"token for {frame}"


def deliver(group: GroupConfig, deliveries: Deliveries, lease: LeaseReport, lines: list[str]) -> str | Exception:
    return stage_with_redelivery(group, SHARD, deliveries.output, deliveries.stage, lease, lines.append)


def test_a_failing_shard_is_delivered_max_deliver_times_and_the_last_error_returned(
    make_group: type[GroupConfig], waits: list[float]
) -> None:
    group = make_group(max_deliver=4, deliver_backoff_s=0.5)
    errors = [ValueError(f"bad row {n}\nat line {n}") for n in range(1, 5)]
    deliveries, lease, lines = Deliveries(*errors), report(), list[str]()

    result = deliver(group, deliveries, lease, lines)

    assert result is errors[-1]
    assert deliveries.staged == ["frame 1", "frame 2", "frame 3", "frame 4"]  # a fresh output per delivery
    assert waits == [0.5, 1.0, 2.0]
    assert lease.redeliveries == 3
    assert lines == [
        f"shard {SHARD.shard_id}: delivery {n}/4 failed (ValueError: bad row {n}); again in {wait:.1f}s"
        for n, wait in zip((1, 2, 3), waits, strict=True)
    ]


def test_a_failing_read_or_transform_is_delivered_again_too(make_group: type[GroupConfig], waits: list[float]) -> None:
    group = make_group(max_deliver=2, deliver_backoff_s=0)
    calls: list[int] = []

    def output() -> Any:
        calls.append(1)
        raise ZeroDivisionError("division by zero")

    lease, lines = report(), list[str]()
    result = stage_with_redelivery(group, SHARD, output, lambda _: "token", lease, lines.append)

    assert isinstance(result, ZeroDivisionError)
    assert len(calls) == 2 and waits == [0.0] and lease.redeliveries == 1
    assert lines == [
        f"shard {SHARD.shard_id}: delivery 1/2 failed (ZeroDivisionError: division by zero); again in 0.0s"
    ]


def test_one_delivery_allowed_returns_the_error_without_waiting(
    make_group: type[GroupConfig], waits: list[float]
) -> None:
    error = RuntimeError("boom")
    deliveries, lease, lines = Deliveries(error), report(), list[str]()

    assert deliver(make_group(max_deliver=1), deliveries, lease, lines) is error

    assert waits == [] and lines == [] and lease.redeliveries == 0


def test_success_on_the_second_delivery_returns_its_token(make_group: type[GroupConfig], waits: list[float]) -> None:
    group = make_group(max_deliver=3, deliver_backoff_s=1.5)
    deliveries, lease, lines = Deliveries(OSError("executor lost"), None), report(), list[str]()

    assert deliver(group, deliveries, lease, lines) == "token for frame 2"

    assert deliveries.staged == ["frame 1", "frame 2"]
    assert waits == [1.5] and lease.redeliveries == 1
    assert lines == [f"shard {SHARD.shard_id}: delivery 1/3 failed (OSError: executor lost); again in 1.5s"]


@pytest.mark.parametrize(
    "error",
    [StaleLease("lease fenced"), SinkError("sink: cannot take it"), ConfigError("transform: not found")],
    ids=["stale-lease", "sink-error", "config-error"],
)
def test_icegroup_errors_propagate_at_once_without_redelivery(
    make_group: type[GroupConfig], waits: list[float], error: IcegroupError
) -> None:
    deliveries, lease, lines = Deliveries(error, None), report(), list[str]()

    with pytest.raises(type(error)) as info:
        deliver(make_group(max_deliver=3, deliver_backoff_s=0), deliveries, lease, lines)

    assert info.value is error
    assert deliveries.staged == ["frame 1"]
    assert waits == [] and lines == [] and lease.redeliveries == 0


class FakeJavaClass:
    def __init__(self, name: str) -> None:
        self.name = name

    def getSimpleName(self) -> str:
        return self.name


class FakeThrowable:
    """What py4j hands over as ``java_exception``: a JVM throwable with a cause chain."""

    def __init__(self, name: str, message: str, cause: FakeThrowable | None = None) -> None:
        self.name, self.message, self.cause = name, message, cause

    def getCause(self) -> FakeThrowable | None:
        return self.cause

    def getClass(self) -> FakeJavaClass:
        return FakeJavaClass(self.name)

    def getMessage(self) -> str:
        return self.message


class FakePy4JError(Exception):
    def __init__(self, java: FakeThrowable) -> None:
        super().__init__("An error occurred while calling o87.save.\n: org.apache.spark.SparkException: Job aborted")
        self.java_exception = java


def test_first_line_of_a_plain_exception() -> None:
    assert _first_line(ValueError("  bad row 7\n  at line 7\n")) == "bad row 7"


def test_first_line_of_an_exception_without_a_message_is_its_type() -> None:
    assert _first_line(KeyError()) == "KeyError"


def test_first_line_is_cut_at_300_characters() -> None:
    assert _first_line(ValueError("x" * 400)) == "x" * 300


def test_first_line_of_a_jvm_error_is_its_root_cause() -> None:
    root = FakeThrowable("ArithmeticException", "/ by zero\n\tat Foo.bar(Foo.java:1)")
    chain = FakeThrowable("SparkException", "Job aborted", FakeThrowable("TaskFailure", "task 3 failed", root))

    assert _first_line(FakePy4JError(chain)) == "ArithmeticException: / by zero"


def test_first_line_of_a_jvm_error_without_a_cause_is_the_error_itself() -> None:
    assert _first_line(FakePy4JError(FakeThrowable("IOException", "disk full"))) == "IOException: disk full"
