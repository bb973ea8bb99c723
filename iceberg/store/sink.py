"""What the Leader and operators write to a sink besides fences: a reset's delete, and clearing its marker.

Borrowers and Leaders commit to a sink all the time, so these writes are made again on the fresh
table while other writers win the race (``commit_retrying``); each is idempotent and holds no
precondition of its own, so doing it again is always right.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from icegroup.iceberg.errors import LostRace, SinkError
from icegroup.iceberg.protocol.sink_commit import shard_filter
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.tables import shards_as_numbers


def lost_race(exc: Exception) -> bool:
    """Whether a pyiceberg commit failed only because another writer committed first.

    Besides ``CommitFailedException`` (main moved), a commit that adds a snapshot fails with a
    ``ValueError`` when another writer added a snapshot that is *not* on main in between: a
    Borrower's staged (write-audit-publish) snapshot. Main is unchanged, so the requirement check
    passes, but the new snapshot's sequence number is no longer above the table's last one.
    Loading the table again and redoing the change is right in both cases.
    """
    if isinstance(exc, CommitFailedException):
        return True
    return isinstance(exc, ValueError) and str(exc).startswith("Cannot add snapshot with sequence number")


def commit_retrying(table: Table, change: Callable[[Table], object], what: str, retries: int = 20) -> None:
    """Make ``change`` on the freshly loaded ``table``, again with backoff while other writers' commits win the race.

    For changes that are idempotent and hold no precondition of their own (a reset deleting the
    output it replaces, clearing its marker): Borrowers and Leaders commit to the sink all the time,
    so one lost race must not leave an operator's action half done.
    """

    def attempt() -> None:
        table.refresh()
        try:
            change(table)
        except (CommitFailedException, ValueError) as exc:
            if not lost_race(exc):
                raise
            raise LostRace(str(exc)) from exc

    def gave_up() -> SinkError:
        return SinkError(f"sink: {what} on {'.'.join(table.name())} lost {retries} races with other commits; try again")

    again_while_losing(what, attempt, retries + 1, gave_up=gave_up)


def remove_property(table: Table, key: str, what: str) -> None:
    """Remove ``key`` from the table's properties, again while other writers' commits win the race."""
    commit_retrying(table, lambda fresh: fresh.transaction().remove_properties(key).commit_transaction(), what)


def delete_shards(table: Table, shard_ids: Collection[str], properties: dict[str, str], what: str) -> None:
    """Delete the rows of ``shard_ids`` in one commit carrying ``properties``; a repeat finds nothing and is a no-op."""

    def delete(fresh: Table) -> None:
        with warnings.catch_warnings():
            # A delete made again after a crash finds the rows already deleted: that is the expected no-op.
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            rows = shard_filter(shard_ids, shards_as_numbers(fresh))
            fresh.delete(delete_filter=rows, snapshot_properties=properties)

    commit_retrying(table, delete, what)
