"""A failure icegroup did not foresee: one line naming the log file that holds the traceback, exit 1."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from icegroup.dagster_project.cli import Exit, commands, main
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.group import GroupConfig


def cmd_list(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
    """A command with a bug in it."""
    raise RuntimeError("a bug\nsecond line")


@pytest.fixture
def broken_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`icegroup list` raising, on a lake that exists, with the Dagster home in ``tmp_path``."""
    monkeypatch.setattr(commands, "cmd_list", cmd_list)
    monkeypatch.setenv("ICEGROUP_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    LakehouseConfig(catalog_uri=f"sqlite:///{tmp_path}/.lake/catalog.db", warehouse=str(tmp_path / "w")).catalog()
    return tmp_path / "dagster" / "logs"


def test_an_unforeseen_error_is_one_line_and_its_traceback_is_in_the_log(
    broken_list: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list"]) == Exit.RUN_FAILED

    err = capsys.readouterr().err
    (log,) = broken_list.glob("icegroup-list-*.log")
    pointer = f"full traceback: {log}; rerun with --verbose to print it"
    assert err == f"icegroup: unexpected error: RuntimeError: a bug ({pointer})\n"
    assert 'raise RuntimeError("a bug' in log.read_text()


def test_verbose_lets_the_traceback_through(broken_list: Path) -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        main(["--verbose", "list"])
    assert not broken_list.exists()


def test_a_broken_pipe_that_is_not_stdouts_is_an_unforeseen_error(
    monkeypatch: pytest.MonkeyPatch, broken_list: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A socket's broken pipe is a failure; only a closed stdout (``| head``, ``test_cli_output``) ends quietly."""

    def piped_list(args: argparse.Namespace, lakehouse: LakehouseConfig, groups: dict[str, GroupConfig]) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(commands, "cmd_list", piped_list)

    assert main(["list"]) == Exit.RUN_FAILED
    assert "unexpected error: BrokenPipeError" in capsys.readouterr().err
    assert list(broken_list.glob("icegroup-*.log")), "its traceback is in a log file"
