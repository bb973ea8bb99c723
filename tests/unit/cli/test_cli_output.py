"""What every command prints: ids as JSON strings, no ``None`` or ``-``, a closed pipe that ends quietly, a log file."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from icegroup.dagster_project.cli import entry
from icegroup.dagster_project.cli.logfile import log_path, run_output
from icegroup.dagster_project.cli.output import dumps, json_ready, text
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.locations import file_forms, local_path
from tests.conftest import repo_root

BIG = 3_949_470_894_046_880_921  # a real snapshot id: a double turns it into 3949470894046880768


def test_a_double_would_corrupt_the_id_so_it_is_a_string() -> None:
    assert int(float(BIG)) != BIG
    assert json.loads(dumps({"sink_snapshot": BIG}))["sink_snapshot"] == str(BIG)


def test_ids_are_strings_by_their_field_whatever_their_size_and_counts_stay_numbers() -> None:
    row = {
        "sink_snapshot": 42,
        "source_head": 7,
        "position": 9,
        "registry_position": None,
        "planned_through": 5,
        "current": 3,
        "new": 4,
        "oldest_kept": 8,
        "upstream_replay": 6,
        "expire_snapshots": [1, 2],
        "snapshots": 12,
        "lag_snapshots": 3,
        "rows": BIG - 1,
        "epoch": 2,
        "complete": True,
        "streams": [{"stream": "0:region=eu", "position": 11, "committed_rows": 40}],
    }

    assert json_ready(row) == {
        "sink_snapshot": "42",
        "source_head": "7",
        "position": "9",
        "registry_position": None,
        "planned_through": "5",
        "current": "3",
        "new": "4",
        "oldest_kept": "8",
        "upstream_replay": "6",
        "expire_snapshots": ["1", "2"],
        "snapshots": 12,
        "lag_snapshots": 3,
        "rows": str(BIG - 1),  # the net under the field rule: no integer a double cannot hold stays a number
        "epoch": 2,
        "complete": True,
        "streams": [{"stream": "0:region=eu", "position": "11", "committed_rows": 40}],
    }


def test_text_has_no_python_none_and_joins_lists() -> None:
    assert [text(None), text([]), text(["a", "b"]), text(3), text("x")] == ["none", "none", "a,b", "3", "x"]


@pytest.mark.parametrize(
    ("given", "local"),
    [
        ("/data/a.parquet", "/data/a.parquet"),
        ("file:/data/a.parquet", "/data/a.parquet"),
        ("file:///data/a.parquet", "/data/a.parquet"),
        ("//data/a.parquet", "/data/a.parquet"),
        ("file://host/data/a.parquet", None),
        ("s3://bucket/a.parquet", None),
        ("data/a.parquet", None),
    ],
)
def test_a_local_file_is_the_same_file_in_any_of_its_forms(given: str, local: str | None) -> None:
    assert local_path(given) == local


def test_a_question_about_a_file_matches_every_form_of_it_and_other_schemes_exactly() -> None:
    forms = ["/data/a.parquet", "file:///data/a.parquet", "file:/data/a.parquet"]
    assert all(sorted(file_forms(form)) == sorted(forms) for form in forms)
    assert file_forms("s3://bucket/a.parquet") == ["s3://bucket/a.parquet"]


def run_printer(code: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``code`` with its stdout into ``head -1``, which closes the pipe after one line."""
    script = f'{sys.executable} -c {shlex.quote(textwrap.dedent(code))} | head -1; echo "exit=${{PIPESTATUS[0]}}" >&2'
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, cwd=repo_root(), timeout=60, check=False, env=os.environ
    )


def test_a_closed_pipe_ends_quietly_with_exit_0() -> None:
    printer = """
        import sys
        from icegroup.dagster_project.cli.output import quiet_pipe

        def many() -> int:
            for n in range(200_000):
                print(f"line {n}")
            return 0

        sys.exit(quiet_pipe(many))
    """
    done = run_printer(printer)

    assert done.stdout == b"line 0\n"
    assert done.stderr.decode().strip() == "exit=0", "no BrokenPipeError traceback, and success"


def test_a_command_whose_reader_went_away_exits_0_with_nothing_on_stderr() -> None:
    """The whole console script: a closed pipe is not an unforeseen error (``icegroup describe g | head -2``)."""
    done = run_printer("""
        import sys
        from icegroup.dagster_project.cli import commands, main

        def cmd_list(args, lakehouse, groups) -> int:
            for n in range(200_000):
                print(f"line {n}")
            return 0

        commands.cmd_list = cmd_list
        commands.load_configs = lambda args: (None, {})
        sys.exit(main(["list"]))
    """)

    assert done.stdout == b"line 0\n"
    assert done.stderr.decode().strip() == "exit=0"


def run_script(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run the console script's ``script()`` with ``list`` replaced by ``command``: stdout to a pipe, stderr kept."""
    code = f"""
        import atexit, sys
        from pathlib import Path
        from icegroup.dagster_project.cli import commands
        from icegroup.dagster_project.cli.script import script

        def cmd_list(args, lakehouse, groups) -> int:
            marker = Path({str(tmp_path / "handler-ran")!r})
            {command}

        commands.cmd_list = cmd_list
        commands.load_configs = lambda args: (None, {{}})
        sys.argv = ["icegroup", "list"]
        script()
    """
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_console_script_exits_with_the_commands_code_after_every_exit_handler_and_all_output(
    tmp_path: Path,
) -> None:
    """The script skips only Python's teardown: buffered output is flushed and exit handlers run first."""
    done = run_script(
        tmp_path,
        """atexit.register(marker.write_text, "yes")
            for n in range(50_000):
                print(f"line {n}")
            return 3""",
    )

    assert done.returncode == 3
    assert done.stdout.splitlines() == [f"line {n}" for n in range(50_000)]
    assert (tmp_path / "handler-ran").read_text() == "yes"


def test_a_commands_unexpected_error_still_exits_1_with_its_message_after_the_exit_handlers(tmp_path: Path) -> None:
    done = run_script(
        tmp_path,
        """atexit.register(marker.write_text, "yes")
            raise SystemError("boom")""",
    )

    assert done.returncode == 1
    assert "unexpected error: SystemError: boom" in done.stderr
    assert (tmp_path / "handler-ran").read_text() == "yes"


def test_the_console_script_runs_the_exit_handlers_that_the_commands_imports_register(tmp_path: Path) -> None:
    """``logging`` registers its shutdown as it is imported: a buffered handler flushes only then."""
    log = tmp_path / "command.log"
    code = f"""
        import sys, types
        from icegroup.dagster_project.cli.script import script

        def main() -> int:
            import logging, logging.handlers  # what the command's own imports do, after the script began
            buffered = logging.handlers.MemoryHandler(1000, target=logging.FileHandler({str(log)!r}))
            logger = logging.getLogger("probe")
            logger.addHandler(buffered)
            logger.warning("the last record")
            return 0

        sys.modules["icegroup.dagster_project.cli.entry"] = types.SimpleNamespace(main=main)
        script()
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert log.read_text() == "the last record\n"


def test_without_it_python_prints_a_traceback_so_the_test_above_can_fail() -> None:
    done = run_printer("""
        for n in range(200_000):
            print(f"line {n}")
    """)

    assert b"BrokenPipeError" in done.stderr


def test_run_output_sends_stderr_and_a_childs_stderr_to_the_log_and_names_it_on_a_named_error(tmp_path: Path) -> None:
    code = f"""
        import subprocess, sys
        from pathlib import Path
        from icegroup.dagster_project.cli.logfile import run_output
        from icegroup.iceberg.errors import UsageError
        try:
            with run_output(Path({str(tmp_path)!r}), "consume", verbose=False) as output:
                print("from python", file=sys.stderr)
                subprocess.run(["sh", "-c", "echo from a child >&2"], check=True)
                print("bars", file=output.terminal)
                raise UsageError("named")
        except UsageError as exc:
            print(f"error: {{exc}} log={{exc.log_file}}", file=sys.stderr)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=repo_root(), check=True
    )

    bars, error = done.stderr.splitlines()
    assert bars == "bars", "the terminal is still there for the progress bars"
    log = Path(error.split("log=")[1])
    assert error.startswith("error: named log=")
    assert log.parent == tmp_path / "logs"
    assert log.read_text().splitlines() == ["from python", "from a child"]


def test_verbose_leaves_stderr_alone(tmp_path: Path) -> None:
    def fail() -> None:
        with run_output(tmp_path, "consume", verbose=True) as output:
            assert output.path is None
            raise UsageError("named")

    with pytest.raises(UsageError) as raised:
        fail()

    assert not hasattr(raised.value, "log_file")
    assert not (tmp_path / "logs").exists()


def test_the_log_file_is_named_by_command_time_and_process(tmp_path: Path) -> None:
    path = log_path(tmp_path, "replay")

    assert path.parent == tmp_path / "logs"
    assert path.name.startswith("icegroup-replay-")
    assert path.name.endswith(f"-{os.getpid()}.log")


def test_the_command_line_hides_library_warnings_unless_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    def warns(argv: list[str]) -> int:
        warnings.warn("`owners` is currently in beta", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(entry, "run_command", warns)

    for argv, shown in ((["list"], []), (["--verbose", "list"], ["`owners` is currently in beta"])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert entry.main(argv) == 0
        assert [str(w.message) for w in caught] == shown, argv


def test_ids_under_suffixed_and_parent_fields_are_strings_counts_stay_numbers() -> None:
    shown = json_ready({"sink_snapshot_at_grant": 5, "parent_id": 7, "rows": 3, "lag_snapshots": 4})

    assert shown == {"sink_snapshot_at_grant": "5", "parent_id": "7", "rows": 3, "lag_snapshots": 4}
