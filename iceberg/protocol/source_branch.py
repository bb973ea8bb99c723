"""The branch each group keeps on its source, so that any engine's snapshot expiry keeps what the group reads.

Iceberg's expiry (Spark's ``expire_snapshots`` procedure, a managed catalog's table maintenance)
knows nothing of consumers: with an aggressive age it takes every snapshot but main's head, and a
group that lags then cannot read its pending shards (an incremental scan needs the snapshots from
its start to its end). It does honour refs. A tag at the group's low watermark keeps only that one
snapshot; a branch keeps its head and, per its own ``min-snapshots-to-keep``, that many of its
ancestors. So the Leader keeps branch ``icegroup-<group>`` at the newest source snapshot it has
planned, keeping every snapshot back to the group's low watermark (``wanted_ref``).

The branch moves only when it must (``ref_move``): when planning reached a newer snapshot, or a
reset moved the low watermark back. A branch that keeps a few snapshots more than needed is left
as it is, so a group's progress alone writes nothing to its source. Nobody writes to the branch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

REF_PREFIX = "icegroup-"


def ref_name(group: str) -> str:
    """The source branch of ``group``."""
    return f"{REF_PREFIX}{group}"


@dataclass(frozen=True)
class RefPosition:
    """A group's source branch: its head, and how many snapshots back from it (itself included) it keeps."""

    snapshot_id: int
    keep: int


def snapshots_to_keep(ancestry: Iterable[int], low_watermark: int | None) -> int:
    """How many snapshots, from the head down ``ancestry``, reach the low watermark (itself included).

    ``ancestry`` is the head's snapshot id, then its parent's, and so on. With no known low
    watermark (the group reads from the table's first snapshot) or one that is not an ancestor
    (expired already), every snapshot of the ancestry is kept.
    """
    count = 0
    for count, snapshot_id in enumerate(ancestry, start=1):
        if snapshot_id == low_watermark:
            return count
    return max(count, 1)


def ref_move(current: RefPosition | None, wanted: RefPosition) -> RefPosition | None:
    """The branch to write, or None when the current one already keeps everything wanted.

    A branch at the same head that keeps at least as many snapshots keeps all that is wanted: a
    group whose low watermark moved forward does not rewrite it.
    """
    if current is not None and current.snapshot_id == wanted.snapshot_id and current.keep >= wanted.keep:
        return None
    return wanted
