"""Committing to a table without pyiceberg's copies of its whole metadata, whose cost grows with its history.

A ``Transaction`` builds its staged metadata again, as a deep copy of the whole table metadata,
each time it is read: three or four times to move a branch, more for an overwrite. So a commit
costs in proportion to the snapshots the table keeps. On a source of 3,000 snapshots a branch
move took 1.3 s of a 2.5 s tick; a registry commit took 1.8 s at 1,209 registry snapshots, which
a group ticking busily every 5 s makes within an hour (two a tick; ``docs/concepts/performance.md``,
a commit's cost and the table's history). Two ways around the copies, each committing what
pyiceberg would, with a smaller cost that still grows with the history (the catalog loads,
copies and writes the whole metadata once):

- ``commit_updates``: metadata updates (a branch, a property), sent in one catalog call;
- ``on_head``: a write that builds on main's head alone (an append, an overwrite, a delete), made on
  a handle whose metadata keeps only that snapshot. The catalog applies it to the table's whole
  metadata, under the same requirements (main still at that head; the table's UUID).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import AssertTableUUID, TableRequirement, TableUpdate


def commit_updates(
    table: Table, updates: tuple[TableUpdate, ...], requirements: tuple[TableRequirement, ...] = ()
) -> None:
    """Commit ``updates`` iff ``requirements`` hold and the table is still this one; ``table`` then holds the result.

    The requirements are sent as they are: pyiceberg's own retry would re-base the updates onto a
    newer head. A commit whose requirements fail raises the catalog's ``CommitFailedException``.
    """
    # ``_do_commit`` is the catalog call a Transaction ends with: it also checks the UUID that came back, deletes
    # the metadata files that fell off the log (``write.metadata.delete-after-commit.enabled``) and updates ``table``.
    table._do_commit(updates, (*requirements, AssertTableUUID(uuid=table.metadata.table_uuid)))


@contextmanager
def on_head(table: Table) -> Iterator[Table]:
    """A handle on ``table`` knowing main's head as its only snapshot; once its write commits, ``table`` has it too.

    Only for a write that reads nothing but main's head: the handle knows no older snapshot, no
    other branch or tag, and no snapshot log. It keeps the metadata log (``previous-versions-max``
    long), so the files that fall off it are deleted after the commit, as pyiceberg deletes them.
    A new snapshot's random id is checked unique against the head alone; the catalog refuses the
    one-in-2^63 id an older snapshot holds, with a ``ValueError``. A write that raises leaves
    ``table`` as it was.
    """
    metadata = table.metadata
    head = metadata.current_snapshot()
    lean = metadata.model_copy(
        update={
            "snapshots": [head] if head is not None else [],
            "refs": {MAIN_BRANCH: metadata.refs[MAIN_BRANCH]} if head is not None else {},
            "snapshot_log": [],
        }
    )
    handle = Table(table.name(), lean, table.metadata_location, table.io, table.catalog, table.config)
    yield handle
    if handle.metadata_location != table.metadata_location:
        table.metadata = handle.metadata
        table.metadata_location = handle.metadata_location
