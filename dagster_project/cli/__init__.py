"""The ``icegroup`` command: its entry point and its exit codes.

Nothing is imported until it is asked for: the console script (``cli/script.py``) sets its exit step
before the command's modules load, and importing this package must not load them first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from icegroup.dagster_project.cli.entry import main
    from icegroup.dagster_project.cli.exits import Exit
    from icegroup.dagster_project.cli.script import script

__all__ = ["Exit", "main", "script"]


def __getattr__(name: str) -> Any:
    """``main``, ``Exit`` and ``script``, imported when first asked for."""
    if name == "main":
        from icegroup.dagster_project.cli.entry import main

        return main
    if name == "Exit":
        from icegroup.dagster_project.cli.exits import Exit

        return Exit
    if name == "script":
        from icegroup.dagster_project.cli.script import script

        return script
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
