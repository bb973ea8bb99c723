"""The fenced sink commit: one shard's output and its progress in one Iceberg append.

Everything a Borrower does to the sink goes through this module:

- **claim**: raise the lease's fence (a sink property, ``icegroup.fence.<group>.<lease>``) to this
  attempt, so that every older attempt of the lease can no longer commit;
- **history**: the one read of the sink's history a lease needs, to resume after the shards an
  earlier attempt committed;
- **stage**: Spark writes the shard's output as a staged snapshot (Iceberg's write-audit-publish;
  the sink sets ``write.wap.enabled``), which no reader of main sees;
- **publish**: ``icegroup.commit.FencedCommit`` (``spark_jobs/sink/jvm``) appends the staged files to
  main. Its checks run inside the catalog's compare-and-swap, on exactly the metadata the commit
  is built on: the lease's fence is not above this attempt and the group epoch is the lease's (a
  zombie fails here and adds nothing to main), and no sink snapshot since the grant carries the
  shard id (a shard is committed once).

A conflicting commit makes the swap fail; Iceberg refreshes, backs off and retries, and the checks
run again. The published snapshot is an ``append``, so another group can consume the sink, and it
deletes nothing, so compacting the sink does not get in its way. The Leader's side of the fence,
raising it before a re-grant, is ``iceberg/store/fences.py``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JJavaError
from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame, SparkSession

from icegroup.iceberg.errors import (
    AlreadyCommitted,
    Fenced,
    IcegroupError,
    SinkError,
    StagedOutputGone,
    StaleLease,
    WindowMoved,
)
from icegroup.iceberg.protocol.fences import epoch_key, fence_key, replay_fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import (
    COL_WINDOW,
    KEY_STAGE,
)
from icegroup.iceberg.protocol.state import Lease, ReplayTicket
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.sink_history import SinkHistory, read_sink_history
from icegroup.iceberg.store.tables import load_optional
from icegroup.spark_jobs.sink.refusals import refusal
from icegroup.spark_jobs.sink.shape import align_to_sink, staging_spec

log = logging.getLogger(__name__)

# Each task writes its own rows (no shuffle by window: one window would make one writer task), and
# keeps a file open per window it meets, since a batch of shards can span windows.
WRITE_OPTIONS = {"distribution-mode": "none", "fanout-enabled": "true"}


@dataclass(frozen=True)
class Published:
    """A shard's commit on the sink's main branch."""

    snapshot_id: int
    conflicts: int
    added_records: int


def claim(catalog: Catalog, group: GroupConfig, lease: Lease) -> bool:
    """Raise the lease's fence on the sink to this attempt; ``StaleLease`` if a later attempt holds it.

    Returns False when there is no sink yet to claim it on; the claim is then made once it exists.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None:
        return False
    key = fence_key(group.name, lease.lease_id)
    raise_fences(sink, {key: lease.attempt})
    granted = int(sink.metadata.properties.get(key, "0"))
    if granted > lease.attempt:
        raise StaleLease(f"lease {lease.lease_id} of group {group.name!r} is fenced at attempt {granted}")
    return True


def lease_history(catalog: Catalog, group: GroupConfig, lease: Lease) -> SinkHistory:
    """The group's sink commits since the lease's grant: what an earlier attempt already committed."""
    return read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant)


def stage_shard(df: DataFrame, table: str, evolve: bool = False, spec_id: int | None = None) -> str:
    """Write the shard's output as a staged snapshot of the sink; returns the token that finds it.

    With ``evolve``, columns the sink lacks are added to it first (only then: a schema merge is a
    commit of its own, and Borrowers writing at once would contend for it). ``spec_id`` writes
    through that spec of the sink rather than its current one (``shape.staging_spec``).
    """
    token = uuid.uuid4().hex
    writer = df.writeTo(table).option(f"snapshot-property.{KEY_STAGE}", token).options(**WRITE_OPTIONS)
    if evolve:
        writer = writer.option("mergeSchema", "true")
    if spec_id is not None:
        writer = writer.option("output-spec-id", str(spec_id))
    writer.append()
    return token


def stage_aligned(spark: SparkSession, table: str, out: DataFrame, one_window: bool) -> str:
    """Stage ``out`` on the sink ``table`` as it stands now: aligned to its columns, through its staging spec.

    Output of ``one_window`` is staged through the sink's unpartitioned spec where it has one
    (``shape.staging_spec``): the fenced commit places its files in the window's partition.
    """
    aligned, evolve = align_to_sink(spark, table, out)
    spec = staging_spec(spark, table) if one_window else None
    return stage_shard(aligned, table, evolve=evolve, spec_id=spec)


@dataclass(frozen=True)
class PublishRequest:
    """One lease's staged shards to publish: the token that finds them, the lease that fences them, their summary."""

    token: str
    lease: Lease
    shard_ids: list[str]
    properties: dict[str, str]


def publish_all(
    spark: SparkSession, table: str, group: str, requests: list[PublishRequest]
) -> list[Published | IcegroupError]:
    """Publish several leases' staged shards in one swap of the sink's metadata, a snapshot per lease.

    Each request is checked against its own lease's fence, inside the swap. A refused request
    (``Fenced``, ``AlreadyCommitted``, ``StagedOutputGone``, or the sink's history expired past its
    grant: ``SinkError``) comes back as that error, its staged output expired unless it can be
    staged again, and the others are committed without it. A failure of the swap itself is raised:
    then no request was committed.
    """
    jvm: Any = spark._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    java_requests = jvm.java.util.ArrayList()
    commit = jvm.icegroup.commit.FencedCommit
    for request in requests:
        props = jvm.java.util.HashMap()
        for key, value in request.properties.items():
            props.put(key, value)
        lease, base = request.lease, request.lease.sink_snapshot_at_grant
        java_requests.add(
            commit.Request(
                request.token, fence_key(group, lease.lease_id), lease.attempt, lease.epoch,
                ",".join(request.shard_ids), None if base is None else jvm.java.lang.Long(base), props,
            )
        )  # fmt: skip
    try:
        outcomes = list(commit.commitAll(iceberg_table, group, epoch_key(group), java_requests))
    except Py4JJavaError as exc:
        refused = refusal(exc.java_exception)
        if refused is None:
            raise
        shards = ", ".join(sid for request in requests for sid in request.shard_ids)
        raise refused.error(f"sink: commit of shards {shards} to {table} failed: {refused.message}") from None
    results: list[Published | IcegroupError] = []
    for request, outcome in zip(requests, outcomes, strict=True):
        results.append(published_or_refused(jvm, iceberg_table, table, group, request, outcome))
    return results


def published_or_refused(
    jvm: Any, iceberg_table: Any, table: str, group: str, request: PublishRequest, outcome: Any
) -> Published | IcegroupError:
    """What one request of ``publish_all`` came to.

    A refused request's staged output is expired, unless it may be staged again (``StagedOutputGone``,
    ``SinkError``).
    """
    shards = ", ".join(request.shard_ids)
    lease = request.lease
    conflicts = int(outcome.conflicts())
    if conflicts:
        log.warning(
            "group %s lease %s#%d shards %s: sink commit retried after %d conflicting commits",
            group, lease.lease_id, lease.attempt, shards, conflicts,
        )  # fmt: skip
    java_error = outcome.refused()
    if java_error is None:
        return Published(snapshot_id=int(outcome.snapshotId()), conflicts=conflicts, added_records=int(outcome.added()))
    refused = refusal(java_error)
    if refused is None:
        return SinkError(f"sink: commit of shards {shards} to {table} failed: {java_error}")
    if refused.error in (SinkError, StagedOutputGone):
        return refused.error(f"sink: commit of shards {shards} to {table} failed: {refused.message}")
    try:
        jvm.icegroup.commit.FencedCommit.discardStaged(iceberg_table, request.token)
    except Py4JJavaError as exc:  # the refusal is the answer: the other requests' commits landed
        log.warning("sink %s: refused staged output %s left behind: %s", table, request.token, exc.java_exception)
    return refused.error(f"sink: commit of shards {shards} to {table} refused: {refused.message}")


def publish_shard(
    spark: SparkSession,
    table: str,
    token: str,
    group: str,
    lease: Lease,
    shard_ids: list[str],
    properties: dict[str, str],
) -> Published:
    """Append the staged files of ``shard_ids`` to main in one fenced commit of their own.

    Raises ``Fenced`` or ``AlreadyCommitted`` (if any of the shards is in the sink already) when not allowed,
    and ``StagedOutputGone`` when the staged snapshot was expired before this publish (stage it again).

    A refused publish expires its staged snapshot and files. A Borrower killed between stage and
    publish leaves its staged snapshot behind, invisible on main, until the sink's snapshots expire.
    """
    (outcome,) = publish_all(spark, table, group, [PublishRequest(token, lease, shard_ids, properties)])
    if isinstance(outcome, IcegroupError):
        raise outcome
    return outcome


def discard_staged(spark: SparkSession, table: str, token: str) -> None:
    """Expire a staged snapshot and its files, so a lease that ends before publishing it leaves nothing."""
    jvm: Any = spark._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    jvm.icegroup.commit.FencedCommit.discardStaged(iceberg_table, token)


@dataclass(frozen=True)
class Replaced:
    """A replay's commit: the window's old rows out, the new rows in, in one snapshot."""

    snapshot_id: int
    conflicts: int
    added_records: int
    deleted_records: int


def publish_replay(
    spark: SparkSession, table: str, token: str, group: str, ticket: ReplayTicket, validate_from: int | None,
    properties: dict[str, str],
) -> Replaced:  # fmt: skip
    """Replace the window's rows with the staged output in one fenced overwrite (``WindowReplace.java``).

    ``Fenced`` if a later replay of the window, or a new epoch, began; ``WindowMoved`` if output of the
    window was committed after ``validate_from`` (the sink head the replay planned at). Either way
    the staged output is dropped and the window keeps its old rows.
    """
    jvm: Any = spark._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    base = None if validate_from is None else jvm.java.lang.Long(validate_from)
    try:
        snapshot_id, conflicts, added, deleted = jvm.icegroup.commit.WindowReplace.replace(
            iceberg_table, token, group, epoch_key(group), ticket.epoch, replay_fence_key(group, ticket.window),
            ticket.generation, COL_WINDOW, ticket.window, ticket.window_start_ms, base, props,
        )  # fmt: skip
    except Py4JJavaError as exc:
        refused = refusal(exc.java_exception)
        if refused is None or refused.error is AlreadyCommitted:
            raise
        jvm.icegroup.commit.FencedCommit.discardStaged(iceberg_table, token)
        whats: dict[type[IcegroupError], str] = {
            Fenced: f"the replay of window {ticket.window} in {table} was refused",
            WindowMoved: f"window {ticket.window} of {table} moved",
        }
        what = whats.get(refused.error, f"the replay of window {ticket.window} in {table} failed")
        raise refused.error(f"sink: {what}: {refused.message}") from None
    return Replaced(int(snapshot_id), int(conflicts), int(added), int(deleted))
