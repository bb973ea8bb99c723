"""A group's progress checkpoints: its sink commits, one per shard, as ``icegroup checkpoints`` lists them.

Each commit is a point the group's output can be traced to and replayed from: when it landed, which
run, lease and attempt made it, in which epoch, and which source range of which stream it holds.
Replays of a window are listed too (``kind`` replay): the run, the generation and how many shard
ranges the replay remade.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import parse_window_label, snapshot_range, window_label
from icegroup.iceberg.store.sink_history import read_sink_history, sink_history
from icegroup.iceberg.store.tables import load_optional


@dataclass(frozen=True)
class Checkpoint:
    """One committed shard of the group, and the sink snapshot that holds it."""

    sink_snapshot: int
    committed_at: str
    run_id: str | None
    lease: str
    epoch: int
    stream: str
    source_range: str
    window: str | None
    rows: int
    kind: str = "commit"
    at_ms: int = 0


def list_checkpoints(catalog: Catalog, group: GroupConfig, window: str | None = None) -> list[Checkpoint]:
    """Every commit of ``group`` in its sink, oldest first; only those of one replay window if given.

    Commits written before the window was recorded have none and are left out of a window's list.
    """
    wanted = None
    if window is not None:
        try:
            wanted = parse_window_label(window, group.replay_window)
        except ValueError as exc:
            raise UsageError(f"--window: {exc} (group {group.name!r} has {group.replay_window} windows)") from None
    found = []
    for commit in read_sink_history(catalog, group.sink, group.name, None).commits:
        at = datetime.fromtimestamp(commit.timestamp_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        for shard in commit.shards:
            if wanted is not None and shard.window_start_ms != wanted:
                continue
            found.append(
                Checkpoint(
                    sink_snapshot=commit.snapshot_id,
                    committed_at=at,
                    run_id=commit.run_id,
                    lease=f"{commit.lease_id}#{commit.attempt}",
                    epoch=commit.epoch,
                    stream=shard.stream,
                    source_range=snapshot_range(shard.from_snapshot, shard.to_snapshot),
                    window=window_label(shard.window_start_ms, group.replay_window)
                    if shard.window_start_ms is not None
                    else None,
                    rows=commit.added_records,
                    at_ms=commit.timestamp_ms,
                )
            )
    sink = load_optional(catalog, group.sink)
    for replay in sink_history(sink, group.name)[1] if sink is not None else []:
        if window is not None and replay.window != window:
            continue
        found.append(
            Checkpoint(
                sink_snapshot=replay.snapshot_id,
                committed_at=datetime.fromtimestamp(replay.timestamp_ms / 1000, tz=UTC).isoformat(timespec="seconds"),
                run_id=replay.run_id,
                lease=f"replay generation {replay.generation}",
                epoch=replay.epoch,
                stream="*",
                source_range=f"{len(replay.covers)} shard ranges",
                window=replay.window,
                rows=replay.added_records,
                kind="replay",
                at_ms=replay.timestamp_ms,
            )
        )
    return sorted(found, key=lambda point: point.at_ms)
