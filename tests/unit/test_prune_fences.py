"""Pruning retired leases' fences is best effort: two Leaders pruning the same fence at once both go on."""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.store.fences import prune_fences, raise_fences
from tests.factories import MakeGroup
from tests.sink_commits import create_sink


def test_a_fence_another_leader_pruned_meanwhile_is_no_error(catalog: Catalog, make_group: MakeGroup) -> None:
    """Found by ``make chaos``: the second prune failed its Leader's tick with ``KeyError``."""
    group = make_group()
    sink = create_sink(catalog, group)
    retired = fence_key(group.name, "4fbfd854aa1d5869")
    raise_fences(sink, {retired: 1})
    stale = catalog.load_table(group.sink)  # the other Leader's view, from before the prune

    assert prune_fences(sink, group.name, live=[]) == [retired]
    assert prune_fences(stale, group.name, live=[]) == []

    assert retired not in catalog.load_table(group.sink).properties
