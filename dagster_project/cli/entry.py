"""The ``icegroup`` console script's entry: a closed pipe ends quietly, and library warnings stay out of the way.

Kept apart from ``commands.main`` so that what the process does around a command (the warnings
filter, a reader that went away) is set here once, for the command line only: importing the library
changes no warnings filter.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from icegroup.dagster_project.cli.commands import main as run_command
from icegroup.dagster_project.cli.output import quiet_pipe


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``icegroup`` console script: run one command; exit 0 if its reader closed the pipe.

    Dagster's beta and preview warnings (such as ``owners``) are about Dagster's API, not about
    anything the user did, so the command line does not print them; ``--verbose`` (the commands
    read it) shows everything.
    """
    with warnings.catch_warnings():
        if not verbose(argv):
            warnings.simplefilter("ignore")
        return quiet_pipe(lambda: run_command(argv))


def script() -> NoReturn:
    """The console script: run one command, then leave without tearing the interpreter down.

    A command that ran Spark holds Dagster, pyiceberg, a py4j gateway and thousands of Java object
    proxies. Python's own teardown frees them one by one, and py4j tells the JVM of each, which took
    0.8 to 0.95 s after a consume had finished. Nothing the command does is left to that teardown: its
    commits and its run record are written before it returns, and Python's exit steps that matter
    still run first, in order: other threads are joined, then the exit handlers (log files, temporary
    folders). Only then does the process end, with the command's exit code. A command that raised
    leaves the ordinary way, so its exit code and traceback are Python's own.
    """
    returned: list[int] = []
    atexit.register(leave, returned)  # registered first, so it runs after every other exit handler
    returned.append(main())
    sys.exit(returned[0])


def leave(returned: list[int]) -> None:
    """End the process with the code a command returned, once stdout and stderr are flushed; nothing if it raised."""
    if not returned:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away, or a stream already closed
            stream.flush()
    os._exit(returned[0])


def verbose(argv: Sequence[str] | None) -> bool:
    """Whether ``--verbose`` is among the arguments (before the command is parsed: warnings come at import)."""
    return "--verbose" in (sys.argv[1:] if argv is None else argv)
