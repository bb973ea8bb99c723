"""Every exit code of ``icegroup consume`` that needs no Spark: 1 for an unforeseen failure, 2 and 3 for named ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from pyiceberg.exceptions import CommitStateUnknownException

from icegroup.dagster_project import jobs
from icegroup.dagster_project.cli import commands as cli
from icegroup.dagster_project.cli.exits import MEANING, lost_answer
from icegroup.dagster_project.resources import IcegroupResource
from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.errors import NotCaughtUp
from icegroup.spark_jobs import session
from tests.conftest import repo_root
from tests.factories import append_batches, create_source


@pytest.fixture
def consume_fails_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> type[pytest.MonkeyPatch]:
    """Make the consume loop raise a given error, with no Spark started; a fresh home and instance.

    The demo group's source has a commit to consume, so ``consume`` makes a run rather than answer
    from the registry.
    """
    monkeypatch.setenv("ICEGROUP_HOME", str(tmp_path))
    append_batches(create_source(load_lakehouse(env={"ICEGROUP_HOME": str(tmp_path)}).catalog(), "demo.events"), 1, 3)
    monkeypatch.setattr(session, "start_in_background", lambda lakehouse: None)
    monkeypatch.setattr(jobs, "start_in_background", lambda lakehouse: None)  # the consume op's own early boot
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(repo_root() / "infra" / "dagster.yaml", dagster_home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setattr(IcegroupResource, "spark", lambda self: None)

    def use(error: Exception) -> None:
        def consume(*args: object, **kwargs: object) -> None:
            raise error

        monkeypatch.setattr(jobs, "consume", consume)

    return use  # type: ignore[return-value]


def test_an_unforeseen_failure_exits_1_with_the_cause(
    consume_fails_with: object, capsys: pytest.CaptureFixture[str]
) -> None:
    consume_fails_with(RuntimeError("disk on fire"))  # type: ignore[operator]

    assert cli.main(["consume", "demo", "--until-caught-up"]) == cli.Exit.RUN_FAILED == 1

    err = capsys.readouterr().err
    assert "icegroup: run failed: job demo_consume: RuntimeError: disk on fire" in err
    assert "Traceback" in err, "pytest holds sys.stderr, so the traceback is captured there rather than logged"


def test_not_caught_up_exits_3(consume_fails_with: object, capsys: pytest.CaptureFixture[str]) -> None:
    consume_fails_with(NotCaughtUp("group 'demo' is not caught up: lease x#0 held by run-1"))  # type: ignore[operator]

    assert cli.main(["consume", "demo", "--until-caught-up"]) == cli.Exit.INCOMPLETE == 3

    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("icegroup: not caught up: group 'demo' is not caught up: lease x#0 held by run-1 (full ")
    assert last.endswith("; rerun with --verbose to print it)"), "the run's output went to the log file it names"


def test_consume_of_a_missing_source_exits_2_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEGROUP_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    load_lakehouse(env={"ICEGROUP_HOME": str(tmp_path)}).catalog()

    assert cli.main(["consume", "demo"]) == cli.Exit.ERROR == 2

    assert capsys.readouterr().err == (
        "icegroup: error: source: table 'demo.events' does not exist in catalog 'lake'; "
        "create it or correct the group's source\n"
    )


def test_help_shows_the_one_exit_code_table() -> None:
    shown = " ".join(cli.parser().format_help().split())

    for code, text in MEANING.items():
        assert f"{code.value} {' '.join(text.split())}" in shown


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (requests.ConnectionError("reset by peer"), True),
        (requests.Timeout("read timed out"), True),
        (requests.exceptions.ChunkedEncodingError("cut short"), True),
        (CommitStateUnknownException("502 from the gateway"), True),
        (requests.exceptions.SSLError("certificate verify failed"), False),
        (requests.exceptions.ProxyError("proxy refused"), False),
        (ValueError("a bug"), False),
    ],
)
def test_a_lost_answer_is_a_dropped_or_timed_out_reply_not_a_refused_one(error: Exception, lost: bool) -> None:
    assert lost_answer(error) is lost


def test_the_command_loads_no_http_client_until_an_error_needs_it() -> None:
    """A command on a SQL catalog (an idle ``consume`` above all) pays no import of ``requests``."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, icegroup.dagster_project.cli.entry; print('requests' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"
