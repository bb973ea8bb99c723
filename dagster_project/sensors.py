"""The Leader: one sensor per group, running one registry-CAS tick per evaluation."""

import dagster as dg

from dagster_project.assets import complete_events
from dagster_project.jobs import UnresolvedAssetJobDefinition
from dagster_project.resources import IcegroupResource
from dagster_project.run_observer import observe_runs, terminate_runs
from dagster_project.tags import TAG_ATTEMPT, TAG_EPOCH, TAG_GROUP, TAG_LEASE
from iceberg.errors import GroupStopped, RegistryConflict
from iceberg.groups import GroupConfig
from iceberg.leader import tick
from iceberg.protocol.shards import window_label
from iceberg.protocol.state import Lease


def run_request(group: GroupConfig, lease: Lease) -> dg.RunRequest:
    """One Borrower run per lease attempt; the run key makes a repeated launch of it a no-op."""
    return dg.RunRequest(
        run_key=f"{group.name}:{lease.lease_id}#{lease.attempt}",
        partition_key=window_label(lease.window_start_ms, group.replay_window),
        tags={
            TAG_GROUP: group.name,
            TAG_LEASE: lease.lease_id,
            TAG_EPOCH: str(lease.epoch),
            TAG_ATTEMPT: str(lease.attempt),
        },
    )


def leader_sensor(group: GroupConfig, job: UnresolvedAssetJobDefinition, sink_key: dg.AssetKey) -> dg.SensorDefinition:
    """The group's Leader: reconcile, re-grant dead leases, cut shards, grant leases, launch Borrowers.

    It also materializes the sink's partition of each window that became complete.
    """

    @dg.sensor(
        name=f"{group.name}_leader",
        job=job,
        minimum_interval_seconds=group.sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Leader of consumer group {group.name}: cuts shards of {group.source} and grants "
        f"leases to at most {group.max_borrowers} Borrower runs.",
    )
    def leader(context: dg.SensorEvaluationContext, icegroup: IcegroupResource) -> dg.SensorResult | dg.SkipReason:
        try:
            result = tick(icegroup.catalog(), group, observe_runs(context.instance, group.name))
        except RegistryConflict as exc:
            context.log.info(f"{group.name}: backing off: {exc}")
            return dg.SkipReason(f"another Leader committed first: {exc}")
        context.log.info(
            f"{group.name}: tick in {result.elapsed_ms:.0f} ms: {result.new_shards} new shards, "
            f"{len(result.committed)} committed, {result.regranted} re-granted, {len(result.launch)} to launch"
        )
        for run_id in terminate_runs(context.instance, group.name, result.terminate):
            context.log.warning(
                f"{group.name}: terminated run {run_id}: its Borrower went silent or ran past its deadline"
            )
        for letter in result.parked:
            context.log.warning(f"{group.name}: shard {letter.shard_id} is parked: {letter.error}")
        if result.stopped:
            raise GroupStopped(result.stop_message())
        events = complete_events(group, sink_key, result.complete)

        def skip(reason: str) -> dg.SensorResult | dg.SkipReason:
            return dg.SensorResult(asset_events=events, skip_reason=reason) if events else dg.SkipReason(reason)

        if not result.launch and result.paused:
            return skip(f"{group.name}: {result.pause_message()}")
        if not result.launch:
            state = "caught up" if result.caught_up else f"{len(result.state.leases)} leases in flight"
            return skip(f"{group.name}: nothing to launch ({state})")
        return dg.SensorResult(run_requests=[run_request(group, lease) for lease in result.launch], asset_events=events)

    return leader
