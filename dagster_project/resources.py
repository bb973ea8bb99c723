"""The one resource runs need: the lakehouse, as pyiceberg catalog and as Spark session.

Ops, assets and sensors find it under a resource key the builder names (``icegroup`` for the
packaged location, the component's name otherwise), so two icegroup components on two lakes can
share one project.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import dagster as dg
from pydantic import Field
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.spark_jobs.session import get_session

DEFAULT_KEY = "icegroup"


class Lakehouse(Protocol):
    """What a run asks of the resource: the lakehouse config, its catalog, and a SparkSession on it."""

    def lakehouse(self) -> LakehouseConfig:
        """The resolved lakehouse config."""
        ...

    def catalog(self) -> Catalog:
        """A pyiceberg catalog handle."""
        ...

    def spark(self) -> SparkSession:
        """The process's SparkSession."""
        ...


class IcegroupResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # parametrizing it makes pydantic build a subclass
    """Opens the lakehouse from one config, so the Leader and the Borrower see the same tables."""

    lakehouse_config: str | None = Field(
        default=None,
        description="Path of a lakehouse YAML file; when unset, ICEGROUP_* environment variables and "
        "the embedded default (.lake/ under ICEGROUP_HOME) apply.",
    )

    def lakehouse(self) -> LakehouseConfig:
        """The resolved lakehouse config."""
        return load_lakehouse(Path(self.lakehouse_config) if self.lakehouse_config else None)

    def catalog(self) -> Catalog:
        """A pyiceberg catalog handle."""
        return self.lakehouse().catalog()

    def spark(self) -> SparkSession:
        """The process's SparkSession; in-process runs reuse a warm one."""
        return get_session(self.lakehouse())


class InlineLakehouse:
    """A lakehouse config given as values (a component's inline ``lakehouse``), not as a file.

    A plain object, not a configurable resource: its values may hold a database password, and
    Dagster shows a configurable resource's values in the UI.
    """

    def __init__(self, config: LakehouseConfig) -> None:
        """Keep the validated config."""
        self._config = config

    def lakehouse(self) -> LakehouseConfig:
        """The config as given."""
        return self._config

    def catalog(self) -> Catalog:
        """A pyiceberg catalog handle."""
        return self._config.catalog()

    def spark(self) -> SparkSession:
        """The process's SparkSession; in-process runs reuse a warm one."""
        return get_session(self._config)


def lakehouse_resource(lakehouse: Path | LakehouseConfig | None) -> IcegroupResource | dg.ResourceDefinition:
    """The resource for a lakehouse given as a file, as values, or left to the environment (None)."""
    if isinstance(lakehouse, LakehouseConfig):
        return dg.ResourceDefinition.hardcoded_resource(InlineLakehouse(lakehouse), "The lakehouse, given inline.")
    return IcegroupResource(lakehouse_config=str(lakehouse) if lakehouse else None)


def lakehouse_config_of(lakehouse: Path | LakehouseConfig | None) -> LakehouseConfig:
    """The config a resource made by ``lakehouse_resource(lakehouse)`` opens, read now."""
    return lakehouse if isinstance(lakehouse, LakehouseConfig) else load_lakehouse(lakehouse)


def lakehouse_of(resources: object, key: str) -> Lakehouse:
    """The lakehouse resource a run or a sensor evaluation was given under ``key``."""
    found: Lakehouse = getattr(resources, key)
    return found
