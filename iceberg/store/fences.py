"""Raising a lease's fence on the sink, so that older attempts of it can no longer commit.

The fence is a sink table property, ``icegroup.fence.<group>.<lease>`` = the lowest attempt that
may still commit; the Borrower's commit checks it inside the same compare-and-swap as its data (see
``spark_jobs/sink/jvm``). The Leader raises it before it commits a re-grant, and a Borrower raises it to
its own attempt when it connects, which also covers a sink that did not exist at the re-grant.

A fence only ever goes up. pyiceberg applies property updates onto whatever metadata is current,
so a plain ``set_properties`` from a slow Leader could lower a fence that another Leader raised.
The update therefore carries a requirement that every fence is still below its new value, checked
by the catalog against the metadata it swaps. pyiceberg's SQL catalog validates requirements
itself, so a custom one works there; a REST catalog validates on the server and would need the
fence as a standard requirement (not available), which is one reason icegroup supports SQL
catalogs only.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Literal

from pydantic import Field
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import SetPropertiesUpdate, ValidatableTableRequirement

from iceberg.errors import LostRace, SinkError
from iceberg.protocol.fences import fence_key
from iceberg.retry import again_while_losing

log = logging.getLogger(__name__)


class AssertFencesBelow(ValidatableTableRequirement):
    """Every named property must still be an integer below the value it is about to be raised to."""

    type: Literal["assert-icegroup-fences-below"] = Field(default="assert-icegroup-fences-below")
    fences: dict[str, int]

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]
        """Fail the swap if any fence was meanwhile raised as far or further."""
        if base_metadata is None:
            raise CommitFailedException("Requirement failed: sink metadata is missing")
        for key, value in self.fences.items():
            current = int(base_metadata.properties.get(key, "0"))
            if current >= value:
                raise CommitFailedException(f"Requirement failed: {key} is already {current} (wanted {value})")


def raise_fences(
    table: Table, fences: dict[str, int], retries: int = 20, also: dict[str, str] | None = None, strict: bool = False
) -> dict[str, int]:
    """Raise each property in ``fences`` to at least its value; returns the ones this call raised.

    ``also`` are properties set in the same update (a reset's marker), whether or not a fence moves.
    With ``strict``, this call must raise every fence itself: if another writer raised one as far
    already, nothing at all is written (not ``also`` either) and ``{}`` is returned. A reset takes
    its epoch that way, so two resets can never both believe they own it.
    """

    def attempt() -> dict[str, int]:
        current = table.metadata.properties
        wanted = {key: value for key, value in fences.items() if int(current.get(key, "0")) < value}
        if strict and len(wanted) < len(fences):
            return {}
        extra = {key: value for key, value in (also or {}).items() if current.get(key) != value}
        if not wanted and not extra:
            return {}
        tx = table.transaction()
        tx._apply(
            (SetPropertiesUpdate(updates={**{key: str(value) for key, value in wanted.items()}, **extra}),),
            (AssertFencesBelow(fences=wanted),),  # type: ignore[arg-type]  # checked by the catalog's CAS
        )
        swap_or_lose(tx, table)
        return wanted

    def gave_up() -> SinkError:
        return SinkError(
            f"sink: could not raise fences {fences} on {'.'.join(table.name())} in {retries} retries; try again"
        )

    # The first try trusts the caller's table: a stale one fails the requirement, and is refreshed.
    return again_while_losing(
        f"raising fences {sorted(fences)}", attempt, retries + 1, gave_up=gave_up, level=logging.WARNING
    )


class AssertPropertyIs(ValidatableTableRequirement):
    """A property must still hold the value it was read with (absent: ``None``)."""

    type: Literal["assert-icegroup-property-is"] = Field(default="assert-icegroup-property-is")
    key: str
    value: str | None

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]
        """Fail the swap if another writer changed the property since it was read."""
        if base_metadata is None:
            raise CommitFailedException("Requirement failed: sink metadata is missing")
        if base_metadata.properties.get(self.key) != self.value:
            raise CommitFailedException(f"Requirement failed: {self.key} changed")


def add_to_list_property(table: Table, key: str, values: set[int], retries: int = 20) -> None:
    """Add ``values`` to a comma-separated property by compare-and-swap, so concurrent additions all land."""

    def attempt() -> None:
        read = table.metadata.properties.get(key)
        held = {int(v) for v in (read or "").split(",") if v}
        if values <= held:
            return
        tx = table.transaction()
        tx._apply(
            (SetPropertiesUpdate(updates={key: ",".join(str(v) for v in sorted(held | values))}),),
            (AssertPropertyIs(key=key, value=read),),  # type: ignore[arg-type]  # checked by the catalog's CAS
        )
        swap_or_lose(tx, table)

    def gave_up() -> SinkError:
        return SinkError(f"sink: could not update {key} on {'.'.join(table.name())} in {retries} retries; try again")

    table.refresh()
    again_while_losing(f"adding to {key}", attempt, retries + 1, gave_up=gave_up)


def swap_or_lose(tx: Transaction, table: Table) -> None:
    """Commit ``tx``; ``LostRace`` (the table refreshed for the next try) if another writer committed first."""
    try:
        tx.commit_transaction()
    except CommitFailedException as exc:
        table.refresh()
        raise LostRace(str(exc)) from exc


def prune_fences(table: Table, group: str, live: Collection[str]) -> list[str]:
    """Remove the fences of ``group``'s leases that are no longer in flight; returns the keys removed.

    A lease leaves the registry once every shard of it is in the sink (or a reset moved the group to
    a new epoch, which the epoch fence holds). A late attempt of it needs no fence: the fenced commit
    refuses a shard that a sink snapshot since the grant carries. So a retired lease's fence only
    grows the sink's metadata. Best effort: a lost race leaves the keys for the next retirement.
    """
    prefix = fence_key(group, "")
    stale = sorted(k for k in table.properties if k.startswith(prefix) and k.removeprefix(prefix) not in live)
    if not stale:
        return []
    try:
        table.transaction().remove_properties(*stale).commit_transaction()
    except CommitFailedException as exc:
        log.info("group %s: retired lease fences not pruned this time: %s", group, exc)
        return []
    return stale
