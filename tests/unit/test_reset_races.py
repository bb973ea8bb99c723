"""Two resets that plan the same epoch at once: one takes it, the other writes nothing (SQLite catalog, no Spark)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg import reset
from icegroup.iceberg.errors import RegistryConflict
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.sink_commit import reset_key
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.registry import load_state
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import consume_all


def test_a_reset_whose_epoch_another_reset_took_first_writes_nothing(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    append_batches(create_source(catalog, group.source), 3, 9)
    consume_all(catalog, group)
    before = load_state(catalog, group.name).state
    rival = json.dumps({"epoch": 1, "target": "--to-earliest"})
    planned = reset.plan_reset

    def rival_takes_the_epoch(*args: Any, **kwargs: Any) -> reset.ResetPlan:
        plan = planned(*args, **kwargs)
        raise_fences(
            catalog.load_table(group.sink), {epoch_key(group.name): plan.epoch}, also={reset_key(group.name): rival}
        )
        return plan

    monkeypatch.setattr(reset, "plan_reset", rival_takes_the_epoch)

    with pytest.raises(RegistryConflict, match="another reset \\(or a rebuild\\) took epoch 1 while this one planned"):
        reset.execute_reset(catalog, group, ResetTarget("shift", "-1"))

    sink = catalog.load_table(group.sink)
    assert sink.properties[reset_key(group.name)] == rival, "the marker is the reset's that took the epoch"
    assert load_state(catalog, group.name).state == before, "the registry is untouched"
    assert len(sink.scan().to_arrow()) == 27, "no output was deleted"
