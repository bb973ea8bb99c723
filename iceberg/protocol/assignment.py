"""Pure lease assignment: which pending shards go to which new Borrower, within max_borrowers.

Rules, each for a guarantee:
- a stream is held by one lease at a time, so shards of a stream commit in snapshot order;
- a lease holds shards of one replay window, so each Borrower run is one sink partition;
- the oldest window is served first, and within it the stream whose next shard is oldest: when
  the free slots cannot take every stream, the one waiting longest goes first, so no stream starves
  behind others that always have work (a tie-break by name once starved the last stream of three);
- streams are spread by rows over as many leases as the slots make Borrower runs
  (``lease_spread``), not one lease per slot, and no lease holds more than ``lease_max_shards``
  shards; streams a full lease leaves out get another lease while a slot is free, before a newer
  window does. One run's leases share its SparkSession, so two leases there run at about half speed
  each; one lease of both streams reads them in one Spark job and publishes them in one commit
  (``commit_batch_rows``). On this 2-core machine, W1 in one warm session took 3.18 s as one lease and
  3.92 s as a lease per slot, against 2.0 s for a plain job (``tests/benchmarks/bench_lease_packing.py``).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.state import GroupState, Lease, LeasePhase


def lease_spread(group: GroupConfig) -> int:
    """Leases a window's streams are spread over: the Borrower runs the slots make (``leases_per_borrower`` each)."""
    return math.ceil(group.max_borrowers / group.leases_per_borrower)


def make_lease_id(group: str, epoch: int, shard_ids: list[str]) -> str:
    """Deterministic: the same shards in the same epoch always make the same lease."""
    key = f"{group}|{epoch}|{','.join(sorted(shard_ids))}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def stream_heads(state: GroupState, max_shards: int) -> dict[str, list[Shard]]:
    """Per free stream, its next run of pending shards: same window, in order, at most max_shards."""
    busy = {stream for lease in state.leases.values() for stream in lease.streams}
    heads: dict[str, list[Shard]] = {}
    closed: set[str] = set()
    for shard in sorted(state.shards.values(), key=lambda s: (s.to_sequence, s.stream)):
        if shard.stream in busy or shard.stream in closed:
            continue
        run = heads.setdefault(shard.stream, [])
        if run and (run[0].window_start_ms != shard.window_start_ms or len(run) >= max_shards):
            closed.add(shard.stream)
            continue
        run.append(shard)
    return heads


def assign_leases(
    state: GroupState,
    group: GroupConfig,
    now_ms: int,
    sink_snapshot: int | None,
    owner_run_id: str | None = None,
) -> list[Lease]:
    """New leases for the free borrower slots; existing leases are never touched.

    A parked lease keeps its stream (so its order holds) but not a slot: it has no Borrower. A stream
    whose next shard is in a window being replayed waits, so the replay sees the window hold still.
    """
    slots = group.max_borrowers - sum(1 for lease in state.leases.values() if lease.phase is not LeasePhase.PARKED)
    if slots <= 0:
        return []
    by_window: dict[int, dict[str, list[Shard]]] = defaultdict(dict)
    for stream, run in stream_heads(state, group.lease_max_shards).items():
        by_window[run[0].window_start_ms][stream] = run
    leases: list[Lease] = []
    replaying = {ticket.window_start_ms for ticket in state.replays.values()}
    for window in sorted(by_window):
        if slots <= 0:
            break
        if window in replaying:
            continue
        streams = by_window[window]
        bins: list[list[Shard]] = [[] for _ in range(min(slots, len(streams), lease_spread(group)))]
        loads = [0] * len(bins)
        for stream in sorted(streams, key=lambda s: (streams[s][0].to_sequence, -sum(x.rows for x in streams[s]), s)):
            open_bins = [i for i, b in enumerate(bins) if len(b) < group.lease_max_shards]
            if not open_bins and len(bins) < slots:  # full leases leave this stream out: a free slot takes it
                bins.append([])
                loads.append(0)
                open_bins = [len(bins) - 1]
            if not open_bins:
                break
            target = min(open_bins, key=lambda i: (loads[i], len(bins[i]), i))
            run = streams[stream][: group.lease_max_shards - len(bins[target])]
            bins[target].extend(run)
            loads[target] += sum(x.rows for x in run)
        for members in (b for b in bins if b):
            shards = sorted(members, key=lambda x: (x.to_sequence, x.stream))
            shard_ids = [x.shard_id for x in shards]
            leases.append(
                Lease(
                    lease_id=make_lease_id(group.name, state.epoch, shard_ids),
                    epoch=state.epoch,
                    window_start_ms=window,
                    shard_ids=shard_ids,
                    streams=sorted({x.stream for x in shards}),
                    granted_at_ms=now_ms,
                    deadline_ms=now_ms + group.lease_timeout_s * 1000,
                    sink_snapshot_at_grant=sink_snapshot,
                    owner_run_id=owner_run_id,
                    origin=state.origin,
                )
            )
        slots -= sum(1 for b in bins if b)
    return leases
