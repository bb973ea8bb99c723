"""Which window a sink row written before the window column belongs to: its shard's, as the sink's commits say.

A migration (``icegroup migrate``) gives such rows their window and is refused, rewriting nothing,
when a row's shard has no commit left in the sink's history (its snapshots expired, or the row has
no shard). Its preview asks the same question of the same history, so it names the refusal before
``--execute`` does.
"""

from __future__ import annotations

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table

from icegroup.iceberg.protocol.shards import Window, window_label
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, COL_WINDOW, shard_texts
from icegroup.iceberg.store.sink_history import sink_history


def shard_windows(sink: Table, group: str, window: Window) -> dict[str, str]:
    """Each shard the group's commits in the sink's history name, with its window's label."""
    commits, _ = sink_history(sink, group)
    return {
        s.shard_id: window_label(s.window_start_ms, window)
        for c in commits
        for s in c.shards
        if s.window_start_ms is not None
    }


def windowless(sink: Table) -> BooleanExpression | str:
    """The sink's rows with no window: every row while the sink has no window column."""
    return f"{COL_WINDOW} IS NULL" if any(f.name == COL_WINDOW for f in sink.schema().fields) else AlwaysTrue()


def windowless_shards(sink: Table) -> list[str | None]:
    """The shard of each sink row with no window (``None`` for a row with no shard)."""
    rows = sink.scan(row_filter=windowless(sink), selected_fields=(COL_SHARD,)).to_arrow()
    return shard_texts(rows.column(COL_SHARD).to_pylist())


def lost_windows(sink: str, unknown: list[str]) -> str:
    """Why a migration rewrites nothing: these shards' windows cannot be known, and what to do."""
    return (
        f"rows of shards {', '.join(unknown[:5])} in {sink} have no commit left in its history, so their window "
        "cannot be known; nothing was rewritten. Restore the sink's expired snapshots, or leave these rows as they "
        "are (a replay of their windows is then refused)"
    )
