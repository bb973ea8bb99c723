"""One error module: every error the product raises lives in iceberg/errors.py, and the CLI handles them all."""

from __future__ import annotations

import argparse
import ast
import inspect

import pytest

from icegroup.dagster_project.cli import commands as cli
from icegroup.iceberg import errors
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import IcegroupError
from icegroup.iceberg.protocol.group import GroupConfig
from tests.conftest import repo_root

PACKAGES = ("iceberg", "spark_jobs", "dagster_project", "infra")
ERRORS = [
    obj
    for _, obj in inspect.getmembers(errors, inspect.isclass)
    if issubclass(obj, Exception) and obj.__module__ == errors.__name__
]


def exception_classes_outside_the_error_module() -> list[str]:
    """Classes in the product packages that derive from something named like an exception."""
    found = []
    for package in PACKAGES:
        for path in sorted((repo_root() / package).rglob("*.py")):
            if path == repo_root() / "iceberg" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [ast.unparse(base) for base in node.bases]
                    if any(b.endswith(("Error", "Exception", "Conflict")) or b in errors.__dict__ for b in bases):
                        found.append(f"{path.relative_to(repo_root())}:{node.lineno} {node.name}({', '.join(bases)})")
    return found


def test_no_error_class_is_defined_outside_iceberg_errors() -> None:
    assert exception_classes_outside_the_error_module() == []


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.__name__)
def test_every_error_derives_from_icegroup_error_and_has_a_one_line_docstring(error: type[Exception]) -> None:
    assert issubclass(error, IcegroupError)
    doc = error.__doc__ or ""
    assert doc.strip()
    assert "\n" not in doc.strip()


def test_the_known_errors_are_all_there() -> None:
    names = {error.__name__ for error in ERRORS}

    assert {"GroupStopped", "StaleLease", "PoisonShard", "Fenced", "AlreadyCommitted", "ConfigError"} <= names


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.__name__)
@pytest.mark.usefixtures("catalog")  # the lake exists, whichever test ran before in this process
def test_the_cli_prints_any_of_them_with_its_remedy_and_exits_non_zero(
    error: type[Exception],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    lake_home: object,
) -> None:
    remedy = f"{error.__name__} happened; run `icegroup redrive g` to fix it"

    def fail(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
        raise error(remedy)

    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    monkeypatch.setattr(cli, "cmd_list", fail)

    if issubclass(error, errors.Interrupted):  # stopped by a signal: its leases handed back, run it again
        assert cli.main(["list"]) == cli.Exit.INCOMPLETE == 3
        assert capsys.readouterr().err == f"icegroup: stopped: {remedy}\n"
    elif issubclass(error, errors.NotCaughtUp):  # and ResetInFlight: stopped short, run it again later
        assert cli.main(["list"]) == cli.Exit.INCOMPLETE == 3
        assert capsys.readouterr().err == f"icegroup: not caught up: {remedy}\n"
    elif issubclass(error, errors.RunFailed):  # a run failed for a reason icegroup did not foresee
        assert cli.main(["list"]) == cli.Exit.RUN_FAILED == 1
        assert capsys.readouterr().err == f"icegroup: run failed: {remedy}\n"
    else:
        assert cli.main(["list"]) == cli.Exit.ERROR == 2
        assert capsys.readouterr().err == f"icegroup: error: {remedy}\n"
