"""The groups' state as Prometheus metrics, read fresh at every scrape from the catalog and the heartbeats.

Each scrape describes every group as ``icegroup describe`` does (``iceberg/describe.py``), so the
numbers are the ones the CLI shows, never a cache that outlived a crash. What only the Leader
sensor knows (how long its last tick took, when it ran) comes from ``leader_ticks``, which the
CLI reads from the Dagster instance. A group whose tables cannot be read is reported as down
(``icegroup_up 0``) with the error in the log, and the other groups are still reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, StateSetMetricFamily
from prometheus_client.registry import Collector
from pyiceberg.catalog import Catalog

from icegroup.iceberg.describe import GroupView, describe_group
from icegroup.iceberg.protocol.freshness import STATES, state_of
from icegroup.iceberg.protocol.group import GroupConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderTick:
    """The Leader sensor's last tick of a group: when Dagster recorded it, and how long the tick itself took."""

    at_s: float
    tick_s: float | None


class GroupCollector(Collector):
    """A Prometheus collector of every group's lag, rates, leases, dead letters, heartbeats and Leader ticks."""

    def __init__(
        self,
        catalog: Callable[[], Catalog],
        groups: Mapping[str, GroupConfig],
        leader_ticks: Callable[[], Mapping[str, LeaderTick]] = dict,
    ) -> None:
        """Report ``groups`` on the catalog that ``catalog`` opens, and the Leader ticks ``leader_ticks`` finds."""
        self.catalog = catalog
        self.groups = groups
        self.leader_ticks = leader_ticks

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | StateSetMetricFamily]:
        """Describe every group now and yield its metric families."""
        started = time.perf_counter()
        views: dict[str, GroupView | None] = dict.fromkeys(self.groups)
        try:
            catalog = self.catalog()
        except Exception as exc:  # every group is down, and says so
            log.warning("metrics: the catalog cannot be opened: %s", exc)
        else:
            for name, group in self.groups.items():
                try:
                    views[name] = describe_group(catalog, group)
                except Exception as exc:  # one unreadable group must not hide the others
                    log.warning("metrics: group %s not described: %s", name, exc)
        try:
            ticks = self.leader_ticks()
        except Exception as exc:  # the Dagster instance away: the groups' own metrics still stand
            log.warning("metrics: the Leader's ticks cannot be read: %s", exc)
            ticks = {}
        yield from families(views, ticks, time.time())
        took = GaugeMetricFamily("icegroup_scrape_duration_seconds", "Time to describe every group for this scrape.")
        took.add_metric([], time.perf_counter() - started)
        yield took


def families(
    views: Mapping[str, GroupView | None], ticks: Mapping[str, LeaderTick], now_s: float
) -> Iterator[GaugeMetricFamily | CounterMetricFamily | StateSetMetricFamily]:
    """The metric families of the groups' views (None: the group could not be read) as of ``now_s``."""
    g = ["group"]
    gs = ["group", "stream"]
    up = GaugeMetricFamily("icegroup_up", "1 if the group's tables could be read at this scrape, else 0.", labels=g)
    state = StateSetMetricFamily("icegroup_state", "Where the group stands, as icegroup describe says.", labels=g)
    lag_snapshots = GaugeMetricFamily(
        "icegroup_lag_snapshots", "Source snapshots not committed, once for each stream they hold rows of.", labels=g
    )
    lag_rows = GaugeMetricFamily("icegroup_lag_rows", "Source rows the group has not committed.", labels=g)
    lag_age = GaugeMetricFamily(
        "icegroup_lag_age_seconds", "Age of the oldest source commit the group has not consumed; 0 when none.", labels=g
    )
    stream_lag = GaugeMetricFamily("icegroup_stream_lag_rows", "Source rows of one stream not committed.", labels=gs)
    committed = CounterMetricFamily(
        "icegroup_committed_rows", "Source rows of the stream the group has consumed and committed.", labels=gs
    )
    rate = GaugeMetricFamily(
        "icegroup_stream_rate_rows_per_second", "The stream's rows per second over its recent commits.", labels=gs
    )
    leases = GaugeMetricFamily("icegroup_leases_in_flight", "Leases granted and not yet committed.", labels=g)
    pending = GaugeMetricFamily("icegroup_pending_shards", "Shards planned and not yet committed.", labels=g)
    letters = GaugeMetricFamily("icegroup_dead_letters", "Poison shards parked or stopping the group.", labels=g)
    beat_age = GaugeMetricFamily(
        "icegroup_heartbeat_age_seconds", "Time since the holder of a lease in flight last beat.", labels=[*g, "lease"]
    )
    tick = GaugeMetricFamily("icegroup_leader_tick_seconds", "How long the Leader's last tick took.", labels=g)
    tick_age = GaugeMetricFamily(
        "icegroup_leader_last_tick_age_seconds", "Time since the Leader sensor last ticked.", labels=g
    )
    for name, view in sorted(views.items()):
        up.add_metric([name], 0 if view is None else 1)
        last = ticks.get(name)
        if last is not None:
            tick_age.add_metric([name], max(0.0, now_s - last.at_s))
            if last.tick_s is not None:
                tick.add_metric([name], last.tick_s)
        if view is None:
            continue
        now = state_of(view.status)
        state.add_metric([name], {s: s == now for s in STATES})
        lag_snapshots.add_metric([name], view.lag_snapshots)
        lag_rows.add_metric([name], view.lag_rows)
        lag_age.add_metric([name], view.lag_age_s or 0.0)
        leases.add_metric([name], view.leases_in_flight)
        pending.add_metric([name], view.pending_shards)
        letters.add_metric([name], view.dead_letters)
        for stream in view.streams:
            stream_lag.add_metric([name, stream.stream], stream.lag_rows)
            committed.add_metric([name, stream.stream], stream.committed_rows)
            if stream.rate_rows_s is not None:
                rate.add_metric([name, stream.stream], stream.rate_rows_s)
        for hold in view.holds:
            if hold.last_beat_ms is not None:
                age = max(0.0, view.as_of_ms - hold.last_beat_ms) / 1000
                beat_age.add_metric([name, f"{hold.lease_id}#{hold.attempt}"], age)
    yield from (up, state, lag_snapshots, lag_rows, lag_age, stream_lag, committed, rate, leases, pending, letters)
    yield from (beat_age, tick, tick_age)
