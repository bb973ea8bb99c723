"""The group's lag and whether it has work, from the registry and the source's metadata alone."""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from iceberg.groups import GroupConfig
from iceberg.lag import has_work, lag_of
from iceberg.leader import tick
from iceberg.protocol.liveness import RunState
from tests.factories import append_batches, create_source
from tests.sink_commits import commit_lease


def test_has_work_follows_unplanned_commits_and_open_shards_until_everything_is_committed(
    catalog: Catalog, make_group: type[GroupConfig]
) -> None:
    group = make_group(max_borrowers=3)
    assert not has_work(catalog, group), "no source table: the tick names that, not this hint"
    source = create_source(catalog, group.source)
    assert not has_work(catalog, group), "an empty source and no registry"

    append_batches(source, 2, 30)
    assert has_work(catalog, group), "commits no tick planned yet"
    assert lag_of(catalog, group).rows == 60

    first = tick(catalog, group, lambda _: RunState.MISSING)
    assert has_work(catalog, group), "shards cut and leased, not committed"
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)
    tick(catalog, group, lambda _: RunState.SUCCEEDED)

    assert not has_work(catalog, group)
    assert lag_of(catalog, group).rows == 0
    append_batches(source, 1, 3)
    assert has_work(catalog, group), "a new commit after catching up"
