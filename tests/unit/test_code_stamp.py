"""A Borrower run's code stamp: it changes with the transform's body and the group's settings, and only then."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from icegroup.dagster_project.runs.warm import code_stamp
from icegroup.iceberg.protocol.group import GroupConfig


def test_the_stamp_changes_with_the_transform_body_and_any_setting_not_with_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "stamped_transforms.py"
    module.write_text("def clean(df):\n    return df\n")
    group = GroupConfig(name="g", source="a.b", sink="a.c", transform="stamped_transforms:clean")
    first = code_stamp(group)
    again = code_stamp(GroupConfig.model_validate(group.model_dump()))

    module.write_text("def clean(df):\n    return df.limit(1)\n")
    body_changed = code_stamp(group)

    assert first == again != body_changed
    assert group.config_hash == GroupConfig.model_validate(group.model_dump()).config_hash, "the hash sees no body"
    cold = GroupConfig.model_validate({**group.model_dump(), "warm_borrowers": 0})
    assert code_stamp(cold) != body_changed, "lowering warm_borrowers ends the warm run too"
    sys.modules.pop("stamped_transforms", None)
