"""A Leader tick opens each of its group's tables once, however many of its phases read them."""

from __future__ import annotations

import inspect
from collections import Counter

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.dead_letters import PARKED
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import Lease, LeasePhase
from icegroup.iceberg.store.dead_letters import dead_letter_identifier, record
from icegroup.iceberg.store.lineage import lineage_identifier
from icegroup.iceberg.store.registry import registry_identifier
from tests.factories import BORROWER_RUN, MakeGroup, append_batches, create_source, dead_letter
from tests.sink_commits import commit_lease

T0 = 1_900_000_000_000


def count_loads(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every table icegroup opens from now on (``load_table`` or a refresh), by identifier.

    The SQL catalog's own read of the current metadata inside a commit's compare-and-swap is the
    catalog's business, not an open: it is not counted.
    """
    loads: Counter[str] = Counter()
    real = catalog.load_table

    def load_table(identifier: str | tuple[str, ...]) -> Table:
        if not any(frame.function == "commit_table" for frame in inspect.stack(context=0)):
            loads[identifier if isinstance(identifier, str) else ".".join(identifier)] += 1
        return real(identifier)

    monkeypatch.setattr(catalog, "load_table", load_table)
    return loads


def test_a_busy_tick_opens_the_sink_and_every_other_table_once(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(max_borrowers=2, leases_per_borrower=1, shard_caps={"max_files": 1}, lease_max_shards=1)
    append_batches(create_source(catalog, group.source), 3, 4)
    first = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN, now_ms=T0)
    earlier, revoked = first.launch
    commit_lease(catalog, group, first.state, earlier)
    second = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)
    assert catalog.table_exists(lineage_identifier(group.name)), "the lineage table exists before the tick"
    (committed,) = second.launch
    commit_lease(catalog, group, second.state, committed)
    loads = count_loads(catalog, monkeypatch)

    # The tick reconciles a commit, records its lineage, revokes a failed lease (a fence on the sink)
    # and retires the committed one (its fence is pruned): every phase that touches the sink runs.
    def observe(lease: Lease) -> RunState:
        return RunState.FAILED if lease.lease_id == revoked.lease_id else RunState.RUNNING

    busy = tick(catalog, group, observe, owner_run_id=BORROWER_RUN, now_ms=T0 + 2000)

    assert [s.shard_id for s in busy.committed] == committed.shard_ids
    assert busy.regranted == 1
    assert busy.state.leases[revoked.lease_id].attempt == revoked.attempt + 1
    assert loads[group.sink] == 1
    assert loads[group.source] == 1
    assert loads[registry_identifier(group.name)] == 1
    assert loads[lineage_identifier(group.name)] == 1
    assert loads[dead_letter_identifier(group.name)] == 1


def test_a_letter_recorded_just_before_its_run_failed_parks_the_lease(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(on_poison="park", shard_caps={"max_files": 1}, lease_max_shards=1)
    append_batches(create_source(catalog, group.source), 1, 3)
    first = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN, now_ms=T0)
    bad = first.launch[0]
    shard = first.state.shards[bad.shard_ids[0]]
    letter = dead_letter(shard.shard_id, PARKED, stream=shard.stream, lease_id=bad.lease_id, attempt=bad.attempt)

    def poisoned_then_failed(lease: Lease) -> RunState:
        # The Borrower records the poison shard, then its run fails: both while the tick is under way.
        if lease.lease_id == bad.lease_id:
            record(catalog, group.name, [letter])
            return RunState.FAILED
        return RunState.RUNNING

    second = tick(catalog, group, poisoned_then_failed, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert second.state.leases[bad.lease_id].phase is LeasePhase.PARKED
    assert second.parked == [letter]
    assert second.regranted == 0
