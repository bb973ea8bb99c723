"""The one resource runs need: the lakehouse, as pyiceberg catalog and as Spark session."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from spark_jobs.session import get_session


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
