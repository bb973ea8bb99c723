"""Transforms: loading a group's ``module:function`` and the ones icegroup ships."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from iceberg.errors import ConfigError
from iceberg.groups import resolve_transform

Transform = Callable[[DataFrame], DataFrame]


def load_transform(path: str) -> Transform:
    """Import ``package.module:function``; the error names the field and what was wrong."""
    try:
        return cast(Transform, resolve_transform(path))
    except ValueError as exc:
        raise ConfigError(f"transform: {exc}") from exc


def identity(df: DataFrame) -> DataFrame:
    """Pass rows through unchanged: the group only moves data, exactly once."""
    return df


def enrich_events(df: DataFrame) -> DataFrame:
    """The demo transform: keep the event, add its amount in cents and a priority flag."""
    return df.select(
        "event_id",
        "region",
        "event_ts",
        "amount",
        F.round(F.col("amount") * 100).cast("long").alias("amount_cents"),
        (F.col("amount") >= 90).alias("is_large"),
    )
