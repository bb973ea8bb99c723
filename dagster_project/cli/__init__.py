"""The ``icegroup`` command: its entry point and its exit codes."""

from icegroup.dagster_project.cli.entry import main
from icegroup.dagster_project.cli.exits import Exit

__all__ = ["Exit", "main"]
