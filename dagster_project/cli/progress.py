"""Progress bars for ``icegroup consume``: per stream and in total, rows and snapshots done out of planned.

The bars are drawn from the group's registry, read once a second on a thread of their own, so they
cost no Spark work and show every Borrower's commits, this process's and any other's. A stream's
rows done are its ``committed_rows`` since the bars started; its total adds the rows of its shards
still pending. Source commits the Leader has not cut into shards yet are not in any stream's total
until the next tick cuts them, so a total can grow while it runs. Rate and ETA are rich's, over rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import TextIO

from pyiceberg.catalog import Catalog
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.registry import load_state

TOTAL = "all streams"


@dataclass
class Tally:
    """One bar's figures: rows and source snapshots done, and planned in all."""

    rows_done: int = 0
    rows_total: int = 0
    snapshots_done: int = 0
    snapshots_total: int = 0


@dataclass
class Tracker:
    """What the bars remember between two reads of the registry."""

    rows_at_start: dict[str, int] = field(default_factory=dict)
    pending: dict[str, tuple[str, int]] = field(default_factory=dict)
    snapshots_done: dict[str, int] = field(default_factory=dict)

    def update(self, state: GroupState) -> dict[str, Tally]:
        """The tallies per stream, and in total under ``TOTAL``, from one read of the registry.

        A shard seen pending before and gone now was committed: its snapshots count as done.
        """
        for stream, stream_state in state.streams.items():
            self.rows_at_start.setdefault(stream, stream_state.committed_rows)
        for shard_id, (stream, snapshots) in list(self.pending.items()):
            if shard_id not in state.shards:
                self.snapshots_done[stream] = self.snapshots_done.get(stream, 0) + snapshots
                del self.pending[shard_id]
        tallies: dict[str, Tally] = {}
        for shard in state.shards.values():
            self.pending[shard.shard_id] = (shard.stream, len(shard.snapshots))
            self.rows_at_start.setdefault(shard.stream, 0)
            tally = tallies.setdefault(shard.stream, Tally())
            tally.rows_total += shard.rows
            tally.snapshots_total += len(shard.snapshots)
        total = Tally()
        for stream, start in self.rows_at_start.items():
            tally = tallies.setdefault(stream, Tally())
            progress = state.streams.get(stream)
            # A stream retired from the registry meanwhile was idle: it did nothing in this run.
            tally.rows_done = (progress.committed_rows if progress else start) - start
            tally.rows_total += tally.rows_done
            tally.snapshots_done = self.snapshots_done.get(stream, 0)
            tally.snapshots_total += tally.snapshots_done
            for name in ("rows_done", "rows_total", "snapshots_done", "snapshots_total"):
                setattr(total, name, getattr(total, name) + getattr(tally, name))
        return {**{s: tallies[s] for s in sorted(tallies)}, TOTAL: total}


class RateColumn(ProgressColumn):
    """Rows per second, or a dash before there is a rate."""

    def render(self, task: Task) -> Text:
        """The task's speed in rows per second."""
        speed = task.finished_speed or task.speed
        return Text("-" if speed is None else f"{speed:,.0f} rows/s", style="progress.data.speed")


class ConsumeBars:
    """The bars of one consume, on stderr, refreshed from the registry every ``interval_s`` seconds."""

    def __init__(
        self, catalog: Catalog, group: GroupConfig, terminal: TextIO | None = None, interval_s: float = 1.0
    ) -> None:
        """Bars for ``group`` on ``terminal`` (default stderr); nothing is drawn or read until the block is entered."""
        self.catalog = catalog
        self.group = group
        self.interval_s = interval_s
        self.tracker = Tracker()
        self.tasks: dict[str, TaskID] = {}
        self.stopped = threading.Event()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rows  {task.fields[snapshots]} snapshots"),
            RateColumn(),
            TimeRemainingColumn(),
            console=Console(file=terminal) if terminal is not None else Console(stderr=True),
        )
        self.thread = threading.Thread(target=self._run, name="consume-progress", daemon=True)

    def __enter__(self) -> ConsumeBars:
        """Draw the bars and start reading the registry."""
        self.progress.start()
        self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Stop reading, draw the last figures and leave the bars on screen."""
        self.stopped.set()
        self.thread.join()
        self.refresh()
        self.progress.stop()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            self.refresh()

    def refresh(self) -> None:
        """Read the registry once and move the bars; a failed read leaves them as they were."""
        try:
            state = load_state(self.catalog, self.group.name).state
        except Exception:  # the bars are a view: a registry read racing a commit is retried next second
            return
        if state is None:
            return
        for stream, tally in self.tracker.update(state).items():
            if stream not in self.tasks:
                self.tasks[stream] = self.progress.add_task(stream, total=None, snapshots="0/0")
            self.progress.update(
                self.tasks[stream],
                completed=tally.rows_done,
                total=tally.rows_total or None,
                snapshots=f"{tally.snapshots_done}/{tally.snapshots_total}",
            )
