"""A consumer group's definition: the validated ``GroupConfig`` model, with no file or catalog behind it.

Validation happens when a group is built (``iceberg/config/groups.py`` reads them from YAML), so a bad
group never reaches a Leader tick or a Spark job. Every error names the group, the field and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from icegroup.iceberg.protocol.durations import format_duration, parse_duration

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
TABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
TRANSFORM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
CRON_FIELD_RE = re.compile(r"^[0-9*/,\-A-Za-z?]+$")
START_HELP = "allowed: earliest, latest, {snapshot_id: <id>} or {timestamp: <ISO-8601>}"


class StartAtSnapshot(BaseModel):
    """Start with this source snapshot, inclusive."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    snapshot_id: int = Field(description="First source snapshot to consume (inclusive).")


class StartAtTimestamp(BaseModel):
    """Start with the first source snapshot committed at or after this time."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    timestamp: datetime = Field(description="ISO-8601 time; snapshots committed at or after it are consumed.")

    @field_validator("timestamp")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)


StartPosition = Literal["earliest", "latest"] | StartAtSnapshot | StartAtTimestamp


class ShardCaps(BaseModel):
    """Upper bounds for one shard; a shard is closed before a snapshot would push it past any cap."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_files: int = Field(default=64, ge=1, description="Data files per shard.")
    max_bytes: int = Field(default=256 * 1024 * 1024, ge=1, description="Data file bytes per shard.")
    max_rows: int = Field(default=5_000_000, ge=1, description="Source rows per shard.")


# icegroup's built-in transforms, and the path groups files named them by before the import name icegroup.
OWN_TRANSFORMS = "icegroup.spark_jobs.transforms:"
LEGACY_TRANSFORMS = "spark_jobs.transforms:"


class GroupConfig(BaseModel):
    """One consumer group: what it reads, how it transforms, where it writes, and how it shares work."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Group name: lower case letters, digits and _, starting with a letter.")
    source: str = Field(description="Source table as namespace.table in the lakehouse catalog.")
    sink: str = Field(description="Sink table as namespace.table; created by the first Borrower.")
    transform: str = Field(
        default="icegroup.spark_jobs.transforms:identity",
        description="Import path module:function of a DataFrame -> DataFrame transform; imported where Spark "
        "runs (spark_jobs/transforms.py), and checked when the definitions load.",
    )
    filter: str | None = Field(
        default=None,
        description="Optional row filter in Iceberg expression syntax, e.g. \"region = 'eu' and amount > 0\".",
    )
    max_borrowers: int = Field(
        default=2, ge=1, description="Leases in flight at once, and the most Borrower runs the Leader keeps."
    )
    leases_per_borrower: int = Field(
        default=2,
        ge=1,
        description="Leases one warm Borrower run executes at once, in threads of one SparkSession; the Leader "
        "starts another Borrower run only for waiting leases beyond that. A window's streams are spread over "
        "max_borrowers / leases_per_borrower leases (the runs the slots make), so one run reads them in one Spark job.",
    )
    borrower_idle_s: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="Seconds a Borrower run started for work (beyond warm_borrowers) waits for a new lease before "
        "it exits; a longer wait keeps Spark warm for the next source commit, a shorter one frees the run sooner.",
    )
    warm_borrowers: int = Field(
        default=1,
        ge=0,
        description="Borrower runs the Leader keeps up even with nothing to do, Spark started, so a new lease "
        "finds a session already up; each holds a run slot and a driver for good. 0: start Borrowers only for "
        "waiting leases (a cold start per burst), each exiting after borrower_idle_s.",
    )
    borrower_rehearsal_rows: int = Field(
        default=1_000_000,
        ge=0,
        le=100_000_000,
        description="Synthetic rows a warm Borrower, once idle, runs through its lease path (read, transform, lineage "
        "columns, staged write) in a scratch table on a temporary folder, so that its JVM has compiled that path "
        "before a backlog comes: once per Borrower run, and not if a lease of its own has read this many source rows "
        "first. Nothing of the lake is written, and a lease cuts it short. 0: never.",
    )
    shard_caps: ShardCaps = Field(default_factory=ShardCaps, description="Size caps of one shard.")
    lease_max_shards: int = Field(
        default=64,
        ge=1,
        description="Shards granted in one lease at most. Each lease pays a fixed cost (a grant, a Spark job, a fenced "
        "commit, the registry and lineage writes), and a stream is held by one lease at a time, so small leases "
        "serialize those costs: 3,000 snapshots of 300 rows took 10 leases and 36.3 s at 16, 4 leases and 30.6 s at "
        "64. commit_batch_rows still bounds each job and commit of a lease of large shards. A transform that "
        "aggregates unions one aggregation per shard in a lease's job, and took 1.14x longer at 64 there: 16 suits it.",
    )
    commit_batch_rows: int = Field(
        default=100_000_000,
        ge=0,
        description="Consecutive shards of a lease with this many source rows in all are read in one Spark job and "
        "published in one sink commit. The default holds twenty full shards (shard_caps.max_rows 5M each), or a "
        "whole lease of 64 shards that average under 1.56M rows, since each job pays a fixed cost and a last wave of "
        "tasks "
        "with cores idle: W1 at 10x (50.4M rows) took 23.4 s as one job against 27.7 s as six of 8.4M under a 10M "
        "bound (a plain job 19.8 s). A Borrower killed mid-batch redoes the whole batch, a stopped one finishes it "
        "first, and a batch that fails is delivered again shard by shard: lower it to bound all three. 0 commits "
        "every shard on its own.",
    )
    source_row_ids: bool = Field(
        default=True,
        description="On a format-v3 source (Iceberg 1.10 or later), each sink row carries its source row's own "
        "_row_id as _ig_row, kept through the source's compaction, so lineage names the source row and not only "
        "its file; it costs a shard 0.14x to 0.3x of a plain write (results/row_lineage.json). false leaves the "
        "column out.",
    )
    lease_timeout_s: int = Field(
        default=1800,
        ge=10,
        description="Seconds after which a granted lease is re-granted to a new run even though its holder still "
        "beats: the bound for a Borrower that is alive but stuck. It moves on while the lease commits or its Spark "
        "tasks complete (a renewal). A dead Borrower is noticed by session_timeout_s.",
    )
    session_timeout_s: int = Field(
        default=30,
        ge=5,
        le=3600,
        description="Seconds without a heartbeat after which a Borrower counts as dead and its leases are "
        "re-granted (at the next Leader tick); Borrowers beat every third of it. Kafka's session timeout.",
    )
    sensor_interval_s: int = Field(
        default=5,
        ge=1,
        le=3600,
        description="Seconds between the Leader sensor's ticks: how soon a new source snapshot is noticed. An "
        "idle tick reads the registry, the source's and the sink's heads and the heartbeats (about 15 ms). "
        "Dagster's sensor daemon evaluates sensors every 5 s: the Leader ticks at the first of those loops at least "
        "this many seconds less 2 after its last tick, so 5 ticks every 5 s and 6 to 10 every 10 s.",
    )
    start: StartPosition = Field(default="earliest", description=f"Where a new group starts; {START_HELP}.")
    non_append: Literal["fail", "skip"] = Field(
        default="fail",
        description="What to do with overwrite/delete source snapshots: fail (stop with an error) or skip.",
    )
    replay_window: Literal["hour", "day"] = Field(
        default="day", description="Width of the sink's time partitions, by source commit time."
    )
    window_start: date = Field(
        default=date(2025, 1, 1),
        description="First day of the sink's partitions; no source commit may be older. Left unset, the Dagster "
        "definitions use the day of the source's first commit (a start timestamp's day; today for a source with no "
        "commit yet), read from the catalog when they load; the default applies only if the catalog cannot be read.",
    )
    schedule: str | None = Field(
        default=None,
        description="Cron expression; when set, the group consumes until caught up on this schedule "
        "instead of on every Leader sensor tick.",
    )
    max_pending_shards: int = Field(
        default=1000,
        ge=1,
        description="Planning waits while this many shards are cut and not committed, so the registry stays "
        "bounded however far the group is behind.",
    )
    max_snapshots_per_tick: int = Field(
        default=500, ge=1, description="Source snapshots one Leader tick plans at most, to keep ticks short."
    )
    max_deliver: int = Field(
        default=3,
        ge=1,
        description="Times a Borrower tries a shard whose read or transform fails before the shard is poison.",
    )
    deliver_backoff_s: float = Field(
        default=2.0, ge=0, le=600, description="Wait before the second try of a failing shard; doubles per try."
    )
    on_poison: Literal["stop", "park", "isolate"] = Field(
        default="stop",
        description="A poison shard either stops the group (stop) or is parked in the dead-letter table while "
        "the other streams go on (park); both wait for `icegroup redrive`. With isolate, the rows it fails on "
        "are found by bisection and go to the dead-row table, the rest of the shard commits and the stream goes "
        "on; `icegroup redrive` replays those rows after a fix. A shard whose rows cannot be isolated stops.",
    )
    max_isolated_rows: int = Field(
        default=100,
        ge=1,
        description="With on_poison: isolate, a shard with more failing rows than this stops the group as a whole "
        "poison shard: so many failures are more likely a broken transform than bad rows.",
    )

    on_change: Literal["fail", "continue"] = Field(
        default="fail",
        description="What the Leader does when filter or transform changed since the sink's output was made: "
        "fail (stop, naming the choices: a new group name, or on_change: continue) or continue (record the "
        "change in the registry and go on; earlier output stays as it was made).",
    )

    follow_upstream: bool = Field(
        default=False,
        description="When the source (another group's sink) is replayed upstream, replay this group's windows that "
        "consumed the replaced rows by itself and go on, as `icegroup replay GROUP --follow-upstream --execute` "
        "does; false: the group stops at the replay until that command is run.",
    )

    replay_retention: timedelta = Field(
        default=timedelta(days=7),
        description="How far back `icegroup expire` keeps the source's snapshots for this group, besides all it "
        "has not consumed yet: the horizon of resets by time or snapshot. Like 30d, 12h or P1DT12H.",
    )
    inactive_after: timedelta = Field(
        default=timedelta(days=30),
        description="The group's registration on its source lapses when its Leader has not ticked for this long: "
        "`icegroup expire` in another code location stops keeping history for it. Like 30d.",
    )

    lag_warn_after: timedelta = Field(
        default=timedelta(minutes=30),
        description="The sink's lag check warns once the oldest source commit the group has not consumed is older "
        "than this. Like 30m, 2h.",
    )
    lag_error_after: timedelta = Field(
        default=timedelta(hours=2),
        description="... and fails with an error past this, at least lag_warn_after. A stopped group fails it at "
        "once, whatever its lag, naming the command that moves it on. Like 2h, 1d.",
    )

    retire_streams_after: timedelta = Field(
        default=timedelta(days=1),
        description="A stream (source partition) with nothing pending that has committed nothing for this long is "
        "folded out of the registry, so a table partitioned by day keeps the registry of its live days only. Its "
        "counts stay in the group's totals; new data in it starts it again from the planning cursor. Like 1d.",
    )

    @field_validator(
        "replay_retention", "inactive_after", "retire_streams_after", "lag_warn_after", "lag_error_after", mode="before"
    )
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError("use lower case letters, digits and _, starting with a letter (max 63)")
        return value

    @field_validator("source", "sink")
    @classmethod
    def _table(cls, value: str) -> str:
        if not TABLE_RE.match(value):
            raise ValueError(f"{value!r} is not namespace.table; write it like demo.events")
        return value

    @field_validator("transform")
    @classmethod
    def _transform(cls, value: str) -> str:
        if not TRANSFORM_RE.match(value):
            raise ValueError(f"{value!r} is not an import path; write it as package.module:function")
        if value.startswith(LEGACY_TRANSFORMS):  # a groups file written before the import name icegroup
            return OWN_TRANSFORMS + value.removeprefix(LEGACY_TRANSFORMS)
        return value

    @field_validator("filter")
    @classmethod
    def _filter(cls, value: str | None) -> str | None:
        if value is not None:
            parse_row_filter(value)
        return value

    @field_validator("start", mode="before")
    @classmethod
    def _start(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("earliest", "latest"):
            raise ValueError(f"{value!r} is not a start position; {START_HELP}")
        if isinstance(value, dict) and set(value) not in ({"snapshot_id"}, {"timestamp"}):
            raise ValueError(f"{value!r} is not a start position; {START_HELP}")
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is not None:
            fields = value.split()
            if len(fields) != 5 or not all(CRON_FIELD_RE.match(f) for f in fields):
                raise ValueError(f"{value!r} is not a 5-field cron expression such as '0 2 * * *'")
        return value

    @model_validator(mode="after")
    def _sink_is_not_source(self) -> GroupConfig:
        if self.sink.lower() == self.source.lower():
            raise ValueError("sink: must differ from source, or the group would consume its own output")
        return self

    @model_validator(mode="after")
    def _warm_within_max(self) -> GroupConfig:
        if self.warm_borrowers > self.max_borrowers:
            raise ValueError(
                f"warm_borrowers: {self.warm_borrowers} is more than max_borrowers {self.max_borrowers}; "
                "lower warm_borrowers or raise max_borrowers"
            )
        return self

    @model_validator(mode="after")
    def _lag_bounds_in_order(self) -> GroupConfig:
        if self.lag_error_after < self.lag_warn_after:
            raise ValueError(
                f"lag_error_after: {format_duration(self.lag_error_after)} is shorter than lag_warn_after "
                f"{format_duration(self.lag_warn_after)}; make it at least as long, or shorten lag_warn_after"
            )
        return self

    @property
    def config_hash(self) -> str:
        """16 hex characters over the settings that decide what the output is: filter and transform.

        The transform counts by its import path; a changed body under the same path is not seen.
        """
        # icegroup's own transforms count by the path they had before the import name icegroup, so a
        # group's hash, pinned in its registry, does not change with the package's name.
        transform = self.transform
        if transform.startswith(OWN_TRANSFORMS):
            transform = LEGACY_TRANSFORMS + transform.removeprefix(OWN_TRANSFORMS)
        pinned = json.dumps({"filter": self.filter, "transform": transform}, sort_keys=True)
        return hashlib.sha256(pinned.encode()).hexdigest()[:16]

    @property
    def row_filter(self) -> BooleanExpression | None:
        """The filter as a pyiceberg expression."""
        return parse_row_filter(self.filter) if self.filter else None


def parse_row_filter(text: str) -> BooleanExpression:
    """Parse a row filter, turning the parser's error into one that says what syntax is expected.

    pyiceberg's parser is imported here, not with the module: a plain Spark job beside icegroup
    builds its session from icegroup's settings, and those never parse a filter.
    """
    from pyiceberg.expressions.parser import parse as parse_filter

    try:
        return parse_filter(text)
    except Exception as exc:
        reason = str(exc).splitlines()[0][:160]
        raise ValueError(
            f"{text!r} does not parse ({reason}); use Iceberg expression syntax such as "
            "\"region = 'eu' and amount > 10\""
        ) from exc
