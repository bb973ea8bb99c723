"""Catch-up without history: the rows a group has not read, from the files live at its position and now.

Iceberg's incremental read needs every snapshot from a group's position to where it reads to. Any
engine's ``expire_snapshots`` can take the ones after the position: a branch keeps only its head and
that head's ancestors, and snapshots committed after the branch last moved are neither. Their rows
are not gone, though. In a table that only grows, every row those snapshots added is in a data file
that is live now and was not live at the position, and every such file holds only rows added after
it. So the files live now but not at the position are exactly the group's unread rows. The group's
branch keeps the position's snapshot, and with it the manifests that say what was live there.

That holds only while nothing that was live at the position has gone. If a compaction, a delete or
an overwrite ran in the gap, a file live at the position is no longer live, or a delete file has
appeared. Then the new files may hold rows the group has read already, and only the expired
snapshots could tell which. In that case the group stops, and the error gives the figures
(``gap_stop``).

Manifests that both snapshots list hold the same live files, so only the others are compared.
After a few appends, that is a handful of manifests, however large the table is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

# Manifest path -> the paths of the files live in it.
LiveFiles = Mapping[str, Collection[str]]


@dataclass(frozen=True)
class GapDiff:
    """What changed in the files live between a group's position and the head, by path."""

    added: frozenset[str]
    removed: frozenset[str]
    new_deletes: frozenset[str]

    @property
    def append_only(self) -> bool:
        """True when nothing live at the position has gone: the added files are exactly the unread rows."""
        return not self.removed and not self.new_deletes


def _live(manifests: LiveFiles, shared: Collection[str]) -> set[str]:
    return {path for manifest, paths in manifests.items() if manifest not in shared for path in paths}


def diff_live(position: LiveFiles, head: LiveFiles, position_deletes: LiveFiles, head_deletes: LiveFiles) -> GapDiff:
    """Data files added and removed between two snapshots, and the delete files that appeared.

    Each argument maps a data (or delete) manifest of a snapshot to the files live in it. A
    manifest that both snapshots list is left out of the comparison, because it holds the same
    files in both. A file can move from one manifest to another when manifests are merged, so the
    comparison is by file path across all the remaining manifests.
    """
    shared = set(position) & set(head)
    before, now = _live(position, shared), _live(head, shared)
    shared_deletes = set(position_deletes) & set(head_deletes)
    deletes_before, deletes_now = _live(position_deletes, shared_deletes), _live(head_deletes, shared_deletes)
    return GapDiff(
        added=frozenset(now - before),
        removed=frozenset(before - now),
        new_deletes=frozenset(deletes_now - deletes_before),
    )


@dataclass(frozen=True)
class GapFigures:
    """What is at stake when a gap cannot be read exactly: the files and rows on each side."""

    removed_files: int
    removed_rows: int
    added_files: int
    added_rows: int
    new_deletes: int


def gap_stop(group: str, source: str, position: int | None, head: int, figures: GapFigures) -> str:
    """The error for a gap that held a rewrite: what is in question, and what each way out costs."""
    at = f"snapshot {position}" if position is not None else "its start"
    changed = []
    if figures.removed_files:
        changed.append(f"{figures.removed_files} data file(s) ({figures.removed_rows} rows) live at {at} are gone")
    if figures.new_deletes:
        changed.append(f"{figures.new_deletes} delete file(s) appeared")
    return (
        f"group {group!r}: the snapshots of {source!r} after the group's position ({at}) have expired, and a "
        f"compaction, delete or overwrite ran among them: {' and '.join(changed)}. The {figures.added_files} "
        f"data file(s) ({figures.added_rows} rows) live at head {head} that were not live at {at} hold the rows "
        "the group has not read, and may also hold rows it has read, which only the expired snapshots could tell "
        f"apart. Ways out: `icegroup reset {group} --to-latest --execute` goes on from the head and skips up to "
        f"{figures.added_rows} unread rows; or restore the source's history from before the expiry. Next time, keep "
        "snapshots for longer than the time between consumes"
    )
