"""Exactly once for one window, from the sink's metadata alone: the pure half of the window audit.

Every row of a sink window was added by some snapshot, and each live data file's manifest entry
keeps that snapshot's id. So the window's exactly-once question can be asked of metadata, without
reading a row: each commit of the group must still hold every row it added to the window (nothing
lost, nothing deleted by hand), no row may come from a snapshot icegroup did not write (nothing
added or rewritten by hand), no delete file may hide rows, every commit that should hold rows of
the window must still be there, and no shard may be committed by two live commits (nothing twice).

What it cannot see: a transform that drops or invents rows (the group commits what its transform
returns), a hand edit that rewrites data files in place on storage, outside Iceberg, and what
snapshots expired from the sink's history added. A reset of the group deletes some rows of the
commits before it, and a compaction (``rewrite_data_files``) or ``icegroup migrate`` rewrites them
into files of its own; no summary says how many of a window's they touched, so those commits' row
counts are not judged (the rest is): a row deleted by hand from a file that a compaction wrote
still shows as the rows the delete rewrote, but a whole such file deleted by hand does not.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

RESET = "reset"
MIGRATE = "migrate"
COMPACTION = "compaction"


@dataclass(frozen=True)
class CommitFacts:
    """What one sink snapshot says of itself: who wrote it and how, what it added, which shards it committed.

    ``group`` is None for a snapshot icegroup did not write. ``rewrite`` names a snapshot whose files
    hold rows that earlier commits added: a group's reset or ``migrate``, or a compaction (Iceberg's
    ``replace``, by any engine).
    """

    snapshot_id: int
    sequence: int
    group: str | None
    operation: str
    added_rows: int
    shard_ids: tuple[str, ...] = ()
    rewrite: str | None = None


@dataclass(frozen=True)
class WindowAudit:
    """The verdict on one window: the rows and commits found, and every problem, each naming its remedy."""

    group: str
    window: str
    rows: int
    commits: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Exactly once: every commit's rows intact, nothing else in the window, no shard twice."""
        return not self.problems

    def describe(self) -> str:
        """One line for a person: the window and its verdict."""
        if self.ok:
            return f"window {self.window}: {self.rows} rows from {self.commits} commits of {self.group}, exactly once"
        again = f"`icegroup replay {self.group} --window {self.window} --execute` writes it again from its source"
        return f"window {self.window} of group {self.group}: " + "; ".join([*self.problems, again])


@dataclass(frozen=True)
class SinkAudit:
    """The verdict on every window of a group's sink; ``unplaced_rows`` live in files with no window yet."""

    group: str
    windows: list[WindowAudit]
    unplaced_rows: int = 0

    @property
    def ok(self) -> bool:
        """Exactly once in every window."""
        return all(window.ok for window in self.windows)

    @property
    def rows(self) -> int:
        """The group's rows in the sink, over every window."""
        return sum(window.rows for window in self.windows)

    def failing(self) -> list[WindowAudit]:
        """The windows that are not exactly once, oldest first."""
        return [window for window in self.windows if not window.ok]

    def window(self, label: str) -> WindowAudit:
        """The verdict on one window; a window the sink has nothing of holds no rows."""
        found = [window for window in self.windows if window.window == label]
        return found[0] if found else WindowAudit(group=self.group, window=label, rows=0, commits=0)

    def describe(self) -> str:
        """One line for a person: every window exactly once, or what is wrong in each that is not."""
        unplaced = (
            f"; {self.unplaced_rows} rows written before the window column are not judged until "
            f"`icegroup migrate {self.group} --execute`"
            if self.unplaced_rows
            else ""
        )
        if self.ok:
            return f"{len(self.windows)} windows, {self.rows} rows of group {self.group}: exactly once{unplaced}"
        return " | ".join(window.describe() for window in self.failing()) + unplaced


def audit_window(
    group: str,
    window: str,
    live_rows: Mapping[int, int],
    delete_rows: Mapping[int, int],
    facts: Mapping[int, CommitFacts],
    expected: Collection[int],
) -> WindowAudit:
    """Judge a window from its live files' rows by adding snapshot, its delete files, and the commits' facts.

    ``live_rows`` and ``delete_rows`` map the snapshot that added a data or delete file to the rows
    in them; ``facts`` describes every snapshot still in the sink's history (an expired one cannot
    be judged, and is left out of the verdict); ``expected`` holds the group's sink snapshots whose
    rows the window should hold (its newest replay and the consumption commits after it). Rows of
    another group sharing the sink are theirs to judge.
    """
    problems: list[str] = []
    last_rewrite = max((f.sequence for f in facts.values() if rewrote(f, group, live_rows)), default=-1)
    ours = 0
    commits = 0
    owner: dict[str, int] = {}
    for snapshot_id, rows in sorted(live_rows.items()):
        made = facts.get(snapshot_id)
        if made is None:
            continue  # expired from the sink's history: what it added is no longer known
        if made.rewrite == COMPACTION:
            continue  # the same rows in fewer files, of whichever groups share the sink: not counted as the group's
        if made.group is None:
            problems.append(
                f"{rows} rows were written outside icegroup by sink snapshot {snapshot_id} ({made.operation})"
            )
            continue
        if made.group != group:
            continue
        ours += rows
        if made.rewrite is not None:
            continue  # rows a reset or migrate rewrote: they belong to the commits before it
        commits += 1
        if made.sequence > last_rewrite and rows != made.added_rows:
            problems.append(f"sink snapshot {snapshot_id} added {made.added_rows} rows, and {rows} are left")
        for shard_id in made.shard_ids:
            if shard_id in owner:
                problems.append(
                    f"shard {shard_id} was committed twice, by sink snapshots {owner[shard_id]} and {snapshot_id}"
                )
            owner.setdefault(shard_id, snapshot_id)
    for snapshot_id, rows in sorted(delete_rows.items()):
        problems.append(f"delete files of sink snapshot {snapshot_id} hide up to {rows} rows")
    for snapshot_id in sorted(expected):
        made = facts.get(snapshot_id)
        if snapshot_id in live_rows or made is None or made.added_rows == 0 or made.sequence < last_rewrite:
            continue
        problems.append(f"all {made.added_rows} rows sink snapshot {snapshot_id} added are gone")
    return WindowAudit(group=group, window=window, rows=ours, commits=commits, problems=problems)


def rewrote(made: CommitFacts, group: str, live_rows: Mapping[int, int]) -> bool:
    """Whether ``made`` moved rows of the window's earlier commits, so their own counts no longer hold.

    A reset of the group may have deleted whole files of any window, so it counts everywhere; a
    compaction or a migrate rewrites the rows into files of its own, so it counts in the windows
    where it left some.
    """
    if made.rewrite == RESET:
        return made.group == group
    return made.rewrite is not None and made.snapshot_id in live_rows and made.group in (group, None)
