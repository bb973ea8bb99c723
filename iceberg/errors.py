"""Every error icegroup raises on purpose: each one names what is wrong and how to fix it.

They all derive from ``IcegroupError``, so the CLI's one handler prints any of them as
``icegroup: error: <message>`` and exits 2, and a Dagster run fails with the same message.
"""


class IcegroupError(Exception):
    """Base class for every error icegroup raises on purpose."""


class UsageError(IcegroupError):
    """A command-line argument names something that is not there (a group, a shard)."""


class ConfigError(IcegroupError):
    """A lakehouse or group config field is invalid; the message names the field and the fix."""


class CatalogUnavailable(IcegroupError):
    """The catalog database cannot be opened or read; the message names it, the cause and the remedy."""


class PlatformUnavailable(IcegroupError):
    """The catalog, storage or network failed under a lease: it tries again, and no shard is blamed."""


class SparkGone(IcegroupError):
    """The process's Spark driver JVM exited under a lease (out of memory, or killed): no try here can succeed."""


class SourceError(IcegroupError):
    """The source table cannot be consumed as configured (missing, non-append snapshot, expired)."""


class HistoryGap(SourceError):
    """Snapshots between a group's position and the head have expired; ``iceberg/history_gap.py`` plans across them."""

    def __init__(self, message: str, position: int | None = None) -> None:
        """``position`` is the group's planning cursor, whose snapshot its branch keeps (None: the table's start)."""
        super().__init__(message)
        self.position = position


class SourceBlocked(SourceError):
    """The group stopped at a source snapshot it cannot step over (upstream replay or reset, a delete): a state."""

    def __init__(
        self, message: str, snapshot_id: int | None = None, kind: str = "", remedy: str = "", followable: bool = False
    ) -> None:
        """``message`` is the whole story; ``kind`` and ``remedy`` are its short form.

        ``describe``, ``list`` and the Leader sensor's skip reason show the short form in one status
        line, until the snapshot is followed or skipped. Built from the message alone (unpickled, say),
        the status line is the whole story. ``followable``: an upstream replay, which a group with
        ``follow_upstream`` follows by itself.
        """
        super().__init__(message)
        self.snapshot_id = snapshot_id
        self.kind = kind
        self.remedy = remedy
        self.followable = followable

    def status(self) -> str:
        """One line for ``describe`` and ``list``: where the group stopped, and what moves it on."""
        if self.snapshot_id is None:
            return f"stopped: {self}"
        return f"stopped at source snapshot {self.snapshot_id}, {self.kind} ({self.remedy})"

    def ahead(self) -> str:
        """The same, for a group still running what comes before the stop."""
        if self.snapshot_id is None:
            return f"it stops next: {self}"
        return f"it stops next at source snapshot {self.snapshot_id}, {self.kind} ({self.remedy})"


class RegistryConflict(IcegroupError):
    """Another Leader committed the registry first; this tick's decisions are void."""


class NotCaughtUp(IcegroupError):
    """``consume --until-caught-up`` gave up waiting on leases held elsewhere; the CLI exits 3."""


class Interrupted(NotCaughtUp):
    """A consume stopped by a signal (SIGTERM, Ctrl-C) or a run termination; its leases were handed back."""


class GroupStopped(IcegroupError):
    """A poison shard stopped the group (``on_poison: stop``); it waits for ``icegroup redrive``."""


class SinkError(IcegroupError):
    """The sink cannot accept a Borrower's output."""


class StaleLease(IcegroupError):
    """The lease is no longer this run's: re-granted to a later attempt, or finished by others."""


class Fenced(SinkError):
    """The sink refused a commit: the lease was re-granted to a later attempt, or the group epoch moved."""


class AlreadyCommitted(SinkError):
    """The sink refused a commit because the shard is in it already: another attempt committed it."""


class StagedOutputGone(SinkError):
    """A shard's staged output left the sink's metadata before its publish (expired); nothing was committed."""


class PoisonShard(SinkError):
    """A shard failed ``max_deliver`` times; it is in the dead-letter table and this run stops."""


class ReplayConflict(IcegroupError):
    """Another replay of the same window holds it; this one did not start."""


class WindowMoved(SinkError):
    """Output of the window being replayed was committed after the replay planned it; plan again."""


class ReplayIncomplete(SourceError):
    """Some of a window's committed source data is gone; the window is not replaced with partial data."""


class ResetInterrupted(IcegroupError):
    """A reset raised the sink's epoch but did not commit the registry, and died; running it again completes it."""


class ResetInFlight(NotCaughtUp, RegistryConflict):
    """A live reset raised the sink's epoch and has not committed the registry yet: back off, run again soon."""


class LostRace(IcegroupError):
    """A try lost its compare-and-swap to another writer: ``iceberg/retry.py`` makes it again, then names the remedy."""


class RunFailed(IcegroupError):
    """A Dagster run failed for a reason icegroup did not foresee (exit 1); its traceback is in the command's log."""


class BorrowerOutdated(IcegroupError):
    """The registry is pinned to another filter or transform than this Borrower runs: it takes no lease and exits."""


class RehearsalCut(IcegroupError):
    """A warm Borrower took a lease while it rehearsed its lease path; the lease goes first."""
