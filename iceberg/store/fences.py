"""Raising fences on the sink, so that older attempts, generations and epochs can no longer commit.

A fence is a sink table property that only goes up (``iceberg/protocol/fences.py`` names them).
The Borrower's commit and the replay's publish check the fences on the exact metadata they build
on, and require the catalog to swap only if main is still where that metadata had it
(``spark_jobs/sink/jvm``).

So a fence must move main too: an Iceberg REST catalog checks a commit's standard requirements and
nothing else, and none of them covers a table property. A fence is therefore raised by a *fence
commit*: the new property values together with an empty snapshot on main (no files added, summary
``icegroup.fence``), under the standard requirement that main is still at the snapshot the fence
was read at. Every writer that checks a fence requires main where it read it, so a commit built on
metadata from before the fence is refused by the catalog itself, REST or SQL, and its retry sees
the fence. Two fence commits that read the same main cannot both land, so a fence never goes down.

The fence commit is sent with its requirements as they are (``commit_updates``): pyiceberg's
own retry re-bases a snapshot onto the new head, which would drop the requirement.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from icegroup.iceberg.errors import LostRace, SinkError
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.sink_commit import KEY_FENCE
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.metadata_commit import commit_updates
from icegroup.iceberg.store.sink import lost_race

log = logging.getLogger(__name__)


def commit_fence(table: Table, properties: Mapping[str, str]) -> None:
    """Set ``properties`` in one commit with an empty snapshot on main, iff main is where ``table`` has it.

    ``LostRace`` (the table refreshed for the next try) when another writer moved main first. On
    success ``table`` holds the new metadata.
    """
    tx = table.transaction()
    tx.set_properties(dict(properties))
    # No files: the snapshot only moves main, which is what carries the standard requirement.
    tx.update_snapshot(snapshot_properties={KEY_FENCE: ",".join(sorted(properties))}).fast_append().commit()
    try:
        commit_updates(table, tx._updates, tx._requirements)
    except (CommitFailedException, ValueError) as exc:
        if not lost_race(exc):
            raise
        table.refresh()
        raise LostRace(str(exc)) from exc


def raise_fences(
    table: Table, fences: dict[str, int], retries: int = 20, also: dict[str, str] | None = None, strict: bool = False
) -> dict[str, int]:
    """Raise each property in ``fences`` to at least its value; returns the ones this call raised.

    ``also`` are properties set in the same fence commit (a reset's marker), whether or not a fence
    moves. With ``strict``, this call must raise every fence itself: if another writer raised one as
    far already, nothing at all is written (not ``also`` either) and ``{}`` is returned. A reset
    takes its epoch that way, so two resets can never both believe they own it.
    """

    def attempt() -> dict[str, int]:
        current = table.metadata.properties
        wanted = {key: value for key, value in fences.items() if int(current.get(key, "0")) < value}
        if strict and len(wanted) < len(fences):
            return {}
        extra = {key: value for key, value in (also or {}).items() if current.get(key) != value}
        if not wanted and not extra:
            return {}
        commit_fence(table, {**{key: str(value) for key, value in wanted.items()}, **extra})
        return wanted

    def gave_up() -> SinkError:
        return SinkError(
            f"sink: could not raise fences {fences} on {'.'.join(table.name())} in {retries} retries; try again"
        )

    # The first try trusts the caller's table: if main moved since, the fence commit is refused and refreshed.
    return again_while_losing(
        f"raising fences {sorted(fences)}", attempt, retries + 1, gave_up=gave_up, level=logging.WARNING
    )


def add_to_list_property(table: Table, key: str, values: set[int], retries: int = 20) -> None:
    """Add ``values`` to a comma-separated property in a fence commit, so concurrent additions all land."""

    def attempt() -> None:
        held = {int(v) for v in (table.metadata.properties.get(key) or "").split(",") if v}
        if values <= held:
            return
        commit_fence(table, {key: ",".join(str(v) for v in sorted(held | values))})

    def gave_up() -> SinkError:
        return SinkError(f"sink: could not update {key} on {'.'.join(table.name())} in {retries} retries; try again")

    table.refresh()
    again_while_losing(f"adding to {key}", attempt, retries + 1, gave_up=gave_up)


def prune_fences(table: Table, group: str, live: Collection[str]) -> list[str]:
    """Remove the fences of ``group``'s leases that are no longer in flight; returns the keys removed.

    A lease leaves the registry once every shard of it is in the sink (or a reset moved the group to
    a new epoch, which the epoch fence holds). A late attempt of it needs no fence: the fenced commit
    refuses a shard that a sink snapshot since the grant carries. So a retired lease's fence only
    grows the sink's metadata. Best effort: a lost race leaves the keys for the next retirement. So
    does a race with another Leader pruning the same keys: pyiceberg's SQL catalog applies the
    removal to the table's newest metadata, and a key already gone there fails it with ``KeyError``.
    """
    prefix = fence_key(group, "")
    stale = sorted(k for k in table.properties if k.startswith(prefix) and k.removeprefix(prefix) not in live)
    if not stale:
        return []
    try:
        table.transaction().remove_properties(*stale).commit_transaction()
    except (CommitFailedException, KeyError) as exc:
        log.info("group %s: retired lease fences not pruned this time: %r", group, exc)
        return []
    return stale
