"""The ``icegroup`` command: its entry point and its exit codes."""

from icegroup.dagster_project.cli.entry import main, script
from icegroup.dagster_project.cli.exits import Exit

__all__ = ["Exit", "main", "script"]
