"""Transforms are imported where Spark lives, and a bad path still fails when the definitions load."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from icegroup.dagster_project.cli import main
from icegroup.dagster_project.definitions import defs
from icegroup.dagster_project.group_files import ENV_GROUPS, load_checked_groups
from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.transform_paths import import_transform
from icegroup.spark_jobs.transforms import identity, load_transform


def groups_yaml(tmp_path: Path, transform: str) -> Path:
    """A groups file with one group using ``transform``."""
    path = tmp_path / "groups.yaml"
    path.write_text(f"groups:\n  - {{name: orders, source: demo.events, sink: demo.out, transform: '{transform}'}}\n")
    return path


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        pytest.param(
            "no_such_module_xyz:f",
            "transform: 'no_such_module_xyz:f': module 'no_such_module_xyz' cannot be imported (ModuleNotFoundError",
            id="module-missing",
        ),
        pytest.param(
            "icegroup.spark_jobs.transforms:nope",
            "transform: 'icegroup.spark_jobs.transforms:nope': module 'icegroup.spark_jobs.transforms' "
            "has no function 'nope'; "
            "fix the function name",
            id="function-missing",
        ),
        pytest.param(
            "icegroup.iceberg.config.groups:NAME_RE",
            "has no function 'NAME_RE'",
            id="not-a-function",
        ),
    ],
)
def test_a_bad_transform_fails_when_the_groups_load(tmp_path: Path, transform: str, expected: str) -> None:
    path = groups_yaml(tmp_path, transform)

    with pytest.raises(ConfigError) as info:
        load_checked_groups(path)

    assert str(info.value).startswith(f"{path}: group 'orders': ")
    assert expected in str(info.value)


def test_the_code_location_fails_to_load_with_the_same_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_GROUPS, str(groups_yaml(tmp_path, "no_such_module_xyz:f")))

    with pytest.raises(ConfigError, match="install it or fix the module path"):
        dg.Definitions.merge(defs())


def test_the_cli_prints_the_error_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEGROUP_HOME", str(tmp_path))
    path = groups_yaml(tmp_path, "icegroup.spark_jobs.transforms:nope")

    assert main(["--groups", str(path), "list"]) == 2

    err = capsys.readouterr().err
    assert err.startswith("icegroup: error: ")
    assert "group 'orders': transform: 'icegroup.spark_jobs.transforms:nope'" in err
    assert "fix the function name" in err


def test_every_problem_is_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(
        "groups:\n"
        "  - {name: a, source: demo.events, sink: demo.a, transform: 'nope_a:f'}\n"
        "  - {name: b, source: demo.events, sink: demo.b, transform: 'icegroup.spark_jobs.transforms:identity'}\n"
        "  - {name: c, source: demo.events, sink: demo.c, transform: 'nope_c:f'}\n"
    )

    with pytest.raises(ConfigError) as info:
        load_checked_groups(path)

    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert "group 'a'" in lines[0]
    assert "group 'c'" in lines[1]


def test_import_transform_returns_the_function() -> None:
    assert import_transform("icegroup.spark_jobs.transforms:identity") is identity


def test_load_transform_raises_config_error_naming_the_field() -> None:
    assert load_transform("icegroup.spark_jobs.transforms:identity") is identity
    with pytest.raises(
        ConfigError, match=r"^transform: 'icegroup.spark_jobs.transforms:nope': .*fix the function name"
    ):
        load_transform("icegroup.spark_jobs.transforms:nope")


def test_a_module_whose_own_import_fails_is_refused_when_the_groups_load_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_transform_xyz.py").write_text(
        "import no_such_dependency_xyz\n\n\ndef reshape(df):\n    return df\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(ConfigError) as info:
        load_checked_groups(groups_yaml(tmp_path, "broken_transform_xyz:reshape"))

    message = str(info.value)
    assert "group 'orders': transform: 'broken_transform_xyz:reshape'" in message
    assert "ModuleNotFoundError: No module named 'no_such_dependency_xyz'" in message


def test_a_module_level_udf_typed_by_a_string_is_refused_and_one_typed_by_an_object_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    header = "from pyspark.sql import functions as F\nfrom pyspark.sql.types import LongType\n\n\n"
    (tmp_path / "udf_string_xyz.py").write_text(
        header + '@F.udf("long")\ndef cents(x):\n    return x\n\n\ndef reshape(df):\n    return df\n'
    )
    (tmp_path / "udf_object_xyz.py").write_text(
        header + "@F.udf(LongType())\ndef cents(x):\n    return x\n\n\ndef reshape(df):\n    return df\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(ConfigError, match=r"udf_string_xyz\.cents is a module-level UDF .* @F\.udf\(LongType\(\)\)"):
        load_checked_groups(groups_yaml(tmp_path, "udf_string_xyz:reshape"))
    load_checked_groups(groups_yaml(tmp_path, "udf_object_xyz:reshape"))
