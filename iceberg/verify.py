"""Independent check of a group's sink against its source, with pyiceberg only (no Spark)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, shard_texts
from icegroup.iceberg.store.sink_history import other_groups_shards
from icegroup.iceberg.store.tables import load_optional, load_source


@dataclass(frozen=True)
class Verification:
    """Source rows the group must have consumed against the rows found in the sink, counted per key."""

    expected: int
    found: int
    duplicates: int
    missing: int
    unexpected: int

    @property
    def ok(self) -> bool:
        """Exactly once: every expected key once, nothing else."""
        return self.duplicates == 0 and self.missing == 0 and self.unexpected == 0 and self.found == self.expected

    def line(self) -> str:
        """One line for logs and the demo."""
        verdict = "OK" if self.ok else "MISMATCH"
        return (
            f"verify: expected={self.expected} found={self.found} duplicates={self.duplicates} "
            f"missing={self.missing} unexpected={self.unexpected} -> {verdict}"
        )


def verify_group(catalog: Catalog, group: GroupConfig, key: str, after_snapshot: int | None = None) -> Verification:
    """Compare keys of source rows (appended after ``after_snapshot``, matching the filter) with the sink.

    Rows of another group's shards are not counted: a group renamed after a config change writes to
    the same sink (``other_groups_shards``).
    """
    source = load_source(catalog, group.source)
    row_filter = group.row_filter or AlwaysTrue()
    if after_snapshot is None:
        rows = source.scan(row_filter=row_filter, selected_fields=(key,)).to_arrow()
    else:
        rows = source.incremental_append_scan(
            from_snapshot_id_exclusive=after_snapshot, row_filter=row_filter, selected_fields=(key,)
        ).to_arrow()
    expected = Counter(rows.column(key).to_pylist())
    sink = load_optional(catalog, group.sink)
    found: Counter[object] = Counter()
    if sink is not None and sink.current_snapshot() is not None:
        others = other_groups_shards(sink, group.name)
        out = sink.scan(selected_fields=(key, COL_SHARD) if others else (key,)).to_arrow()
        keys = out.column(key).to_pylist()
        if others:
            shards = shard_texts(out.column(COL_SHARD).to_pylist())
            keys = [k for k, shard in zip(keys, shards, strict=True) if shard not in others]
        found = Counter(keys)
    return Verification(
        expected=sum(expected.values()),
        found=sum(found.values()),
        duplicates=sum(max(n - expected[k], 0) for k, n in found.items() if k in expected),
        missing=sum(max(n - found[k], 0) for k, n in expected.items()),
        unexpected=sum(n for k, n in found.items() if k not in expected),
    )
