"""A table served without its snapshot history is told apart from one whose old snapshots expired."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.table_history import NESSIE_COMMIT_PROPERTY, HistoryView, history_missing


def view(**overrides: object) -> HistoryView:
    fields: dict[str, object] = {
        "properties": {},
        "format_version": 2,
        "snapshots": 3,
        "current_sequence": 3,
        "current_parent": 2,
    }
    fields.update(overrides)
    return HistoryView(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kept",
    [
        view(),
        view(snapshots=0, current_sequence=None, current_parent=None),  # a new, empty table
        view(snapshots=1, current_sequence=1, current_parent=None),  # its first append
        view(snapshots=1, current_sequence=7, current_parent=6),  # expire_snapshots(retain_last=1)
        view(format_version=1, snapshots=1, current_sequence=0, current_parent=None),  # v1 has no sequence numbers
    ],
)
def test_a_history_that_is_there_or_expired_passes(kept: HistoryView) -> None:
    assert history_missing(kept) is None


def test_nessie_is_named_by_the_property_it_sets() -> None:
    reason = history_missing(view(properties={NESSIE_COMMIT_PROPERTY: "0390428b"}, snapshots=1, current_parent=None))
    assert reason is not None
    assert "Project Nessie" in reason
    assert "only the current snapshot" in reason


def test_any_other_server_that_drops_parents_is_caught_by_the_shape() -> None:
    reason = history_missing(view(snapshots=1, current_sequence=3, current_parent=None))
    assert reason is not None
    assert "sequence number 3" in reason
    assert "no parent" in reason
