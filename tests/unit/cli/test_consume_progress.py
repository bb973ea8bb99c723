"""The consume progress bars' figures: rows and snapshots per stream and in total, from registry reads."""

from __future__ import annotations

import io

from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli.consume_run import waits_on
from icegroup.dagster_project.cli.progress import TOTAL, Tally, Tracker
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.spark_jobs.consume import WAITS
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import commit_lease


def test_bars_count_committed_rows_and_snapshots_per_stream_and_in_total(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    append_batches(create_source(catalog, group.source), 2, 30)  # 2 snapshots, 10 rows per region each
    tracker = Tracker()
    first = tick(catalog, group, lambda _: RunState.MISSING)

    before = tracker.update(first.state)

    assert before[TOTAL] == Tally(rows_done=0, rows_total=60, snapshots_done=0, snapshots_total=6)
    lease = first.launch[0]
    commit_lease(catalog, group, first.state, lease)
    second = tick(catalog, group, lambda _: RunState.SUCCEEDED)

    after = tracker.update(second.state)

    [stream] = lease.streams
    assert after[stream] == Tally(rows_done=20, rows_total=20, snapshots_done=2, snapshots_total=2)
    assert after[TOTAL] == Tally(rows_done=20, rows_total=60, snapshots_done=2, snapshots_total=6)


def test_the_runs_waits_reach_the_terminal_whatever_the_log_and_only_while_it_runs() -> None:
    terminal = io.StringIO()
    with waits_on(terminal):
        WAITS.warning("g: waiting for the catalog, unavailable for 4s (OperationalError); giving up after 60s")
    WAITS.warning("after the run: not on the terminal")

    assert terminal.getvalue() == (
        "icegroup: g: waiting for the catalog, unavailable for 4s (OperationalError); giving up after 60s\n"
    )
