"""Canary transforms: a changed transform's output for a window, staged beside main, compared, promoted in one commit.

The canary of ``amount_in_cents`` over today's window changes every row's amount and nothing else,
and main does not move. Its promotion waits for the groups file to name the new transform, then
replaces the window in one fenced commit: a reader scanning the sink all through it sees either
every old row or every new row, never a mix, and the registry records the transform change.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.cli import main as icegroup_cli
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError, WindowMoved
from icegroup.iceberg.store.canaries import load_canary
from icegroup.iceberg.store.registry import load_state
from icegroup.spark_jobs.canary import promote_canary, run_canary
from tests.factories import MakeGroup, append_batches, create_source, today, write_groups
from tests.integration.helpers import consumed, drive, quiet

pytestmark = pytest.mark.spark

CENTS = "tests.integration.transforms:amount_in_cents"


def amounts(catalog: Catalog, sink: str) -> dict[int, float]:
    """event_id -> amount, as a reader of the sink's main sees them now."""
    rows = catalog.load_table(sink).scan(selected_fields=("event_id", "amount")).to_arrow()
    return dict(zip(rows.column("event_id").to_pylist(), rows.column("amount").to_pylist(), strict=True))


def test_a_canary_shows_its_difference_and_leaves_main_untouched_then_promotes_in_one_commit(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    lake_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 15)
    before = amounts(catalog, group.sink)
    head_before = catalog.load_table(group.sink).current_snapshot()

    diff = run_canary(spark, lakehouse, group, CENTS, None, "event_id", quiet)

    assert diff.window == today(group)
    assert (diff.main_rows, diff.canary_rows, diff.added, diff.removed) == (30, 30, 0, 0)
    assert diff.changed == sum(1 for amount in before.values() if round(amount * 100) != amount)
    (amount,) = [c for c in diff.columns if c.column == "amount"]
    assert amount.canary_max == round(amount.main_max * 100)
    assert diff.sample
    assert all(set(row) == {"event_id", "amount"} for row in diff.sample), "only the amount changed"
    assert catalog.load_table(group.sink).current_snapshot() == head_before, "main did not move"
    assert amounts(catalog, group.sink) == before
    record = load_canary(catalog.load_table(group.sink), group.name)
    assert record is not None
    assert record.transform == CENTS

    after = {event_id: float(round(value * 100)) for event_id, value in before.items()}
    seen: list[str] = []
    done = threading.Event()

    def read_while_promoting() -> None:
        while not done.is_set():
            now = amounts(catalog, group.sink)
            seen.append("old" if now == before else "new" if now == after else f"MIXED: {now}")

    with pytest.raises(UsageError, match=f"set `transform: {CENTS}` for it in its groups file first"):
        promote_canary(spark, lakehouse, group, "promote-0", quiet)
    switched = group.model_copy(update={"transform": CENTS, "on_change": "continue"})  # the groups file, edited
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    capsys.readouterr()
    unedited = write_groups(tmp_path / "before.yaml", group)
    assert icegroup_cli(["--groups", str(unedited), "canary", group.name, "--promote"]) == 2, (
        "the preview checks as --execute"
    )
    assert f"set `transform: {CENTS}` for it in its groups file first" in capsys.readouterr().err
    edited = write_groups(tmp_path / "groups.yaml", switched)
    assert icegroup_cli(["--groups", str(edited), "canary", group.name, "--promote"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"would promote: the canary of window {diff.window} (transform {CENTS}, staged snapshot "
        f"{record.staged_snapshot}) as the window's output, replacing it in one fenced commit",
        f"preview: nothing changed; `icegroup canary {group.name} --promote --execute` promotes it",
    ]
    assert catalog.load_table(group.sink).current_snapshot() == head_before, "the preview changed nothing"
    assert load_canary(catalog.load_table(group.sink), group.name) == record
    reader = threading.Thread(target=read_while_promoting)
    reader.start()
    try:
        report = promote_canary(spark, lakehouse, switched, "promote-1", quiet)
    finally:
        done.set()
        reader.join()

    assert report.rows_out == report.rows_replaced == 30
    assert amounts(catalog, group.sink) == after
    assert seen, "the reader scanned during the promotion"
    assert all(state in ("old", "new") for state in seen), [s for s in seen if s.startswith("MIXED")][:1]
    main = catalog.load_table(group.sink)
    assert main.current_snapshot() is not None
    assert main.current_snapshot().snapshot_id == report.sink_snapshot, "one commit made it the window's output"
    assert load_canary(main, group.name) is None
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.config_hash == switched.config_hash, "the registry pins the promoted transform"
    with pytest.raises(UsageError, match="no canary to promote"):
        promote_canary(spark, lakehouse, switched, "promote-2", quiet)


def test_a_canary_whose_window_moved_is_not_promoted(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 1, 10)
    drive(spark, lakehouse, group)
    run_canary(spark, lakehouse, group, CENTS, today(group), None, quiet)
    append_batches(source, 1, 10)
    drive(spark, lakehouse, group)  # new output of the window, after the canary planned it
    before = catalog.load_table(group.sink).scan().to_arrow()

    switched = group.model_copy(update={"transform": CENTS, "on_change": "continue"})
    with pytest.raises(WindowMoved, match="run `icegroup canary` again"):
        promote_canary(spark, lakehouse, switched, "promote-1", quiet)

    after = catalog.load_table(group.sink).scan().to_arrow()
    assert pa.Table.equals(before.sort_by("event_id"), after.sort_by("event_id")), "nothing was replaced"
