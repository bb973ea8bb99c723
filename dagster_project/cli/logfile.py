"""Where a command's run output goes: a log file, so that a named error is the first and last thing printed.

A run that fails prints, on its way, Dagster's ``STEP_FAILURE``/``RUN_FAILURE`` events with their
tracebacks, and Spark's JVM its Java stack traces: a thousand lines before the one that says what
went wrong. ``run_output`` points the process's stderr (file descriptor 2, which the JVM started
inside it inherits) at a log file under ``$DAGSTER_HOME/logs/`` while a run executes, and gives it
back before the error is printed. The error names the file. ``--verbose`` leaves stderr alone.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from icegroup.iceberg.errors import IcegroupError

LOG_DIR = "logs"


def log_path(home: Path, command: str, now: datetime | None = None) -> Path:
    """The log file of one command: ``<home>/logs/icegroup-<command>-<UTC time>-<pid>.log``."""
    at = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return home / LOG_DIR / f"icegroup-{command}-{at}-{os.getpid()}.log"


def pointer(path: Path) -> str:
    """What a named error adds: where its traceback is."""
    return f"full traceback: {path}; rerun with --verbose to print it"


def log_traceback(home: Path, command: str, exc: BaseException) -> Path:
    """Write an unforeseen exception's traceback to the command's log file; the file, for the one-line error."""
    path = log_path(home, command)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(traceback.format_exception(exc)))
    return path


class RunOutput:
    """Where the run's output goes, and the terminal's stderr for what the user should still see (bars)."""

    def __init__(self, path: Path | None, terminal: TextIO) -> None:
        """``path`` is None with ``--verbose``: nothing is redirected."""
        self.path = path
        self.terminal = terminal


@contextmanager
def run_output(home: Path, command: str, verbose: bool) -> Iterator[RunOutput]:
    """Send stderr to a new log file for the block (not with ``verbose``); an icegroup error leaving it names the file.

    Python's ``sys.stderr`` and the file descriptor under it both move, so Dagster's handlers,
    Python tracebacks and any JVM started inside the block write to the file.
    """
    if verbose:
        yield RunOutput(None, sys.stderr)
        return
    path = log_path(home, command)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(saved), "w", buffering=1)
    with path.open("a", buffering=1) as log:
        os.dup2(log.fileno(), 2)
        try:
            yield RunOutput(path, terminal)
        except IcegroupError as exc:
            exc.log_file = path  # type: ignore[attr-defined]
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            terminal.close()


def log_line(line: str) -> None:
    """A progress line for the command's log file (stderr, inside ``run_output``), not its output."""
    print(line, file=sys.stderr)
