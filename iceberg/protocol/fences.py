"""Fence keys: the sink table properties that say which attempts, generations and epochs may still commit.

A fence is a number on the sink that only goes up. A commit carries its own number, and the sink's
commit requirement refuses it once the fence is above it (``iceberg/store/fences.py`` raises them,
``spark_jobs/sink/fenced_commit.py`` checks them at commit time).
"""

from __future__ import annotations


def fence_key(group: str, lease_id: str) -> str:
    """Sink table property holding the lowest attempt of a lease that may still commit."""
    return f"icegroup.fence.{group}.{lease_id}"


def replay_fence_key(group: str, window: str) -> str:
    """Sink table property holding the lowest replay generation of a window that may still commit."""
    return f"icegroup.replay.{group}.{window}"


def epoch_key(group: str) -> str:
    """Sink table property holding the group epoch that commits must carry."""
    return f"icegroup.epoch.{group}"
