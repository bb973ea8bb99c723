"""Following upstream replays by itself: what a group with ``follow_upstream: true`` does at a replay of its source.

The same steps as ``icegroup replay GROUP --follow-upstream --execute``: plan which of the group's
windows consumed the rows each upstream replay replaced (``iceberg/cascade.py``), replay those
windows from the new rows, then record the replays as followed, so the Leader steps over them.
A replay run that fails raises before anything is recorded: the group still stops at the replay,
and the next try starts over. A replay the group cannot follow yet (it has not consumed up to it)
is left for later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from icegroup.iceberg.cascade import plan_follows, record_follows
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.spark_jobs.replay import ReplayReport, replay_window


@dataclass
class FollowReport:
    """The upstream replays a group followed, and the replays of its own windows that took."""

    followed: list[int] = field(default_factory=list)
    replays: list[ReplayReport] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)

    def line(self, group: str) -> str:
        """One line for the log and the CLI."""
        windows = ", ".join(r.window for r in self.replays) or "no window"
        said = f"group {group}: followed {len(self.followed)} upstream replays, replaying {windows}"
        return said + (f"; waits for {'; '.join(self.waiting)}" if self.waiting else "")


def follow_upstream(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    run_id: str | None = None,
    progress: Callable[[str], None] = print,
) -> FollowReport:
    """Replay the windows of ``group`` that the upstream replays it can follow now replaced, then record them."""
    catalog = lakehouse.catalog()
    plans = plan_follows(catalog, group)
    ready = [p for p in plans if p.ready]
    report = FollowReport(
        waiting=[
            f"replay {p.replay.snapshot_id} ("
            + ("the group has not consumed up to it yet" if p.unconsumed else "not every replaced commit is known")
            + ")"
            for p in plans
            if not p.ready
        ]
    )
    for window in sorted({w for p in ready for w in p.windows}):
        report.replays.append(replay_window(spark, lakehouse, group, window, run_id=run_id, progress=progress))
    record_follows(catalog, group, {p.replay.snapshot_id for p in ready})
    report.followed = sorted(p.replay.snapshot_id for p in ready)
    progress(report.line(group.name))
    return report
