"""``icegroup expire``: expire every table's snapshots that no consumer group needs any more.

- A **source** keeps, for each group reading it (the local groups, and every group registered on
  it that is still active, ``iceberg/store/registrations.py``), everything from the group's low watermark
  on (its positions and pending shards read from there) and everything inside its replay horizon.
- A **sink** keeps what reconciliation and the lease checks read: everything after each writing
  group's reconciled cursor, after each lease's grant snapshot, and after the lineage table's
  cursor; and every commit that consumed a source snapshot still in the source, since a reset back
  to that snapshot deletes the commit's output by the shards it records. Staged snapshots that
  killed Borrowers left behind (not on main) go once they are older than ``STAGED_AFTER_MS``, or
  twice the group's lease timeout if that is longer.
- **State tables** (registry, lineage, dead letters) keep their last ``keep_last`` snapshots and
  those younger than ``keep_for``.

Each table is judged by the pure rules of ``iceberg/protocol/retention.py`` right before it is
expired. Expiry is pyiceberg's, metadata only: data files
that no snapshot references any more stay until Iceberg's ``remove_orphan_files`` removes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from icegroup.iceberg.protocol.durations import format_duration
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.retention import Judged, Pin, StateRetention, judge, reset_reach
from icegroup.iceberg.protocol.sink_commit import KEY_STAGE
from icegroup.iceberg.shards import snapshot_info
from icegroup.iceberg.store.dead_letters import dead_letter_identifier
from icegroup.iceberg.store.dead_rows import dead_rows_identifier, isolated_in_sink
from icegroup.iceberg.store.lineage import lineage_identifier, load_lineage, recorded_through
from icegroup.iceberg.store.registrations import group_pin, read_registrations
from icegroup.iceberg.store.registry import load_state, registry_identifier
from icegroup.iceberg.store.sink_history import sink_history
from icegroup.iceberg.store.source_branch import drop_refs, group_refs
from icegroup.iceberg.store.tables import expire_snapshots, load_optional, walk_back

log = logging.getLogger(__name__)

STAGED_AFTER_MS = 6 * 3_600_000


@dataclass
class TableExpiry:
    """One table's verdict: what expires, what stays, and what holds the oldest snapshot that stays."""

    table: str
    roles: list[str]
    judged: Judged
    pins: list[Pin]
    staged: list[int] = field(default_factory=list)
    lapsed: list[str] = field(default_factory=list)
    stray_refs: list[str] = field(default_factory=list)
    error: str | None = None
    done: bool = False

    def row(self) -> dict[str, object]:
        """The table's line in ``icegroup expire``'s output."""
        oldest = self.judged.keep[0] if self.judged.keep else None
        return {
            "table": self.table,
            "roles": ",".join(self.roles),
            "snapshots": len(self.judged.expire) + len(self.judged.keep),
            "expire": len(self.judged.expire),
            "staged_expire": len(self.staged),
            "keep": len(self.judged.keep),
            "oldest_kept": oldest.snapshot_id if oldest else None,
            "held_by": "; ".join(self.judged.held_by),
            "status": self.error or ("expired" if self.done else "planned"),
        }


def source_pins(source: Table, groups: list[GroupConfig], catalog: Catalog, now_ms: int) -> tuple[list[Pin], list[str]]:
    """What the groups reading ``source`` need of it; also the registrations that lapsed (named, not pinning)."""
    pins: list[Pin] = []
    local = {g.name for g in groups}
    for group in groups:
        state = load_state(catalog, group.name).state
        horizon = now_ms - int(group.replay_retention.total_seconds() * 1000)
        if state is None:
            pins.append(Pin(f"group {group.name} (not started)", sequence=0))
            continue
        pins.append(Pin(f"group {group.name}", sequence=group_pin(state)))
        span = format_duration(group.replay_retention)
        pins.append(Pin(f"replay horizon of {group.name} ({span})", since_ms=horizon))
    lapsed = []
    for name, registration in sorted(read_registrations(source).items()):
        if name in local:
            continue
        if not registration.active(now_ms):
            lapsed.append(name)
            continue
        holder = f"group {name} (registered, sink {registration.sink})"
        pins.append(Pin(holder, sequence=registration.pin_sequence))
        pins.append(Pin(f"replay horizon of {name}", since_ms=now_ms - registration.replay_retention_ms))
    return pins, lapsed


def sink_pins(
    sink: Table, groups: list[GroupConfig], catalog: Catalog, expiring: Mapping[str, set[int]] | None = None
) -> list[Pin]:
    """What the groups writing ``sink`` read back of it.

    Their cursors, their leases' grants, their lineage cursors, the commits that left out rows not
    re-driven yet (``redrive`` finds them there), and every commit whose output a reset may still
    delete (``reset_reach``): one that consumed a source snapshot still in the source, once the
    snapshots this run expires from it (``expiring``, by table) are gone.
    """
    sequence = {s.snapshot_id: s.sequence_number or 0 for s in sink.snapshots()}
    pins = []
    for group in groups:
        reach = reset_pin(sink, group, catalog, sequence, (expiring or {}).get(group.source, set()))
        if reach is not None:
            pins.append(reach)
        state = load_state(catalog, group.name).state
        if state is None:
            pins.append(Pin(f"group {group.name} (no registry)", sequence=0))
            continue
        marks = [("its reconciled cursor", state.sink_cursor)]
        marks += [(f"lease {lease_id}", lease.sink_snapshot_at_grant) for lease_id, lease in state.leases.items()]
        isolated = isolated_in_sink(sink, group.name, group.replay_window, state.epoch).values()
        marks += [(f"rows isolated from shard {s.shard_id}", s.committed_in) for s in isolated if s.redriven_in is None]
        lineage = load_lineage(catalog, group.name)
        if lineage is not None:
            marks.append(("its lineage cursor", recorded_through(lineage)))
        for what, snapshot_id in marks:
            # A mark no longer in the metadata (or none at all) keeps everything: nothing is known to be safe.
            at = sequence.get(snapshot_id, 0) if snapshot_id is not None else 0
            pins.append(Pin(f"group {group.name}: {what}", sequence=at))
    return pins


def reset_pin(
    sink: Table, group: GroupConfig, catalog: Catalog, sequence: Mapping[int, int], gone: Collection[int] = ()
) -> Pin | None:
    """The pin of the sink commits a reset of ``group`` may still need; None when the source is gone.

    ``gone`` are source snapshots this run expires: a reset cannot reach back to them afterwards.
    """
    source = load_optional(catalog, group.source)
    if source is None:
        return None
    chain = {s.snapshot_id: s.sequence_number or 0 for s in walk_back(source, None) if s.snapshot_id not in gone}
    commits, replays = sink_history(sink, group.name)
    ranges = [(sequence.get(c.snapshot_id, 0), c.shards) for c in commits]
    ranges += [(sequence.get(r.snapshot_id, 0), r.covers) for r in replays]
    at = reset_reach(ranges, min(chain.values(), default=0), chain.keys())
    return None if at is None else Pin(f"group {group.name}: output a reset may still replace", sequence=at)


def staged_leftovers(sink: Table, groups: list[GroupConfig], now_ms: int) -> list[int]:
    """Staged snapshots off main, from Borrowers or replays that died between stage and publish."""
    on_main = {s.snapshot_id for s in walk_back(sink, None)}
    timeout_ms = max((2 * g.lease_timeout_s * 1000 for g in groups), default=0)
    older_than = now_ms - max(STAGED_AFTER_MS, timeout_ms)
    return [
        s.snapshot_id
        for s in sink.snapshots()
        if s.snapshot_id not in on_main
        and s.summary is not None
        and KEY_STAGE in s.summary.additional_properties
        and s.timestamp_ms < older_than
    ]


def judge_table(
    catalog: Catalog,
    identifier: str,
    readers: list[GroupConfig],
    writers: list[GroupConfig],
    state_of: str | None,
    keep: StateRetention,
    now_ms: int,
    expiring: Mapping[str, set[int]] | None = None,
) -> TableExpiry | None:
    """Judge one table by everything that pins it; None if it does not exist.

    ``expiring`` are the snapshots this run expires from the tables judged before (sources first).
    """
    table = load_optional(catalog, identifier)
    if table is None:
        return None
    pins: list[Pin] = []
    roles = []
    lapsed: list[str] = []
    staged: list[int] = []
    stray: list[str] = []
    if readers:
        roles.append("source")
        found, lapsed = source_pins(table, readers, catalog, now_ms)
        pins += found
        stray = stray_refs(table, readers, now_ms)
    if writers:
        roles.append("sink")
        pins += sink_pins(table, writers, catalog, expiring)
        staged = staged_leftovers(table, writers, now_ms)
    if state_of is not None:
        roles.append(state_of)
        since = now_ms - int(keep.keep_for.total_seconds() * 1000)
        pins.append(
            Pin(
                f"keep the last {keep.keep_last} or {format_duration(keep.keep_for)}",
                since_ms=since,
                last=keep.keep_last,
            )
        )
    history = [snapshot_info(s) for s in reversed(list(walk_back(table, None)))]
    return TableExpiry(identifier, roles, judge(history, pins), pins, staged, lapsed, stray)


def stray_refs(source: Table, groups: list[GroupConfig], now_ms: int) -> list[str]:
    """Groups whose source branch no longer pins anything: not configured here, and registered no more or lapsed.

    That is icegroup's own retention for the branch: a group inactive past its ``inactive_after``
    loses it, as it loses its registration, so an abandoned group stops keeping history for every
    engine. Its Leader sets it again at its next tick.
    """
    local = {g.name for g in groups}
    registrations = read_registrations(source)
    return sorted(
        name
        for name in group_refs(source)
        if name not in local and (name not in registrations or not registrations[name].active(now_ms))
    )


def expire(
    catalog: Catalog,
    groups: Mapping[str, GroupConfig],
    keep: StateRetention,
    execute: bool,
    now_ms: int | None = None,
) -> list[TableExpiry]:
    """Judge every table the groups touch and, with ``execute``, expire each verdict right after judging it.

    The tables are the groups' sources and sinks, and each group's registry, lineage and dead
    letters. A table whose expiry lost a race with another commit is reported and left for next time.
    Sources are judged first: what a sink must keep for a reset depends on the source history that
    is left, so a sink is judged with its source's verdict applied, whether this run executes it
    or only previews it (a source expiry that failed is not applied). The preview then says what
    the execution does.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    chosen = list(groups.values())
    work: list[tuple[str, list[GroupConfig], list[GroupConfig], str | None]] = [
        (t, [g for g in chosen if g.source == t], [g for g in chosen if g.sink == t], None)
        for t in sorted({g.source for g in chosen} | {g.sink for g in chosen})
    ]
    for group in chosen:
        work += [
            (registry_identifier(group.name), [], [], "registry"),
            (lineage_identifier(group.name), [], [], "lineage"),
            (dead_letter_identifier(group.name), [], [], "dead letters"),
            (dead_rows_identifier(group.name), [], [], "dead rows"),
        ]
    plans = []
    expiring: dict[str, set[int]] = {}
    for identifier, readers, writers, state_of in sorted(work, key=lambda item: not item[1]):
        plan = judge_table(catalog, identifier, readers, writers, state_of, keep, now_ms, expiring)
        if plan is None:
            continue
        plans.append(plan)
        if execute:
            expire_judged(catalog, plan)
        if plan.error is None:
            expiring[identifier] = {s.snapshot_id for s in plan.judged.expire}
    order = {identifier: index for index, (identifier, *_) in enumerate(work)}
    return sorted(plans, key=lambda plan: order[plan.table])


def expire_judged(catalog: Catalog, plan: TableExpiry) -> None:
    """Drop stray group branches, then expire what ``plan`` judged expirable; a lost race is recorded, not raised."""
    ids = [s.snapshot_id for s in plan.judged.expire] + plan.staged
    try:
        if plan.stray_refs:
            drop_refs(catalog.load_table(plan.table), plan.stray_refs)
        if not ids:
            return
        expire_snapshots(catalog, plan.table, ids)
    except CommitFailedException as exc:
        plan.error = f"skipped: the table moved while expiring ({exc}); run expire again"
        return
    plan.done = True
    log.info("expired %d snapshots of %s", len(ids), plan.table)
