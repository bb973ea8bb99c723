"""Transforms: loading a group's ``module:function`` and the ones icegroup ships."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from iceberg.errors import ConfigError

Transform = Callable[[DataFrame], DataFrame]


def load_transform(path: str) -> Transform:
    """Import ``package.module:function``; the error names the field and what was wrong."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"transform: cannot import module {module_name!r} ({exc}); check the import path") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"transform: {module_name!r} has no function {attr!r}; check the import path")
    return function


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
