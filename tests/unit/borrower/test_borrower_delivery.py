"""The Borrower's redelivery of a failing shard and its error lines, with fake callables (no Spark)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from icegroup.iceberg.errors import (
    ConfigError,
    Fenced,
    IcegroupError,
    PlatformUnavailable,
    SinkError,
    StagedOutputGone,
    StaleLease,
)
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.spark_jobs.borrower import publishing as borrower
from icegroup.spark_jobs.borrower.attempt import STAGINGS, LeaseReport, staged_again
from icegroup.spark_jobs.borrower.platform_retry import platform_retry
from icegroup.spark_jobs.borrower.redelivery import Staged, Undelivered, stage_with_redelivery
from icegroup.spark_jobs.borrower.user_errors import (
    describe_error,
    failure_classes,
    is_infrastructure,
    is_platform_failure,
)
from tests.factories import MakeGroup, shard

SHARD = shard()


def without_where(line: str) -> str:
    """A progress line without the ``(at file:line in function)`` of where the error was raised."""
    return re.sub(r" \(at [^)]*\)", "", line)


def report() -> LeaseReport:
    """A fresh report of the lease being delivered, to count its redeliveries."""
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
        """Deliveries that raise ``errors`` in turn (None: that one succeeds), then succeed."""
        self.errors = list(errors)
        self.outputs = 0
        self.staged: list[object] = []

    def output(self) -> Any:
        """A fresh output frame, numbered by delivery."""
        self.outputs += 1
        return f"frame {self.outputs}"

    def stage(self, frame: Any) -> str:
        """Stage ``frame``: raise the next planned error, or return a token naming the frame."""
        self.staged.append(frame)
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return f"token for {frame}"


def platform_up() -> bool:
    """The catalog answers: a failure is the shard's unless its cause chain says otherwise."""
    return True


def deliver(
    group: GroupConfig,
    deliveries: Deliveries,
    lease: LeaseReport,
    lines: list[str],
    up: Callable[[], bool] = platform_up,
) -> str | Exception:
    return as_before(stage_with_redelivery(group, SHARD, deliveries.output, deliveries.stage, lease, lines.append, up))


def as_before(staged: Staged | Undelivered) -> str | Exception:
    """The stage token, or the last error: what these tests compare."""
    return staged.token if isinstance(staged, Staged) else staged.error


def test_a_failing_shard_is_delivered_max_deliver_times_and_the_last_error_returned(
    make_group: MakeGroup, waits: list[float]
) -> None:
    group = make_group(max_deliver=4, deliver_backoff_s=0.5)
    errors = [ValueError(f"bad row {n}\nat line {n}") for n in range(1, 5)]
    deliveries, lease, lines = Deliveries(*errors), report(), list[str]()

    result = deliver(group, deliveries, lease, lines)

    assert result is errors[-1]
    assert deliveries.staged == ["frame 1", "frame 2", "frame 3", "frame 4"]  # a fresh output per delivery
    assert waits == [0.5, 1.0, 2.0]
    assert lease.redeliveries == 3
    assert [without_where(line) for line in lines] == [
        f"shard {SHARD.shard_id}: delivery {n}/4 failed (ValueError: bad row {n}); again in {wait:.1f}s"
        for n, wait in zip((1, 2, 3), waits, strict=True)
    ]


def test_a_failing_read_or_transform_is_delivered_again_too(make_group: MakeGroup, waits: list[float]) -> None:
    group = make_group(max_deliver=2, deliver_backoff_s=0)
    calls: list[int] = []

    def output() -> Any:
        calls.append(1)
        raise ZeroDivisionError("division by zero")

    lease, lines = report(), list[str]()
    result = as_before(stage_with_redelivery(group, SHARD, output, lambda _: "token", lease, lines.append, platform_up))

    assert isinstance(result, ZeroDivisionError)
    assert len(calls) == 2
    assert waits == [0.0]
    assert lease.redeliveries == 1
    assert [without_where(line) for line in lines] == [
        f"shard {SHARD.shard_id}: delivery 1/2 failed (ZeroDivisionError: division by zero); again in 0.0s"
    ]
    assert " in output)" in lines[0], "the line names the frame the error was raised in"


def test_one_delivery_allowed_returns_the_error_without_waiting(make_group: MakeGroup, waits: list[float]) -> None:
    error = RuntimeError("boom")
    deliveries, lease, lines = Deliveries(error), report(), list[str]()

    assert deliver(make_group(max_deliver=1), deliveries, lease, lines) is error

    assert waits == []
    assert lines == []
    assert lease.redeliveries == 0


def test_success_on_the_second_delivery_returns_its_token(make_group: MakeGroup, waits: list[float]) -> None:
    group = make_group(max_deliver=3, deliver_backoff_s=1.5)
    deliveries, lease, lines = Deliveries(OSError("executor lost"), None), report(), list[str]()

    assert deliver(group, deliveries, lease, lines) == "token for frame 2"

    assert deliveries.staged == ["frame 1", "frame 2"]
    assert waits == [1.5]
    assert lease.redeliveries == 1
    assert [without_where(line) for line in lines] == [
        f"shard {SHARD.shard_id}: delivery 1/3 failed (OSError: executor lost); again in 1.5s"
    ]


@pytest.mark.parametrize(
    "error",
    [StaleLease("lease fenced"), SinkError("sink: cannot take it"), ConfigError("transform: not found")],
    ids=["stale-lease", "sink-error", "config-error"],
)
def test_icegroup_errors_propagate_at_once_without_redelivery(
    make_group: MakeGroup, waits: list[float], error: IcegroupError
) -> None:
    deliveries, lease, lines = Deliveries(error, None), report(), list[str]()

    with pytest.raises(type(error)) as info:
        deliver(make_group(max_deliver=3, deliver_backoff_s=0), deliveries, lease, lines)

    assert info.value is error
    assert deliveries.staged == ["frame 1"]
    assert waits == []
    assert lines == []
    assert lease.redeliveries == 0


class FakeJavaClass:
    """What ``getClass()`` of a JVM throwable returns, as far as ``describe_error`` and the cause chain use it."""

    def __init__(self, name: str) -> None:
        """A class with this simple name."""
        self.name = name

    def getSimpleName(self) -> str:
        """The class name without its package."""
        return self.name

    def getName(self) -> str:
        """The class name as given (the cause chain reads full names)."""
        return self.name


class FakeThrowable:
    """What py4j hands over as ``java_exception``: a JVM throwable with a cause chain."""

    def __init__(self, name: str, message: str, cause: FakeThrowable | None = None) -> None:
        """A throwable of class ``name`` with ``message``, caused by ``cause``."""
        self.name, self.message, self.cause = name, message, cause

    def getCause(self) -> FakeThrowable | None:
        """The throwable that caused this one, if any."""
        return self.cause

    def getClass(self) -> FakeJavaClass:
        """The throwable's class."""
        return FakeJavaClass(self.name)

    def getMessage(self) -> str:
        """The throwable's message."""
        return self.message


class FakePy4JError(Exception):
    """A ``Py4JJavaError`` as the Borrower sees it: py4j's wrapper text, the JVM throwable behind it."""

    def __init__(self, java: FakeThrowable) -> None:
        """The wrapper of ``java``."""
        super().__init__("An error occurred while calling o87.save.\n: org.apache.spark.SparkException: Job aborted")
        self.java_exception = java


WORKER_TRACEBACK = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 1247, in main
    process()
  File "/home/me/pipelines/checks.py", line 31, in checked_amount
    raise ValueError(f"amount {amount} is over the limit")
ValueError: amount 97.1 is over the limit
"""


def raised_here() -> ValueError:
    """A ValueError raised (so it has a traceback) in this file."""
    try:
        raise ValueError("bad row 7")
    except ValueError as exc:
        return exc


def test_a_plain_exception_shows_its_type_message_and_where_it_was_raised() -> None:
    assert describe_error(raised_here()).startswith("ValueError: bad row 7 (at test_borrower_delivery.py:")
    assert describe_error(raised_here()).endswith(" in raised_here)")


def test_only_the_first_line_of_a_message_is_shown() -> None:
    assert describe_error(ValueError("  bad row 7\n  at line 7\n")) == "ValueError: bad row 7"


def test_an_exception_without_a_message_is_its_type() -> None:
    assert describe_error(KeyError()) == "KeyError"


def test_a_description_is_cut_at_400_characters() -> None:
    assert describe_error(ValueError("x" * 500)) == ("ValueError: " + "x" * 500)[:400]


def test_a_jvm_error_is_its_root_cause() -> None:
    root = FakeThrowable("ArithmeticException", "/ by zero\n\tat Foo.bar(Foo.java:1)")
    chain = FakeThrowable("SparkException", "Job aborted", FakeThrowable("TaskFailure", "task 3 failed", root))

    assert describe_error(FakePy4JError(chain)) == "ArithmeticException: / by zero"


def test_a_jvm_error_without_a_cause_is_the_error_itself() -> None:
    assert describe_error(FakePy4JError(FakeThrowable("IOException", "disk full"))) == "IOException: disk full"


def test_a_transform_that_raised_in_a_spark_task_shows_its_own_error_and_frame() -> None:
    worker = FakeThrowable("PythonException", WORKER_TRACEBACK)
    chain = FakeThrowable("SparkException", "Job aborted due to stage failure", worker)

    assert describe_error(FakePy4JError(chain)) == (
        "ValueError: amount 97.1 is over the limit (at checks.py:31 in checked_amount)"
    )


def test_a_platform_failure_is_no_delivery_and_blames_no_shard(make_group: MakeGroup, waits: list[float]) -> None:
    group = make_group(max_deliver=2, deliver_backoff_s=0.5)
    try:
        raise RuntimeError("commit failed") from OperationalError("SELECT 1", {}, ConnectionRefusedError())
    except RuntimeError as wrapped:
        outage = wrapped
    deliveries, lease, lines = Deliveries(outage), report(), list[str]()

    with pytest.raises(PlatformUnavailable, match="commit failed") as raised:
        deliver(group, deliveries, lease, lines)

    assert raised.value.__cause__ is outage
    assert (lease.redeliveries, waits, lines) == (0, [], []), "not counted, not waited on here"


def test_a_failure_while_the_catalog_is_unreachable_is_the_platforms_whatever_its_class(
    make_group: MakeGroup, waits: list[float]
) -> None:
    group = make_group(max_deliver=2)
    wrapped = TypeError("Cannot cast org.postgresql.util.PSQLException to java.sql.SQLTransientException")
    deliveries = Deliveries(wrapped)

    with pytest.raises(PlatformUnavailable):
        deliver(group, deliveries, report(), [], up=lambda: False)
    assert deliver(group, Deliveries(TypeError("bad column"), TypeError("bad column")), report(), []).args == (
        "bad column",
    ), "with the catalog up, the same class is the transform's"


@pytest.mark.parametrize(
    ("names", "platform"),
    [
        (["builtins.RuntimeError", "org.postgresql.util.PSQLException"], True),
        (["py4j.protocol.Py4JJavaError", "java.net.ConnectException"], True),
        (["py4j.protocol.Py4JJavaError", "org.apache.spark.SparkException", "java.sql.SQLTimeoutException"], True),
        (["py4j.protocol.Py4JJavaError", "org.apache.spark.api.python.PythonException"], False),
        (["builtins.ValueError"], False),
        (["py4j.protocol.Py4JJavaError", "java.io.EOFException"], False),
    ],
)
def test_the_cause_chain_names_whose_failure_it_is(names: list[str], platform: bool) -> None:
    assert is_infrastructure(names) is platform


def test_a_lease_waits_out_a_platform_failure_with_backoff_for_half_its_timeout(make_group: MakeGroup) -> None:
    group = make_group(deliver_backoff_s=1.0, lease_timeout_s=60)
    outage = PlatformUnavailable("catalog down")

    assert [platform_retry(group, outage, tries, 0.0) for tries in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert platform_retry(group, outage, 3, 30.0) is None, "half the lease timeout waited: the run fails"
    assert platform_retry(group, ValueError("bad row"), 0, 0.0) is None, "the shard's failure is not retried here"
    assert failure_classes(outage) == ["icegroup.iceberg.errors.PlatformUnavailable"]


def java_error(name: str) -> FakePy4JError:
    """A py4j error whose JVM throwable is of class ``name`` (a full name: the cause chain reads those)."""
    return FakePy4JError(FakeThrowable(name, ""))


def fenced_commit() -> StaleLease:
    """The error a fenced lease ends with: the sink refused the commit (``spark_jobs/sink/fenced_commit.py``)."""
    try:
        try:
            raise java_error("org.apache.iceberg.exceptions.CommitFailedException")
        except FakePy4JError:
            raise Fenced("sink: commit refused: lease fenced at attempt 2") from None
    except Fenced as fenced:
        try:
            raise StaleLease(str(fenced)) from fenced
        except StaleLease as stale:
            return stale
    raise AssertionError("unreachable")


def test_a_fenced_lease_is_final_not_a_platform_failure(make_group: MakeGroup) -> None:
    group = make_group(deliver_backoff_s=1.0, lease_timeout_s=60)
    stale = fenced_commit()

    assert "org.apache.iceberg.exceptions.CommitFailedException" in failure_classes(stale), (
        "the refusal was found through Iceberg's commit failure"
    )
    assert platform_retry(group, stale, 0, 0.0) is None, "a fenced lease ends its run at once"
    lost_race = SinkError("sink: commit of shards 1 to s failed: the swap kept losing")
    lost_race.__context__ = java_error("org.apache.iceberg.exceptions.CommitFailedException")
    assert platform_retry(group, lost_race, 0, 0.0) == 1.0, "a publish that kept losing the swap is tried again"
    config = ConfigError("group x: transform: bad")
    config.__cause__ = java_error("java.net.ConnectException")
    assert platform_retry(group, config, 0, 0.0) is None, "a bad config stays bad whatever it was found through"


def converted_by_pyspark() -> IllegalArgumentError:
    """A JVM error as PySpark raises it: converted to a Python class ``from None`` over the py4j error."""
    try:
        try:
            raise java_error("java.net.UnknownHostException")
        except FakePy4JError:
            raise IllegalArgumentError("java.net.UnknownHostException: warehouse-bucket") from None
    except IllegalArgumentError as converted:
        return converted
    raise AssertionError("unreachable")


def test_a_jvm_failure_pyspark_converted_from_none_keeps_its_jvm_causes() -> None:
    assert is_infrastructure(failure_classes(converted_by_pyspark())), (
        "storage that cannot be reached is the platform's"
    )


class IllegalArgumentError(Exception):
    """Like PySpark's ``IllegalArgumentException``, which it raises ``from None`` over the JVM's error."""


def test_a_lost_sequence_race_answered_400_is_the_platforms_and_blames_no_shard(
    make_group: MakeGroup, waits: list[float]
) -> None:
    refused = FakeThrowable(
        "org.apache.iceberg.exceptions.BadRequestException",
        "Malformed request: Cannot add snapshot with sequence number 62 older than last sequence number 62",
    )
    bad_column = FakeThrowable("org.apache.iceberg.exceptions.BadRequestException", "Malformed request: bad column")

    assert is_platform_failure(FakePy4JError(refused))
    assert not is_platform_failure(FakePy4JError(bad_column)), "another 400 is no lost race"
    with pytest.raises(PlatformUnavailable, match="sequence number 62"):
        deliver(make_group(max_deliver=2), Deliveries(FakePy4JError(refused)), report(), [])
    assert waits == [], "not counted as a delivery, nor waited on here"


class Commits:
    """A ``commit`` fake for ``staged_again``: each call raises the next planned error, then returns a count."""

    def __init__(self, *errors: Exception) -> None:
        """Commits that raise ``errors`` in turn, then succeed."""
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> int:
        """Stage and publish: raise the next error, or return how many calls it took."""
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.calls


def test_a_commit_whose_staged_output_was_expired_is_staged_again_and_says_so() -> None:
    gone = StagedOutputGone("sink: commit of shards s1 to lake.out failed: staged output t1 of shards s1 is gone")
    said: list[str] = []

    assert staged_again(said.append, Commits(gone)) == 2
    assert said == [f"{gone}; staging again (2/{STAGINGS})"]


def test_staged_output_expired_at_every_publish_ends_in_the_named_error_after_the_last_staging() -> None:
    commits = Commits(*(StagedOutputGone(f"gone {n}") for n in range(STAGINGS)))

    with pytest.raises(StagedOutputGone, match=f"gone {STAGINGS - 1}"):
        staged_again(lambda _line: None, commits)
    assert commits.calls == STAGINGS


@pytest.mark.parametrize("error", [Fenced("fenced"), SinkError("no wap"), ValueError("transform")])
def test_a_commit_failing_any_other_way_is_not_staged_again(error: Exception) -> None:
    commits = Commits(error)

    with pytest.raises(type(error)):
        staged_again(lambda _line: None, commits)
    assert commits.calls == 1


def test_rows_isolated_from_a_shard_staged_again_are_counted_once(
    make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard whose isolated rest expired before its publish isolates its rows again; the report counts them once."""
    group = make_group(on_poison="isolate")
    run = SimpleNamespace(group=group, report=LeaseReport("l1", 1, 1, 0, 1), progress=lambda _line: None)
    monkeypatch.setattr(borrower, "failpoint", lambda _name: None)
    monkeypatch.setattr(borrower, "output", lambda *_args: None)
    monkeypatch.setattr(borrower, "stage_with_redelivery", lambda *_args: Undelivered(ValueError("poison")))
    monkeypatch.setattr(
        borrower, "commit_without_poison", lambda *_args: (Staged("t"), {"f.parquet": [4, 9, 12]}, None)
    )
    publishes = Commits(StagedOutputGone("staged output t of shards s1 is gone"))
    monkeypatch.setattr(borrower, "publish", lambda *_args, **_kwargs: publishes())

    staged_again(lambda _line: None, partial(borrower.commit_alone, run, shard(1), None, None))  # type: ignore[arg-type]

    assert publishes.calls == 2
    assert run.report.isolated_rows == 3
