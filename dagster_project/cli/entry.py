"""The ``icegroup`` console script's entry: a closed pipe ends quietly, and library warnings stay out of the way.

Kept apart from ``commands.main`` so that what the process does around a command (the warnings
filter, a reader that went away) is set here once, for the command line only: importing the library
changes no warnings filter.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

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


def verbose(argv: Sequence[str] | None) -> bool:
    """Whether ``--verbose`` is among the arguments (before the command is parsed: warnings come at import)."""
    return "--verbose" in (sys.argv[1:] if argv is None else argv)
