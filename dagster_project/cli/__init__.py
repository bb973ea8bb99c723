"""The ``icegroup`` command: its entry point and its exit codes."""

from dagster_project.cli.exits import Exit
from dagster_project.cli.commands import main

__all__ = ["Exit", "main"]
