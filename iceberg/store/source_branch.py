"""Keeping, reading and dropping a group's branch on its source (``iceberg/protocol/source_branch.py``)."""

from __future__ import annotations

import logging

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import ancestors_of
from pyiceberg.table.update import AssertRefSnapshotId, SetSnapshotRefUpdate

from icegroup.iceberg.protocol.source_branch import REF_PREFIX, RefPosition, ref_move, ref_name, snapshots_to_keep
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.metadata_commit import commit_updates

log = logging.getLogger(__name__)


def read_ref(source: Table, group: str) -> RefPosition | None:
    """The group's branch on ``source`` as it stands; None if there is none."""
    ref = source.metadata.refs.get(ref_name(group))
    if ref is None or ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        return None
    return RefPosition(ref.snapshot_id, ref.min_snapshots_to_keep or 1)


def wanted_ref(source: Table, state: GroupState) -> RefPosition | None:
    """The branch that keeps what the group still reads: at its planning cursor, back to its low watermark.

    None while nothing is planned, or when the planned snapshot is gone already.
    """
    head = source.snapshot_by_id(state.planned_through) if state.planned_through is not None else None
    if head is None:
        return None
    mark = state.low_watermark()
    low = mark[0] if mark is not None else None
    ancestry = (s.snapshot_id for s in ancestors_of(head, source.metadata))
    return RefPosition(head.snapshot_id, snapshots_to_keep(ancestry, low))


def keep_ref(source: Table, group: str, state: GroupState) -> RefPosition | None:
    """Move the group's branch where ``ref_move`` says it must; returns what it wrote, if anything.

    A write that loses to another commit on the source is left for the next tick, as a
    registration is: the branch then keeps what it kept, a little less up to date. The write is
    the one ``create_branch`` makes, sent in one catalog call (``commit_updates``): it requires the
    branch where this tick read it.
    """
    wanted = wanted_ref(source, state)
    move = ref_move(read_ref(source, group), wanted) if wanted is not None else None
    if move is None:
        return None
    name = ref_name(group)
    held = source.metadata.refs.get(name)
    # By the spec's names (pyiceberg's aliases), as a REST catalog receives them.
    branch = SetSnapshotRefUpdate.model_validate(
        {"ref-name": name, "type": "branch", "snapshot-id": move.snapshot_id, "min-snapshots-to-keep": move.keep}
    )
    where = AssertRefSnapshotId.model_validate({"ref": name, "snapshot-id": held.snapshot_id if held else None})
    try:
        commit_updates(source, (branch,), (where,))
    except CommitFailedException as exc:
        log.info("group %s: source branch %s not moved this tick: %s", group, ref_name(group), exc)
        return None
    except NotImplementedError as exc:  # pyiceberg writes no format-v3 metadata; a REST server writes its own
        log.warning("group %s: no source branch %s: %s", group, ref_name(group), exc)
        return None
    return move


def group_refs(source: Table) -> dict[str, RefPosition]:
    """Every group branch on ``source``, by group name."""
    found = {}
    for name in source.metadata.refs:
        if name.startswith(REF_PREFIX):
            group = name.removeprefix(REF_PREFIX)
            ref = read_ref(source, group)
            if ref is not None:
                found[group] = ref
    return found


def drop_refs(source: Table, groups: list[str]) -> list[str]:
    """Remove the branches of ``groups`` from ``source`` in one commit; returns the groups whose branch went."""
    there = [g for g in groups if ref_name(g) in source.metadata.refs]
    if not there:
        return []
    update = source.manage_snapshots()
    for group in there:
        update = update.remove_branch(ref_name(group))
    update.commit()
    return there
