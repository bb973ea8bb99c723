"""Transforms: importing a group's ``module:function``, and the ones icegroup ships.

A transform is user Spark code, so it is imported here, where Spark lives, and never by the
durable layer: ``iceberg/groups.py`` checks only that the path is written as ``module:function``.
``check_transforms`` imports every group's transform when the definitions load, so a typo still
fails at once, with an error naming the file, the group and the field.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import cast

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from iceberg.errors import ConfigError
from iceberg.groups import GroupConfig

Transform = Callable[[DataFrame], DataFrame]


def import_transform(path: str) -> Transform:
    """Import ``package.module:function``; a ``ValueError`` says what is wrong and how to fix it."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(
            f"{path!r}: module {module_name!r} cannot be imported ({type(exc).__name__}: {exc}); "
            "install it or fix the module path"
        ) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"{path!r}: module {module_name!r} has no function {attr!r}; fix the function name")
    return cast(Transform, function)


def load_transform(path: str) -> Transform:
    """The transform a Borrower runs; the error names the field and what was wrong."""
    try:
        return import_transform(path)
    except ValueError as exc:
        raise ConfigError(f"transform: {exc}") from exc


def check_transforms(groups: Iterable[GroupConfig], source: str) -> None:
    """Import every group's transform; problems of all groups are reported together.

    ``source`` names where the groups were defined (the YAML file), as in every other config error.
    """
    problems = []
    for group in groups:
        try:
            import_transform(group.transform)
        except ValueError as exc:
            problems.append(f"{source}: group {group.name!r}: transform: {exc}")
    if problems:
        raise ConfigError("\n".join(problems))


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
