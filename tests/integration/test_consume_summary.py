"""A consume's closing figures count every lease it ran, also one whose report comes after the group is caught up."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.failpoints import ENV
from icegroup.iceberg.protocol.liveness import RunState
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import sink_ids

pytestmark = pytest.mark.spark


def test_a_lease_that_reports_after_the_group_caught_up_is_still_counted(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = make_group(max_borrowers=2, leases_per_borrower=1)
    append_batches(create_source(catalog, group.source), 1, 40)
    points = tmp_path / "failpoints"
    points.mkdir()
    (points / "borrower.after_commit").touch()  # the first lease to commit stops right after its commit
    monkeypatch.setenv(ENV, str(points))

    def release_later() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(points.glob("hit.*")):
            time.sleep(0.05)
        time.sleep(3)  # meanwhile the other lease ends and a tick finds the group caught up
        for hit in points.glob("hit.*"):
            hit.unlink()

    releaser = threading.Thread(target=release_later, daemon=True)
    releaser.start()
    summary = consume(lambda: spark, lakehouse, group, "run-summary", lambda _: RunState.MISSING)
    releaser.join()

    assert summary.caught_up
    assert summary.leases == 2, "both leases, though one reported after the group was caught up"
    assert summary.rows_in == summary.rows_out == 40 == len(sink_ids(catalog, group))
