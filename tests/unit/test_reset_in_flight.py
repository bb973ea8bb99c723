"""A reset between its fence and its registry commit is in flight, not interrupted (SQLite catalog, no Spark).

A tick or a ``consume`` that runs meanwhile backs off and says when to try again; only a reset
whose holder died (silent for ``session_timeout_s``, its process gone, or ended without clearing
its marker) is called interrupted and named for completion. ``--execute --json`` says it completed
an interrupted reset only when it did.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import main
from icegroup.dagster_project.jobs import borrower_job
from icegroup.dagster_project.resources import IcegroupResource
from icegroup.dagster_project.sensors import leader_sensor
from icegroup.iceberg import reset
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import NotCaughtUp, RegistryConflict, ResetInFlight, ResetInterrupted, UsageError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import Holder, ResetMarker, ResetTarget, judge_holder, parse_marker
from icegroup.iceberg.protocol.sink_commit import reset_key
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.heartbeats import beat, ensure_table, heartbeat
from icegroup.iceberg.store.registry import load_state
from icegroup.spark_jobs.consume import ConsumeSummary
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source, no_spark, write_groups
from tests.sink_commits import consume_all

BACK = ResetTarget("shift", "-1")


class Crash(Exception):
    """A reset process that dies where the chaos suite would kill it."""


@pytest.fixture
def group(catalog: Catalog, make_group: MakeGroup) -> GroupConfig:
    """A group that consumed 3 snapshots of 3 streams in small shards."""
    built = make_group(shard_caps={"max_files": 1}, session_timeout_s=30)
    append_batches(create_source(catalog, built.source), 3, 9)
    consume_all(catalog, built)
    return built


def at_failpoints(monkeypatch: pytest.MonkeyPatch, points: set[str], hook: Callable[[str], None]) -> None:
    """Run ``hook`` where the reset reaches one of ``points`` (in the reset's own thread)."""
    monkeypatch.setattr(reset, "failpoint", lambda name: hook(name) if name in points else None)


def a_tick(catalog: Catalog, group: GroupConfig, now_ms: int | None = None) -> None:
    tick(catalog, group, lambda _: RunState.MISSING, now_ms=now_ms)


def set_marker(catalog: Catalog, group: GroupConfig, epoch: int, **fields: Any) -> None:
    """A reset's fence and marker on the sink, as its first step leaves them."""
    marker = json.dumps({"epoch": epoch, "target": BACK.describe(), **fields})
    raise_fences(catalog.load_table(group.sink), {epoch_key(group.name): epoch}, also={reset_key(group.name): marker})


def test_a_tick_between_a_resets_fence_and_its_registry_commit_says_in_flight_not_interrupted(
    catalog: Catalog, group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Exception] = {}

    def tick_now(point: str) -> None:
        try:
            a_tick(catalog, group)
        except Exception as exc:  # what the tick raised is what is checked
            seen[point] = exc

    at_failpoints(monkeypatch, {"reset.after_fence", "reset.after_delete"}, tick_now)

    plan = reset.execute_reset(catalog, group, BACK)

    assert set(seen) == {"reset.after_fence", "reset.after_delete"}
    for point, exc in seen.items():
        assert not isinstance(exc, ResetInterrupted), f"{point}: {exc}"
        assert isinstance(exc, ResetInFlight), f"{point}: {exc!r}"
        assert isinstance(exc, NotCaughtUp), "the CLI exits 3: stopped short, run it again later"
        assert isinstance(exc, RegistryConflict), "a Leader (sensor) backs off: the tick changed nothing"
        assert f"a reset ({BACK.describe()}) is in flight" in str(exc)
        assert "run it again" in str(exc)
        assert "--execute" not in str(exc), "no advice to run the reset a second time"
    assert plan.epoch == 1
    a_tick(catalog, group)  # the reset finished: ticks go on in its epoch
    assert load_state(catalog, group.name).state.epoch == 1  # type: ignore[union-attr]


def test_consume_waits_out_a_reset_in_flight_and_stops_short_naming_it(
    catalog: Catalog, lakehouse: LakehouseConfig, group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Exception] = []

    def consume_now(_: str) -> None:
        try:
            consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lambda _: None,
                    max_wait_s=0.3, poll_s=0.05)  # fmt: skip
        except Exception as exc:  # what consume raised is what is checked
            seen.append(exc)

    at_failpoints(monkeypatch, {"reset.after_fence"}, consume_now)

    reset.execute_reset(catalog, group, BACK)

    (exc,) = seen
    assert isinstance(exc, ResetInFlight), repr(exc)
    assert f"a reset ({BACK.describe()}) is in flight" in str(exc)
    a_tick(catalog, group)  # once the reset is done, ticks go on


def test_consume_started_during_a_reset_to_latest_goes_on_once_the_reset_commits(
    catalog: Catalog, lakehouse: LakehouseConfig, group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    results: list[object] = []

    def run() -> None:
        try:
            results.append(consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.MISSING,
                                   progress=lines.append, max_wait_s=60, poll_s=0.05))  # fmt: skip
        except Exception as exc:  # what consume raised is what is checked
            results.append(exc)

    worker = threading.Thread(target=run)

    def start_consuming(_: str) -> None:
        worker.start()
        deadline = time.monotonic() + 30
        while not any("backing off" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)  # the reset takes a moment before its registry commit: consume ticks meanwhile

    at_failpoints(monkeypatch, {"reset.after_fence"}, start_consuming)

    reset.execute_reset(catalog, group, ResetTarget("latest"))
    worker.join(timeout=60)

    (summary,) = results
    assert isinstance(summary, ConsumeSummary), repr(summary)
    assert summary.caught_up
    assert any("backing off" in line and "is in flight" in line for line in lines), lines


def test_a_leader_sensor_tick_skips_while_a_reset_is_in_flight(
    catalog: Catalog, group: GroupConfig, lake_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    borrower = borrower_job(group, dg.AssetKey("sink"), dg.AssetKey("source"), {"icegroup": IcegroupResource()})
    sensor = leader_sensor(group, borrower, dg.AssetKey("sink"), dg.AssetKey("source"), "icegroup", None, "code")
    seen: list[object] = []

    def evaluate(_: str) -> None:
        with dg.DagsterInstance.ephemeral() as instance:
            context = dg.build_sensor_context(instance=instance, resources={"icegroup": IcegroupResource()})
            seen.append(sensor(context))

    at_failpoints(monkeypatch, {"reset.after_fence"}, evaluate)

    reset.execute_reset(catalog, group, BACK)

    (skipped,) = seen
    assert isinstance(skipped, dg.SkipReason)
    assert "is in flight" in (skipped.skip_message or "")
    assert "another Leader" not in (skipped.skip_message or ""), "a reset in flight is not a lost race"


def test_a_reset_that_died_after_its_fence_is_called_interrupted_with_the_command_that_completes_it(
    catalog: Catalog, group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    def die(_: str) -> None:
        raise Crash

    at_failpoints(monkeypatch, {"reset.after_fence"}, die)
    with pytest.raises(Crash):
        reset.execute_reset(catalog, group, BACK)
    monkeypatch.undo()

    advice = f"run `icegroup reset {group.name} {BACK.describe()} --execute` again to complete it"
    with pytest.raises(ResetInterrupted, match=advice):
        a_tick(catalog, group)
    plan = reset.execute_reset(catalog, group, BACK)
    assert plan.completes_interrupted, "this run found the marker and completed that reset"
    assert plan.epoch == 1


def test_a_reset_whose_holder_went_silent_is_interrupted_only_after_the_session_timeout(
    catalog: Catalog, group: GroupConfig
) -> None:
    ensure_table(catalog)
    beat(catalog, group.name, "reset-killed", now_ms=1_000_000)
    set_marker(catalog, group, 1, holder="reset-killed", at_ms=1_000_000)

    with pytest.raises(ResetInFlight, match="is in flight"):
        a_tick(catalog, group, now_ms=1_000_000 + 30_000)
    with pytest.raises(ResetInterrupted, match="it was interrupted"):
        a_tick(catalog, group, now_ms=1_000_000 + 30_001)


def test_a_marker_written_before_markers_named_their_holder_is_interrupted_as_before(
    catalog: Catalog, group: GroupConfig
) -> None:
    set_marker(catalog, group, 1)

    with pytest.raises(ResetInterrupted, match=f"run `icegroup reset {group.name} --shift-by -1 --execute` again"):
        a_tick(catalog, group)


def test_another_reset_while_one_is_in_flight_is_refused_as_in_flight_not_interrupted(
    catalog: Catalog, group: GroupConfig
) -> None:
    with heartbeat(catalog, group.name, "reset-other", interval_s=10):
        set_marker(catalog, group, 1, holder="reset-other")

        with pytest.raises(ResetInFlight, match="is in flight") as refused:
            reset.execute_reset(catalog, group, ResetTarget("latest"))
        with pytest.raises(ResetInFlight, match="is in flight"):
            reset.plan_reset(catalog, group, BACK)

    assert "was interrupted" not in str(refused.value)
    with pytest.raises(UsageError, match="was interrupted"):  # its holder ended without completing it
        reset.plan_reset(catalog, group, ResetTarget("latest"))


def test_execute_json_says_completes_interrupted_only_when_it_completed_one(
    catalog: Catalog, group: GroupConfig, tmp_path: Path, lake_home: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    groups = str(write_groups(tmp_path / "groups.yaml", group))
    command = ["--groups", groups, "reset", group.name, "--shift-by", "-1", "--execute", "--json"]

    assert main(command) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["executed"]
    assert fresh["epoch"] == 1
    assert fresh["completes_interrupted"] is False, "there was no marker when it started"

    def die(_: str) -> None:
        raise Crash

    at_failpoints(monkeypatch, {"reset.after_fence"}, die)
    with pytest.raises(Crash):
        reset.execute_reset(catalog, group, BACK)
    monkeypatch.setattr(reset, "failpoint", lambda _: None)

    assert main(command) == 0
    completed = json.loads(capsys.readouterr().out)
    assert completed["completes_interrupted"] is True, "the marker of the one that died was there at the start"
    assert completed["epoch"] == 2


MARKER = ResetMarker(epoch=2, target="--to-latest", holder="reset-1", at_ms=1_000)


@pytest.mark.parametrize(
    ("marker", "beats", "gone", "now_ms", "verdict"),
    [
        (MARKER, {"reset-1": 5_000}, (), 35_000, Holder.ALIVE),
        (MARKER, {"reset-1": 5_000}, (), 35_001, Holder.DEAD),  # silent past the session timeout (30 s)
        (MARKER, {"reset-1": 5_000}, ("reset-1",), 5_001, Holder.DEAD),  # its process ended on this machine
        (MARKER, {}, (), 1_001, Holder.ENDED),  # it forgot its row: it stopped, done or not; read the marker again
        (ResetMarker(epoch=2, target="--to-latest"), {}, (), 1_001, Holder.DEAD),  # an older marker names no holder
    ],
)
def test_a_reset_markers_holder_is_judged_by_its_heartbeat(
    marker: ResetMarker, beats: dict[str, int], gone: tuple[str, ...], now_ms: int, verdict: Holder
) -> None:
    assert judge_holder(marker, beats, gone, now_ms, session_timeout_s=30) is verdict


def test_a_marker_round_trips_and_one_without_a_holder_still_reads() -> None:
    assert parse_marker(MARKER.to_json()) == MARKER
    assert parse_marker('{"epoch": 3, "target": "--to-earliest"}') == ResetMarker(3, "--to-earliest")
    assert json.loads(MARKER.to_json())["epoch"] == 2, "an older icegroup reads epoch and target as before"
    assert parse_marker("") is None
