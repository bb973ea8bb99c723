"""The sink-commit format: the lineage columns every sink row carries, and the summary properties of each commit.

Progress lives in the sink commit itself (as Flink's ``flink.max-committed-checkpoint-id`` does), so
data and progress commit together and the registry can always be rebuilt from sink history.
Property keys are lower case: Spark lower-cases write options. ``KEY_STAGE``, ``KEY_TOKEN``,
``KEY_GROUP`` and ``KEY_SHARD_IDS`` are read or written by the fenced commit's Java side too
(``spark_jobs/sink/jvm``); ``tests/unit/protocol/test_summary_keys.py`` pins that both sides spell them alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.state import Origin

# The row's shard: its 16 hex digits as one signed 64-bit number (``shard_number``). Sinks created
# before that hold the hex text; readers take either (``shard_text``), writers write the sink's kind.
COL_SHARD = "_ig_shard"
# The replay window (its Dagster partition key): a day as a ``date``, an hour as its label
# (``window_value``; an older sink holds days as text too). The sink is partitioned by it, so a
# replay replaces whole partitions, however the sink's files were compacted.
COL_WINDOW = "_ig_window"
# The row's source file as a number (``iceberg/protocol/file_ref.py``); null where Spark cannot tell.
COL_FILE = "_ig_file"
# The source row's own ``_row_id`` on a format-v3 source (its row lineage, kept through the source's
# compaction): one ``long``, in sinks of such sources only; null where Spark cannot tell.
COL_ROW = "_ig_row"
# The format-v3 source's own row-id column: what ``COL_ROW`` holds, and how the source's rows are asked for.
ROW_ID = "_row_id"
# What every row carries now. The group, lease and epoch are the same for every row of a sink commit,
# so they live in its summary (``commit_properties``) and the lineage table, not in each row: as
# strings in every row they cost a shard a quarter of a plain write (``bench_lineage_cost``).
ROW_LINEAGE = (COL_SHARD, COL_WINDOW, COL_FILE)
# Sinks created by an older icegroup carry these in every row as well; new rows leave them null there.
COL_GROUP = "_ig_group"
COL_LEASE = "_ig_lease"
COL_EPOCH = "_ig_epoch"
# Every reserved name: a transform may not produce them, and a chained group's read drops them.
LINEAGE_COLUMNS = (*ROW_LINEAGE, COL_ROW, COL_GROUP, COL_LEASE, COL_EPOCH)
SHARD_ID_DIGITS = 16

KEY_GROUP = "icegroup.group"
KEY_SOURCE = "icegroup.source"
KEY_LEASE = "icegroup.lease"
KEY_EPOCH = "icegroup.epoch"
KEY_ATTEMPT = "icegroup.attempt"
KEY_SHARDS = "icegroup.shards"
KEY_SHARD_IDS = "icegroup.shard-ids"
KEY_STAGE = "icegroup.stage"
KEY_TOKEN = "icegroup.token"
KEY_START = "icegroup.start"
KEY_CONFIG = "icegroup.config-hash"
KEY_RUN = "icegroup.run"
KEY_CONFIG_VERSION = "icegroup.config-version"
KEY_LOW_WATERMARK = "icegroup.low-watermark"
# A replay commit names its window (also read by the Java side), its generation and what it covers.
# It carries no KEY_SHARDS: it consumes nothing new, so progress and the shard check never see it.
KEY_REPLAY = "icegroup.replay"
KEY_GENERATION = "icegroup.replay-generation"
KEY_COVERS = "icegroup.replay-covers"
# A shard commit that left rows out (``on_poison: isolate``) lists them: {shard id: {file: [positions]}}.
KEY_ISOLATED = "icegroup.isolated"
# A re-drive of isolated rows names the shard they were isolated from; like a replay, it carries no
# KEY_SHARDS, so progress never sees it, and its KEY_SHARD_IDS is the re-drive's own id (``redrive_id``).
KEY_REDRIVE = "icegroup.redrive-of"
# A reset's delete of the output it consumes again names the reset.
KEY_RESET = "icegroup.reset"
# ``icegroup migrate``'s rewrite of rows written before a lineage column names the column it filled.
KEY_MIGRATE = "icegroup.migrate"
# A fence commit (an empty snapshot that moves main with the fences it raises) names the properties it set.
KEY_FENCE = "icegroup.fence"


def shard_number(shard_id: str) -> int:
    """A shard id (16 hex digits) as the signed 64-bit number a sink row stores: one long, not a string per row."""
    if len(shard_id) != SHARD_ID_DIGITS or any(c not in "0123456789abcdef" for c in shard_id):
        raise ValueError(f"{COL_SHARD}: {shard_id!r} is not a shard id ({SHARD_ID_DIGITS} lower-case hex digits)")
    value = int(shard_id, 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def shard_text(value: int | str) -> str:
    """A row's ``_ig_shard`` as its shard id, whether the sink stores numbers or (an older sink) text."""
    return value if isinstance(value, str) else f"{value & ((1 << 64) - 1):0{SHARD_ID_DIGITS}x}"


def shard_texts(values: Sequence[int | str | None]) -> list[str | None]:
    """``shard_text`` of a column's values, nulls kept."""
    return [None if value is None else shard_text(value) for value in values]


def shard_filter(shard_ids: Iterable[str], numeric: bool) -> str:
    """``_ig_shard IN (...)`` in pyiceberg's and Spark's filter syntax, for a sink that stores numbers or text."""
    values = sorted(str(shard_number(i)) if numeric else f"'{i}'" for i in set(shard_ids))
    return f"{COL_SHARD} IN ({', '.join(values)})"


def row_id_filter(column: str, row_ids: Iterable[int]) -> str:
    """``column IN (...)`` of source row ids in pyiceberg's and Spark's filter syntax: ``_row_id`` or ``COL_ROW``."""
    return f"{column} IN ({', '.join(str(i) for i in sorted(set(row_ids)))})"


def reset_key(group: str) -> str:
    """Sink table property a reset sets with its epoch fence and clears once the registry holds it."""
    return f"icegroup.reset.{group}"


def resets_key(group: str) -> str:
    """Sink table property listing every executed reset: its epoch and each stream's new position."""
    return f"icegroup.resets.{group}"


@dataclass(frozen=True)
class ResetRecord:
    """An executed reset, as the sink keeps it: commits of older epochs above these positions are void.

    ``positions`` maps streams to the sequence number they were moved to, and ``snapshots`` to the
    snapshot; ``*`` holds both for streams the registry did not know yet (the planning cursor).
    """

    epoch: int
    positions: dict[str, int]
    snapshots: dict[str, int | None]

    def voids(self, epoch: int, shard: ShardRange) -> bool:
        """Whether this reset made a commit of ``shard`` in ``epoch`` void (its output was deleted)."""
        floor = self.positions.get(shard.stream, self.positions.get("*"))
        return epoch < self.epoch and floor is not None and (shard.to_sequence or 0) > floor

    def to_json(self) -> dict[str, object]:
        """The record as the sink property holds it."""
        return {"epoch": self.epoch, "positions": self.positions, "snapshots": self.snapshots}


def parse_resets(text: str) -> list[ResetRecord]:
    """The reset records of a sink property's JSON; none for an empty one."""
    return [
        ResetRecord(
            int(r["epoch"]),
            {k: int(v) for k, v in r["positions"].items()},
            {k: None if v is None else int(v) for k, v in r.get("snapshots", {}).items()},
        )
        for r in json.loads(text or "[]")
    ]


def follows_key(group: str) -> str:
    """Sink table property listing the upstream replay snapshots whose rows the group's output follows."""
    return f"icegroup.follows.{group}"


@dataclass(frozen=True)
class ShardRange:
    """The part of a shard that lineage needs: where it came from in the source."""

    shard_id: str
    stream: str
    from_snapshot: int | None
    to_snapshot: int
    snapshots: tuple[int, ...]
    to_sequence: int | None = None
    rows: int | None = None
    window_start_ms: int | None = None
    found_by: str = "snapshots"


@dataclass(frozen=True)
class SinkCommit:
    """One sink snapshot written by a Borrower, decoded from its summary."""

    snapshot_id: int
    timestamp_ms: int
    group: str
    source: str
    lease_id: str
    epoch: int
    attempt: int
    shards: tuple[ShardRange, ...]
    added_records: int
    origin: Origin | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class ReplayCommit:
    """One sink snapshot that replaced a window's output, decoded from its summary."""

    snapshot_id: int
    timestamp_ms: int
    group: str
    window: str
    generation: int
    epoch: int
    covers: tuple[ShardRange, ...]
    added_records: int
    deleted_records: int
    run_id: str | None = None


def range_of(shard: Shard) -> ShardRange:
    """The part of a planned shard that a commit summary records."""
    return ShardRange(
        shard_id=shard.shard_id,
        stream=shard.stream,
        from_snapshot=shard.from_snapshot,
        to_snapshot=shard.to_snapshot,
        snapshots=tuple(shard.snapshots),
        to_sequence=shard.to_sequence,
        rows=shard.rows,
        window_start_ms=shard.window_start_ms,
        found_by=shard.found_by(),
    )


def shard_range_json(shard: ShardRange | Shard) -> dict[str, object]:
    """A shard's range as commit summaries record it; ``found`` only for a shard a file diff found.

    Its ``snapshots`` then may have expired before it was read, and its rows were read by file.
    """
    if isinstance(shard, Shard):
        shard = range_of(shard)
    recorded: dict[str, object] = {
        "id": shard.shard_id,
        "stream": shard.stream,
        "from": shard.from_snapshot,
        "to": shard.to_snapshot,
        "seq": shard.to_sequence,
        "rows": shard.rows,
        "window": shard.window_start_ms,
        "snapshots": list(shard.snapshots),
    }
    if shard.found_by != "snapshots":
        recorded["found"] = shard.found_by
    return recorded


def parse_ranges(text: str) -> tuple[ShardRange, ...]:
    """Shard ranges as ``shard_range_json`` wrote them."""
    return tuple(
        ShardRange(
            shard_id=item["id"],
            stream=item["stream"],
            from_snapshot=item["from"],
            to_snapshot=item["to"],
            snapshots=tuple(item.get("snapshots", [])),
            to_sequence=item.get("seq"),
            rows=item.get("rows"),
            window_start_ms=item.get("window"),
            found_by=item.get("found", "snapshots"),
        )
        for item in json.loads(text)
    )


def replay_properties(
    group: str, source: str, window: str, generation: int, epoch: int, covers: list[ShardRange], run_id: str | None
) -> dict[str, str]:
    """Summary properties of a replay commit: the window, its generation, and the shard ranges replayed."""
    pinned = {KEY_RUN: run_id} if run_id is not None else {}
    return {
        **pinned,
        KEY_GROUP: group,
        KEY_SOURCE: source,
        KEY_REPLAY: window,
        KEY_GENERATION: str(generation),
        KEY_EPOCH: str(epoch),
        KEY_COVERS: json.dumps([shard_range_json(s) for s in covers], separators=(",", ":")),
    }


def parse_replay(
    snapshot_id: int, timestamp_ms: int, properties: Mapping[str, str], added: int, deleted: int
) -> ReplayCommit | None:
    """Decode a replay commit's summary; None for any other snapshot."""
    if KEY_REPLAY not in properties or KEY_GROUP not in properties:
        return None
    return ReplayCommit(
        snapshot_id=snapshot_id,
        timestamp_ms=timestamp_ms,
        group=properties[KEY_GROUP],
        window=properties[KEY_REPLAY],
        generation=int(properties.get(KEY_GENERATION, "0")),
        epoch=int(properties.get(KEY_EPOCH, "0")),
        covers=parse_ranges(properties.get(KEY_COVERS, "[]")),
        added_records=added,
        deleted_records=deleted,
        run_id=properties.get(KEY_RUN),
    )


def commit_properties(
    group: str,
    source: str,
    lease_id: str,
    epoch: int,
    attempt: int,
    shards: Sequence[Shard],
    origin: Origin | None = None,
    run_id: str | None = None,
) -> dict[str, str]:
    """Summary properties for the commit of one or more shards of a lease (consecutive ones commit together).

    Besides each shard's range they carry its end's sequence number, its source rows and its replay
    window, the group's start and config hash (everything a lost registry is rebuilt from, see
    ``protocol/rebuild.py``), and the run that committed it (for ``icegroup checkpoints``).
    """
    ranges = [shard_range_json(shard) for shard in shards]
    pinned = {KEY_RUN: run_id} if run_id is not None else {}
    if origin is not None:
        pinned[KEY_START] = json.dumps(origin.start_position)
        if origin.config_hash is not None:
            pinned[KEY_CONFIG] = origin.config_hash
            pinned[KEY_CONFIG_VERSION] = str(origin.config_version)
        if origin.low_watermark_sequence is not None:
            pinned[KEY_LOW_WATERMARK] = json.dumps([origin.low_watermark, origin.low_watermark_sequence])
    return {
        **pinned,
        KEY_GROUP: group,
        KEY_SOURCE: source,
        KEY_LEASE: lease_id,
        KEY_EPOCH: str(epoch),
        KEY_ATTEMPT: str(attempt),
        KEY_SHARDS: json.dumps(ranges, separators=(",", ":")),
        KEY_SHARD_IDS: ",".join(shard.shard_id for shard in shards),
    }


def parse_commit(
    snapshot_id: int, timestamp_ms: int, properties: Mapping[str, str], added_records: int
) -> SinkCommit | None:
    """Decode a sink snapshot's summary; None for snapshots icegroup did not write."""
    if KEY_GROUP not in properties or KEY_SHARDS not in properties:
        return None
    shards = parse_ranges(properties[KEY_SHARDS])
    origin = None
    if KEY_START in properties:
        mark = json.loads(properties[KEY_LOW_WATERMARK]) if KEY_LOW_WATERMARK in properties else [None, None]
        origin = Origin(
            start_position=json.loads(properties[KEY_START]),
            config_hash=properties.get(KEY_CONFIG),
            config_version=int(properties.get(KEY_CONFIG_VERSION, "0")),
            low_watermark=mark[0],
            low_watermark_sequence=mark[1],
        )
    return SinkCommit(
        snapshot_id=snapshot_id,
        timestamp_ms=timestamp_ms,
        group=properties[KEY_GROUP],
        source=properties.get(KEY_SOURCE, ""),
        lease_id=properties.get(KEY_LEASE, ""),
        epoch=int(properties.get(KEY_EPOCH, "0")),
        attempt=int(properties.get(KEY_ATTEMPT, "0")),
        shards=shards,
        added_records=added_records,
        origin=origin,
        run_id=properties.get(KEY_RUN),
    )
