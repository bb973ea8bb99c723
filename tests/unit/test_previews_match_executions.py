"""The preview of replay, delete, redrive, rebuild and migrate says what ``--execute`` then does, on random histories.

An operator decides on a preview's figures, so a preview that says one thing while the execution
does another is worse than none. ``test_reset_preview_matches.py`` and
``test_expire_preview_matches.py`` hold reset and expire to that; these tests do the same for the
other verbs that preview. Each draws a history with a seeded ``random.Random`` (appends of random
sizes, consumes, a source whose history was expired, a group with a filter where the verb reads
one), takes the preview, executes, and measures the change in the tables themselves: tables,
properties, branches and heartbeats gone, shards granted again, dead rows marked, registry streams,
sink rows. The Borrowers are the tests' own and commit without Spark (``tests/sink_commits.py``,
and ``commit_shards`` below for a sink whose rows carry their window).

Replay and migrate rewrite rows with Spark, so their executions are followed up to the last step
without it. A replay plans again inside its ticket, as ``replay_generation`` does before Spark reads
anything; the files that plan names are read here with pyarrow and must hold exactly the rows the
window's shards consumed. A migration rewrites the sink files holding rows with no window; the
sink's files are read one by one here to find them. A redrive commits isolated rows with Spark, so
its histories leave none pending: the shards it releases and the rows it marks are covered.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField

from icegroup.dagster_project.cli import Exit, main
from icegroup.dagster_project.cli.verbs import migrate_preview
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ReplayIncomplete
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.dead_letters import PARKED, REDRIVEN, STOPPED
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.shards import Shard, sink_window, window_label
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, COL_WINDOW, commit_properties, shard_number, shard_texts
from icegroup.iceberg.protocol.state import GroupState, Lease, LeasePhase
from icegroup.iceberg.rebuild import rebuild_registry
from icegroup.iceberg.replay import ReplayPlan, plan_replay
from icegroup.iceberg.replay_ticket import replay_ticket
from icegroup.iceberg.reset import execute_reset
from icegroup.iceberg.store.dead_letters import dead_letter_identifier, record
from icegroup.iceberg.store.dead_rows import ISOLATED, DeadRow, dead_rows_identifier, record_rows
from icegroup.iceberg.store.dead_rows import REDRIVEN as ROW_REDRIVEN
from icegroup.iceberg.store.heartbeats import beat, ensure_table, read_beats
from icegroup.iceberg.store.registry import NAMESPACE, commit_state, load_state, registry_identifier
from icegroup.iceberg.store.sink_history import deleted_key, sink_history
from icegroup.iceberg.store.tables import load_optional
from tests.factories import BORROWER_RUN, MakeGroup, append_batches, create_source, dead_letter, write_groups
from tests.sink_commits import commit_lease, consume_all

# A sink as Borrowers create it now: rows carry their shard and their window, and it is partitioned by window.
WINDOW_SINK = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, COL_SHARD, LongType(), required=False),
    NestedField(3, COL_WINDOW, DateType(), required=False),
)


class Ran(NamedTuple):
    """An ``icegroup`` command's exit code and what it printed."""

    code: int
    out: str
    err: str


class Icegroup(Protocol):
    """The ``icegroup`` fixture's type: run a command line with ``group`` in the groups file."""

    def __call__(self, group: GroupConfig, *argv: str) -> Ran:
        """Run it."""
        ...


@pytest.fixture
def icegroup(
    tmp_path: Path, lake_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Icegroup:
    """``icegroup`` on the test's lakehouse, as an operator runs it."""
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))

    def run(group: GroupConfig, *argv: str) -> Ran:
        groups = write_groups(tmp_path / "groups.yaml", group)
        capsys.readouterr()
        code = main(["--groups", str(groups), *argv])
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


def now_ms() -> int:
    """The time now, as icegroup's records hold it."""
    return int(time.time() * 1000)


def running(_: Lease) -> RunState:
    """A run observer that sees every Borrower run alive."""
    return RunState.RUNNING


def missing(_: Lease) -> RunState:
    """A run observer that sees no Borrower run yet, as ``consume_all`` ticks."""
    return RunState.MISSING


def expire_all(catalog: Catalog, table: str) -> None:
    """Expire every snapshot no ref keeps, as pyiceberg's own expiry does: the harshest another engine does."""
    catalog.load_table(table).maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()


def window_sink(catalog: Catalog, group: GroupConfig) -> Table:
    """The group's sink, created as the first Borrower does now."""
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), COL_WINDOW))
    return catalog.create_table(group.sink, schema=WINDOW_SINK, partition_spec=spec)


def commit_shards(catalog: Catalog, group: GroupConfig, lease: Lease, shards: dict[str, Shard]) -> list[Shard]:
    """Commit each shard of ``lease`` on its own, each row with its window, as a Borrower does; the shards committed."""
    sink = catalog.load_table(group.sink)
    done = []
    for shard_id in lease.shard_ids:
        shard = shards[shard_id]
        window = sink_window(shard.window_start_ms, group.replay_window)
        rows = [{"id": n, COL_SHARD: shard_number(shard_id), COL_WINDOW: window} for n in range(shard.rows)]
        props = commit_properties(
            group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, [shard], lease.origin
        )
        sink.append(pa.Table.from_pylist(rows, schema=sink.schema().as_arrow()), snapshot_properties=props)
        done.append(shard)
    return done


def consume_recorded(catalog: Catalog, group: GroupConfig) -> list[tuple[Lease, Shard]]:
    """Tick and commit every granted lease with ``commit_shards`` until the group is caught up; what was committed."""
    done: list[tuple[Lease, Shard]] = []
    for _ in range(50):
        result = tick(catalog, group, missing)
        if result.caught_up:
            return done
        for lease in result.launch:
            done += [(lease, shard) for shard in commit_shards(catalog, group, lease, result.state.shards)]
    raise AssertionError("the group did not catch up in 50 ticks")


def sink_rows(catalog: Catalog, group: GroupConfig) -> int:
    """Rows in the sink now."""
    return len(catalog.load_table(group.sink).scan().to_arrow())


def rows_of(catalog: Catalog, identifier: str) -> list[dict[str, Any]]:
    """Every row of one of icegroup's own tables; none while it does not exist."""
    table = load_optional(catalog, identifier)
    return table.scan().to_arrow().to_pylist() if table is not None else []


# Replay


def window_of(group: GroupConfig, shard: Shard) -> str:
    """The replay window a committed shard's rows are in."""
    return window_label(shard.window_start_ms, group.replay_window)


def added_ids(source: Table) -> dict[int, dict[str, set[int]]]:
    """The event ids each snapshot of the source appended, by region; read while every snapshot is still there."""
    added: dict[int, dict[str, set[int]]] = {}
    seen: dict[str, set[int]] = {}
    for snapshot in sorted(source.snapshots(), key=lambda s: s.sequence_number or 0):
        rows = source.scan(snapshot_id=snapshot.snapshot_id, selected_fields=("event_id", "region")).to_arrow()
        now: dict[str, set[int]] = {}
        for row in rows.to_pylist():
            now.setdefault(row["region"], set()).add(row["event_id"])
        added[snapshot.snapshot_id] = {region: ids - seen.get(region, set()) for region, ids in now.items()}
        seen = now
    return added


def consumed_ids(shard: Shard, added: dict[int, dict[str, set[int]]]) -> set[int]:
    """The event ids a shard consumed: its snapshots' appends to its stream (a region of the events source)."""
    region = shard.stream.rsplit("region=", 1)[-1]
    return {event for snapshot in shard.snapshots for event in added[snapshot].get(region, set())}


def event_ids(source: Table, paths: tuple[str, ...]) -> list[int]:
    """The event ids in these data files, read whole, as the replay's read takes them."""
    ids: list[int] = []
    for path in paths:
        with source.io.new_input(path).open() as stream:
            ids += pq.read_table(stream, columns=["event_id"]).column("event_id").to_pylist()
    return ids


def replay_figures(plan: ReplayPlan) -> tuple[object, ...]:
    """What ``icegroup replay`` shows of a plan (shards, source rows, sink rows, what is missing), and what it reads.

    Not the sink's head: the ticket the execution takes is a commit to the sink, so it moves the head.
    """
    reads = [(item.shard.shard_id, item.read_snapshot, item.files, item.found_rows) for item in plan.shards]
    return len(plan.shards), plan.rows, plan.sink_rows, plan.missing, reads


@pytest.mark.parametrize("seed", range(8))
def test_a_replay_reads_and_replaces_what_its_preview_says_on_a_random_history(
    catalog: Catalog, make_group: MakeGroup, seed: int
) -> None:
    rng = random.Random(seed)
    group = make_group(
        shard_caps={"max_files": rng.choice([1, 4])}, max_borrowers=3, filter=rng.choice([None, "region = 'eu'"])
    )
    source = create_source(catalog, group.source)
    window_sink(catalog, group)
    size = rng.choice([8, 20])
    append_batches(source, rng.randint(1, 3), size)
    committed = [shard for _, shard in consume_recorded(catalog, group)]
    append_batches(catalog.load_table(group.source), rng.randint(0, 2), size)  # not consumed: no replay reads it
    added = added_ids(catalog.load_table(group.source))
    window = rng.choice(sorted({window_of(group, shard) for shard in committed}))
    covered = {shard.shard_id: shard for shard in committed if window_of(group, shard) == window}
    deleted = None
    if rng.random() < 0.4:  # a consumed row deleted from the source since: its file is rewritten without it
        deleted = rng.choice(sorted(event for shard in covered.values() for event in consumed_ids(shard, added)))
        catalog.load_table(group.source).delete(f"event_id = {deleted}")
    if rng.random() < 0.5:
        expire_all(catalog, group.source)

    preview = plan_replay(catalog, group, window)
    with replay_ticket(catalog, group, window, f"replay-test-{seed}"):  # the execution, up to where Spark reads
        executed = plan_replay(catalog, group, window)

    assert replay_figures(executed) == replay_figures(preview), "the execution plans what the preview showed"
    source = catalog.load_table(group.source)
    lost = {
        shard_id
        for shard_id, shard in covered.items()
        if deleted in consumed_ids(shard, added) and source.snapshot_by_id(shard.to_snapshot) is None
    }  # its rows are whole nowhere: the rewritten file lacks one, and the snapshot that had them all expired
    assert {item.shard.shard_id for item in executed.shards} == set(covered) - lost
    assert {s for s in covered if any(f"shard {s} (" in gap for gap in executed.missing)} == lost
    assert len(executed.missing) == len(lost), executed.missing
    if lost:
        with pytest.raises(ReplayIncomplete, match="nothing was replaced"):
            executed.check_complete()
    assert executed.sink_rows == sum(shard.rows for shard in covered.values()), "the rows the replay deletes"
    read = 0
    for item in executed.shards:
        ids = event_ids(source, item.files)
        assert sorted(ids) == sorted(consumed_ids(covered[item.shard.shard_id], added)), "the rows it consumed, once"
        assert len(ids) == item.found_rows
        read += len(ids)
    assert read == executed.rows, "the preview's source rows are the rows the replay reads"


# Delete


@dataclass
class Kept:
    """What ``icegroup delete`` may change, as the catalog holds it now."""

    tables: frozenset[str]
    sink_properties: dict[str, str]
    source_properties: dict[str, str]
    source_refs: frozenset[str]
    heartbeats: frozenset[str]
    sink_rows: int


def kept(catalog: Catalog, group: GroupConfig) -> Kept:
    """What is there now: icegroup's tables, the source's and sink's properties and refs, the beats, the rows."""
    tables = catalog.list_tables(NAMESPACE) if (NAMESPACE,) in catalog.list_namespaces() else []
    sink = load_optional(catalog, group.sink)
    source = catalog.load_table(group.source)
    return Kept(
        tables=frozenset(".".join(identifier) for identifier in tables),
        sink_properties=dict(sink.properties) if sink is not None else {},
        source_properties=dict(source.properties),
        source_refs=frozenset(source.metadata.refs),
        heartbeats=frozenset(read_beats(catalog, group.name)),
        sink_rows=len(sink.scan().to_arrow()) if sink is not None else 0,
    )


@pytest.mark.parametrize("seed", range(8))
def test_delete_removes_exactly_what_its_preview_lists_on_a_random_history(
    catalog: Catalog, make_group: MakeGroup, icegroup: Icegroup, seed: int
) -> None:
    rng = random.Random(seed)
    group = make_group(shard_caps={"max_files": rng.choice([1, 4])}, max_borrowers=3)
    append_batches(create_source(catalog, group.source), rng.randint(1, 3), rng.choice([8, 20]))
    in_flight = False
    if rng.random() < 0.7:  # else the group never ticked: it keeps at most a dead letter and a heartbeat
        consume_all(catalog, group)
        if rng.random() < 0.5:  # a reset leaves its markers on the sink
            execute_reset(catalog, group, ResetTarget("earliest"))
            consume_all(catalog, group)
        in_flight = rng.random() < 0.5
        if in_flight:
            append_batches(catalog.load_table(group.source), 1, 6)
            tick(catalog, group, running, owner_run_id=BORROWER_RUN)
    if rng.random() < 0.5:
        record(catalog, group.name, [dead_letter("0123456789abcdef", PARKED, at_ms=now_ms())])
    if rng.random() < 0.5:
        ensure_table(catalog)
        beat(catalog, group.name, "borrower-run-2")
    if rng.random() < 0.5:
        expire_all(catalog, group.source)
    before = kept(catalog, group)

    shown = icegroup(group, "delete", group.name, "--json")
    assert shown.code == Exit.OK, shown.err
    preview = json.loads(shown.out)
    assert kept(catalog, group) == before, "a preview changes nothing"
    done = icegroup(group, "delete", group.name, "--execute", "--json")
    after = kept(catalog, group)

    assert bool(preview["leases_in_flight"]) == in_flight
    if in_flight:
        assert done.code == Exit.ERROR, "a lease the preview names in flight makes the execution refuse"
        assert after == before
        return
    assert done.code == Exit.OK, done.err
    assert set(preview["tables"]) <= before.tables
    assert after.tables == before.tables - set(preview["tables"]), "its tables are gone, and no other"
    assert not {t for t in after.tables if t.endswith(f"_{group.name}")}, "no table of the group is left unlisted"
    assert {key for key in before.sink_properties if key not in after.sink_properties} == set(
        preview["sink_properties"]
    )
    registration, branch = preview["source_registration"], preview["source_branch"]
    assert after.source_properties == {k: v for k, v in before.source_properties.items() if k != registration}
    assert after.source_refs == before.source_refs - {branch}
    assert after.heartbeats == before.heartbeats - set(preview["heartbeats"])
    assert after.heartbeats == frozenset(), "no heartbeat of the group is left unlisted"
    assert after.sink_properties.get(deleted_key(group.name)) == preview["deleted_at_sink_snapshot"]
    assert after.sink_rows == before.sink_rows, "the sink's rows stay"


# Redrive

PREVIEW_SHARD = re.compile(r"^would re-drive: shard (\w+) \(stream ", re.MULTILINE)
EXECUTED_SHARD = re.compile(r"^re-driven: shard (\w+) \(stream ", re.MULTILINE)
WHOLE = r": the (\d+) isolated rows of shard (\w+) in the sink, committed with their shard whole by sink snapshot (\d+)"
PREVIEW_MARK = re.compile(rf"^would mark{WHOLE}", re.MULTILINE)
EXECUTED_MARK = re.compile(rf"^marked{WHOLE}", re.MULTILINE)


def isolated_row(shard: Shard, lease: Lease, pos: int) -> DeadRow:
    """A row a Borrower isolated from ``shard`` and recorded before it died; the next attempt committed it whole."""
    return DeadRow(
        shard_id=shard.shard_id,
        stream=shard.stream,
        lease_id=lease.lease_id,
        attempt=lease.attempt,
        file=f"{shard.shard_id}.parquet",
        pos=pos,
        action=ISOLATED,
        error="ZeroDivisionError: division by zero",
        row="{}",
        sink_snapshot=None,
        at_ms=now_ms(),
    )


@pytest.mark.parametrize("seed", range(8))
def test_redrive_releases_and_marks_what_its_preview_says_on_random_poison_shards(
    catalog: Catalog, make_group: MakeGroup, icegroup: Icegroup, seed: int
) -> None:
    rng = random.Random(seed)
    on_poison = rng.choice(["stop", "park"])
    group = make_group(max_borrowers=3, shard_caps={"max_files": 1}, lease_max_shards=1, on_poison=on_poison)
    append_batches(create_source(catalog, group.source), 2, rng.choice([6, 12]))
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN)  # one lease per stream
    leases = sorted(first.launch, key=lambda lease: lease.streams)
    poisoned = {lease.shard_ids[0] for lease in rng.sample(leases, rng.randint(1, len(leases)))}
    whole: dict[str, tuple[int, str]] = {}  # shard: the isolated rows its commit took in, and that commit
    for lease in leases:
        shard = first.state.shards[lease.shard_ids[0]]
        if shard.shard_id in poisoned:
            letter = dead_letter(
                shard.shard_id,
                STOPPED if on_poison == "stop" else PARKED,
                stream=shard.stream,
                lease_id=lease.lease_id,
                attempt=lease.attempt,
                from_snapshot=shard.from_snapshot,
                to_snapshot=shard.to_snapshot,
                at_ms=now_ms(),
            )
            record(catalog, group.name, [letter])  # the Borrower gave up on it
            continue
        isolated = rng.choice([0, 0, 1, 3])
        record_rows(catalog, group.name, [isolated_row(shard, lease, pos) for pos in range(isolated)])
        commit_lease(catalog, group, first.state, lease)
        if isolated:
            whole[shard.shard_id] = (isolated, str(catalog.load_table(group.sink).metadata.current_snapshot_id))
    tick(catalog, group, running, owner_run_id=BORROWER_RUN)  # parks the poisoned leases
    choices = sorted(poisoned | set(whole))
    wanted = [] if rng.random() < 0.5 else rng.sample(choices, rng.randint(1, len(choices)))
    argv = ["redrive", group.name, *(arg for shard_id in wanted for arg in ("--shard", shard_id))]

    preview = icegroup(group, *argv)
    assert preview.code == Exit.OK, preview.err
    executed = icegroup(group, *argv, "--execute")
    assert executed.code == Exit.OK, executed.err
    shown, done = preview.out, executed.out
    after = tick(catalog, group, running, owner_run_id=BORROWER_RUN)

    said = sorted(PREVIEW_SHARD.findall(shown))
    assert said == sorted(s for s in poisoned if not wanted or s in wanted), shown
    assert sorted(EXECUTED_SHARD.findall(done)) == said, done
    letters = rows_of(catalog, dead_letter_identifier(group.name))
    assert sorted(row["shard_id"] for row in letters if row["action"] == REDRIVEN) == said, "one release each"
    assert sorted(s for lease in after.launch for s in lease.shard_ids if s in poisoned) == said, "granted again"
    parked = {s for lease in after.state.leases.values() if lease.phase is LeasePhase.PARKED for s in lease.shard_ids}
    assert parked == poisoned - set(said), "the others still wait"

    marks = sorted((shard_id, int(count), at) for count, shard_id, at in PREVIEW_MARK.findall(shown))
    assert marks == sorted((s, count, at) for s, (count, at) in whole.items() if not wanted or s in wanted), shown
    assert sorted((s, int(count), at) for count, s, at in EXECUTED_MARK.findall(done)) == marks, done
    dead_rows = rows_of(catalog, dead_rows_identifier(group.name))
    marked = Counter((row["shard_id"], str(row["sink_snapshot"])) for row in dead_rows if row["action"] == ROW_REDRIVEN)
    assert dict(marked) == {(shard_id, at): count for shard_id, count, at in marks}


# Rebuild


def stream_figures(state: GroupState) -> dict[str, tuple[int | None, int, int]]:
    """Per stream, what ``icegroup rebuild`` shows of a state: its position, its committed shards and rows."""
    return {name: (s.position, s.committed_shards, s.committed_rows) for name, s in state.streams.items()}


def committed_figures(committed: list[tuple[Lease, Shard]]) -> dict[str, tuple[int | None, int, int]]:
    """The same figures, from what the Borrowers committed: each stream's last shard's end, its shards and rows."""
    figures: dict[str, tuple[int | None, int, int]] = {}
    for _, shard in sorted(committed, key=lambda done: done[1].to_sequence):
        _, shards, rows = figures.get(shard.stream, (None, 0, 0))
        figures[shard.stream] = (shard.to_snapshot, shards + 1, rows + shard.rows)
    return figures


def epoch_fence(catalog: Catalog, group: GroupConfig) -> str | None:
    """The sink's epoch fence for the group."""
    return catalog.load_table(group.sink).properties.get(epoch_key(group.name))


@pytest.mark.parametrize("seed", range(8))
def test_rebuild_commits_the_registry_its_preview_shows_on_a_random_history(
    catalog: Catalog, make_group: MakeGroup, seed: int
) -> None:
    rng = random.Random(seed)
    group = make_group(
        shard_caps={"max_files": rng.choice([1, 4])},
        lease_max_shards=rng.choice([1, 2]),
        max_borrowers=3,
        filter=rng.choice([None, "region = 'eu'"]),
    )
    source = create_source(catalog, group.source)
    window_sink(catalog, group)
    size = rng.choice([8, 20])
    append_batches(source, rng.randint(1, 3), size)
    committed = consume_recorded(catalog, group)
    backup = load_state(catalog, group.name).state
    append_batches(catalog.load_table(group.source), rng.randint(1, 2), size)
    granted = tick(catalog, group, missing)
    for lease in granted.launch:  # some leases commit, the others are in flight when the registry goes wrong
        if rng.random() < 0.5:
            committed += [(lease, shard) for shard in commit_shards(catalog, group, lease, granted.state.shards)]
    damage = rng.choice(["lost", "restored from an older backup", "intact"])
    if damage == "lost":
        catalog.drop_table(registry_identifier(group.name))
    elif damage == "restored from an older backup":
        assert backup is not None
        commit_state(load_state(catalog, group.name), backup)
    untouched = (load_state(catalog, group.name).token, epoch_fence(catalog, group))

    preview = rebuild_registry(catalog, group, execute=False)
    assert (load_state(catalog, group.name).token, epoch_fence(catalog, group)) == untouched, (
        "a preview changes nothing"
    )
    rebuild_registry(catalog, group, execute=True)

    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.epoch == preview.rebuilt.epoch, damage
    assert epoch_fence(catalog, group) == str(preview.rebuilt.epoch), "older leases are fenced at the epoch shown"
    assert stream_figures(state) == stream_figures(preview.rebuilt), f"{damage}: the registry is the one shown"
    assert stream_figures(preview.rebuilt) == committed_figures(committed), f"{damage}: the sink's commits"
    assert (
        state.leases_done
        == preview.rebuilt.leases_done
        == len({(lease.lease_id, lease.epoch) for lease, _ in committed})
    )
    assert sum(shard.rows for _, shard in committed) == sink_rows(catalog, group)
    consume_recorded(catalog, group)
    source = catalog.load_table(group.source)
    live = len((source.scan(row_filter=group.filter) if group.filter else source.scan()).to_arrow())
    assert sink_rows(catalog, group) == live, f"{damage}: from the positions shown, every source row once"


# Migrate


def sink_files(sink: Table) -> dict[str, tuple[int, list[str | None]]]:
    """Each live data file of the sink, read whole: its rows, and the shards of its rows that have no window.

    A file written before the sink had the window column has no window in any row.
    """
    files = {}
    for task in sink.scan().plan_files():
        with sink.io.new_input(task.file.file_path).open() as stream:
            rows = pq.read_table(stream)
        shards = rows.column(COL_SHARD).to_pylist()
        windows = rows.column(COL_WINDOW).to_pylist() if COL_WINDOW in rows.column_names else [None] * len(shards)
        files[task.file.file_path] = (
            rows.num_rows,
            shard_texts([s for s, w in zip(shards, windows, strict=True) if w is None]),
        )
    return files


@pytest.mark.parametrize("seed", range(6))
def test_migrate_previews_the_files_and_rows_its_execution_rewrites_on_a_random_sink(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup, seed: int
) -> None:
    rng = random.Random(seed)
    group = make_group(shard_caps={"max_files": rng.choice([1, 4])}, max_borrowers=3)
    size = rng.choice([8, 20])
    append_batches(create_source(catalog, group.source), rng.randint(1, 3), size)
    consume_all(catalog, group)  # by an older icegroup: the sink has no window column
    if rng.random() < 2 / 3:  # a newer Borrower gave the sink the column, and maybe the partition field, and wrote
        sink = catalog.load_table(group.sink)
        with sink.update_schema() as columns:
            columns.add_column(COL_WINDOW, DateType())
        if rng.random() < 0.5:
            with sink.update_spec() as spec:
                spec.add_identity(COL_WINDOW)
        append_batches(catalog.load_table(group.source), rng.randint(0, 2), size)
        consume_recorded(catalog, group)

    shown = migrate_preview(lakehouse, group)

    sink = catalog.load_table(group.sink)
    windowless = {path: found for path, found in sink_files(sink).items() if found[1]}
    said = re.search(r"(\d+) rows with no window in (\d+) files \((\d+) rows\)", shown)
    assert said is not None, shown
    assert int(said[1]) == sum(len(shards) for _, shards in windowless.values()), shown
    assert (int(said[2]), int(said[3])) == (len(windowless), sum(rows for rows, _ in windowless.values())), shown
    commits, _ = sink_history(sink, group.name)
    known = {shard.shard_id for commit in commits for shard in commit.shards if shard.window_start_ms is not None}
    unknown = {shard_id for _, shards in windowless.values() for shard_id in shards} - known
    assert not unknown, "every such row's window is in the sink's history, so the execution goes ahead"


def test_a_shard_named_twice_is_re_driven_once_in_the_preview_and_the_execution(
    catalog: Catalog, make_group: MakeGroup, icegroup: Icegroup
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=1, on_poison="park")
    append_batches(create_source(catalog, group.source), 1, 6)
    lease = tick(catalog, group, running, owner_run_id=BORROWER_RUN).launch[0]
    record(catalog, group.name, [dead_letter(lease.shard_ids[0], PARKED, lease_id=lease.lease_id, at_ms=now_ms())])
    argv = ["redrive", group.name, "--shard", lease.shard_ids[0], "--shard", lease.shard_ids[0]]

    preview = icegroup(group, *argv)
    executed = icegroup(group, *argv, "--execute")

    assert len(PREVIEW_SHARD.findall(preview.out)) == 1, preview.out
    assert len(EXECUTED_SHARD.findall(executed.out)) == 1, executed.out
    assert "1 shard(s) re-driven" in executed.out
    letters = rows_of(catalog, dead_letter_identifier(group.name))
    assert [row["shard_id"] for row in letters if row["action"] == REDRIVEN] == [lease.shard_ids[0]]


def test_deleting_a_group_that_keeps_nothing_reports_no_deleted_marker(
    catalog: Catalog, make_group: MakeGroup, icegroup: Icegroup
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 6)
    consume_all(catalog, group)
    assert icegroup(group, "delete", group.name, "--execute").code == Exit.OK
    marker = catalog.load_table(group.sink).properties.get(deleted_key(group.name))

    again = icegroup(group, "delete", group.name, "--execute", "--json")

    report = json.loads(again.out)
    assert report["deleted_at_sink_snapshot"] is None, "this execution wrote no marker"
    assert catalog.load_table(group.sink).properties.get(deleted_key(group.name)) == marker


def test_migrate_previews_the_refusal_its_execution_makes_for_rows_whose_window_is_lost(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 6)
    consume_all(catalog, group)  # by an older icegroup: no window column
    sink = catalog.load_table(group.sink)
    sink.append(pa.Table.from_pylist([{"id": 1, COL_SHARD: None}], schema=sink.schema().as_arrow()))

    shown = migrate_preview(lakehouse, group)

    assert "would refuse" in shown, shown
    assert "would refuse: 1 rows of 13 with no window" in shown, "it counts the rows whose shard has no commit left"
    assert "rows of shards None in" in shown, "and names their shards"
