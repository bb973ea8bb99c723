"""``icegroup migrate`` previews without Spark: what ``--execute`` would rewrite, read with pyiceberg only."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit, main
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from tests.factories import BORROWER_RUN
from tests.sink_commits import commit_lease


def test_migrate_of_a_group_without_a_sink_has_nothing_to_do(
    group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*cli, "migrate", group.name]) == Exit.OK

    out = capsys.readouterr().out.strip()
    assert out == f"group {group.name}: the sink {group.sink} holds no rows; nothing to migrate"


def test_migrate_previews_the_files_of_a_sink_written_before_the_window_column_and_changes_nothing(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN)
    commit_lease(catalog, group, first.state, first.launch[0])  # a sink with no _ig_window column
    before = catalog.load_table(group.sink).metadata.current_snapshot_id

    assert main([*cli, "migrate", group.name]) == Exit.OK

    out = capsys.readouterr().out.strip()
    assert out.startswith(f"group {group.name}: preview: nothing changed; 10 rows with no window in 1 files (10 rows)")
    assert out.endswith(f"`icegroup migrate {group.name} --execute` rewrites those files with their windows")
    assert catalog.load_table(group.sink).metadata.current_snapshot_id == before
