"""The lakehouse config's sections beside the catalog: a Borrower's Spark sizing, an S3 warehouse, OpenLineage.

Each is a small model of its own, validated where it is read, so ``lakehouse.py`` holds the
catalog and what both engines are built from.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class OpenLineageSettings(BaseModel):
    """Where lease, replay, reset and expiry runs send their OpenLineage events; absent, none are sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="icegroup", description="OpenLineage job namespace of icegroup's runs.")
    transport: dict[str, Any] | None = Field(
        default=None,
        description="The OpenLineage client's transport, as openlineage.yml writes it: {type: console}, "
        "{type: file, log_file_path: ..., append: true} or {type: http, url: http://marquez:5000}. "
        "Unset: the client's own discovery (OPENLINEAGE_CONFIG, OPENLINEAGE_URL, openlineage.yml).",
    )


class SparkSettings(BaseModel):
    """How big a Borrower's Spark application is; the defaults fit the embedded stack on one machine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shuffle_partitions: int = Field(
        default=4, ge=1, description="spark.sql.shuffle.partitions: a shard is small, so a few partitions suffice."
    )
    executor_memory: str | None = Field(
        default=None, description="spark.executor.memory per executor on a cluster, e.g. 2g; unset: Spark's 1g."
    )
    executor_cores: int | None = Field(
        default=None, ge=1, description="spark.executor.cores: cores per executor; unset: Spark's default."
    )
    cores_max: int | None = Field(
        default=None,
        ge=1,
        description="spark.cores.max: the cores one Borrower may take from a standalone cluster. Unset, the first "
        "Borrower takes every free core and the next waits; set it so max_borrowers Borrowers fit the cluster.",
    )
    driver_memory: str | None = Field(
        default=None, description="spark.driver.memory of the Borrower's own process, e.g. 2g; unset: Spark's 1g."
    )
    python: str | None = Field(
        default=None,
        description="The Python that executors run UDFs with, as a path on their hosts, with the driver's Python "
        "version and pyspark; the Borrower passes it as PYSPARK_PYTHON when it starts Spark. Unset: "
        "PYSPARK_PYTHON, else python3.",
    )

    def conf(self) -> dict[str, str]:
        """These settings as Spark configuration keys; unset ones are left to Spark."""
        conf = {"spark.sql.shuffle.partitions": str(self.shuffle_partitions)}
        optional = {
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": self.executor_cores,
            "spark.cores.max": self.cores_max,
            "spark.driver.memory": self.driver_memory,
        }
        conf.update({key: str(value) for key, value in optional.items() if value is not None})
        return conf


class S3Settings(BaseModel):
    """How both engines reach an ``s3://`` warehouse. Credentials are never here: see ``LakehouseConfig.s3``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = Field(
        default=None,
        description="S3 endpoint URL of an S3-compatible store, e.g. http://127.0.0.1:9000; unset: AWS.",
    )
    region: str | None = Field(
        default=None,
        description="The bucket's region; unset: from the AWS chain (AWS_REGION, the profile), or looked up.",
    )
    path_style_access: bool = Field(
        default=False,
        description="Address buckets as endpoint/bucket instead of bucket.endpoint; most S3-compatible servers "
        "(MinIO, moto, Ceph) need true.",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not a URL; write it as http://host:port or https://host")
        return value
