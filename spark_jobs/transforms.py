"""Transforms: loading a group's ``module:function`` for a Borrower, and the ones icegroup ships.

A transform is user Spark code, so it is loaded here, where Spark lives, and never by the durable
layer: ``iceberg/protocol/group.py`` checks only that the path is written as ``module:function``, and
``transform_paths.check_transforms`` checks that it exists when the groups load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.transform_paths import import_transform

Transform = Callable[[DataFrame], DataFrame]


def load_transform(path: str) -> Transform:
    """The transform a Borrower runs; the error names the field and what was wrong."""
    try:
        return cast(Transform, import_transform(path))
    except ValueError as exc:
        raise ConfigError(f"transform: {exc}") from exc


def identity(df: DataFrame) -> DataFrame:
    """Pass rows through unchanged: the group only moves data, exactly once."""
    return df


def enrich_events(df: DataFrame, large_from: float = 90.0) -> DataFrame:
    """The demo transform: keep the event, add its amount in cents and a priority flag."""
    return df.select(
        "event_id",
        "region",
        "event_ts",
        "amount",
        F.round(F.col("amount") * 100).cast("long").alias("amount_cents"),
        (F.col("amount") >= large_from).alias("is_large"),
    )


def enrich_events_v2(df: DataFrame) -> DataFrame:
    """The demo transform, corrected: an event is large from 50.00 on. `make demo` replays a window with it."""
    return enrich_events(df, large_from=50.0)
