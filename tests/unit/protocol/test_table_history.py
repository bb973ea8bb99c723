"""A table Nessie serves (no snapshot history in its metadata) is told apart from tables that merely look alike."""

from __future__ import annotations

from icegroup.iceberg.protocol.table_history import NESSIE_COMMIT_PROPERTY, HistoryView, history_missing


def test_nessie_is_named_by_the_property_it_sets() -> None:
    reason = history_missing(HistoryView(properties={NESSIE_COMMIT_PROPERTY: "0390428b", "gc.enabled": "false"}))

    assert reason is not None
    assert "Project Nessie" in reason
    assert "only the current snapshot" in reason


def test_any_other_table_passes_whatever_its_shape() -> None:
    # icegroup's own sink after its first publish (one snapshot, sequence 2, no parent) is one of them.
    assert history_missing(HistoryView(properties={"write.format.default": "parquet"})) is None
