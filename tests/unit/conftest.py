"""Fixtures the operator-verb tests share: a small group, and the command line pointed at it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.group import GroupConfig
from tests.factories import MakeGroup, append_batches, create_source, write_groups


@pytest.fixture
def group(catalog: Catalog, make_group: MakeGroup) -> GroupConfig:
    """A group over 3 streams whose first tick grants one lease of one shard."""
    built = make_group(shard_caps={"max_files": 1}, lease_max_shards=1, max_borrowers=1)
    append_batches(create_source(catalog, built.source), 2, 30)
    return built


@pytest.fixture
def cli(tmp_path: Path, lake_home: Path, group: GroupConfig, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The leading arguments of an ``icegroup`` call on this test's group and lakehouse."""
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    return ["--groups", str(write_groups(tmp_path / "groups.yaml", group))]
