"""What the ``icegroup`` commands' argument lists share: the group, ``--json``, ``--execute``, and the rules they state.

Each shared argument is defined once, as a parent parser a command takes (``GROUP``, ``JSON``,
``EXECUTE``), and each command is added by ``command``, so that its own ``--help`` opens with the
one line the list of commands shows for it.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from icegroup.dagster_project.cli.output import JSON_HELP
from icegroup.dagster_project.cli.support import GROUP_HELP

PREVIEW_RULE = "previews what it would do; changes nothing unless --execute"
ACTS_AT_ONCE = "acts at once (it moves nothing backwards; its opposite undoes it)"
EXECUTE_HELP = "do it (without --execute: only show what would be done)"
RULE = (
    "Verbs that rewrite or remove state (reset, rebuild, replay, expire, redrive, migrate, delete, canary --promote) "
    "preview what they would do and change nothing unless --execute is given; consume, pause and resume act at once "
    "(they move nothing backwards, and each is undone by its opposite), and so does canary --transform, which "
    "stages beside main and changes nothing on it."
)


class Commands(Protocol):
    """The ``icegroup`` commands as argparse's ``add_subparsers`` returns them: each module adds its own."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """Add the command ``name``."""
        ...


def parent() -> argparse.ArgumentParser:
    """An argument list for commands to take as a parent: no ``--help`` of its own."""
    return argparse.ArgumentParser(add_help=False)


def group_argument() -> argparse.ArgumentParser:
    """The group a command acts on, first."""
    found = parent()
    found.add_argument("group", help=GROUP_HELP)
    return found


def json_option(help: str = JSON_HELP) -> argparse.ArgumentParser:
    """``--json``: print JSON instead of a table."""
    found = parent()
    found.add_argument("--json", action="store_true", help=help)
    return found


def execute_option() -> argparse.ArgumentParser:
    """``--execute``: do what the command previews."""
    found = parent()
    found.add_argument("--execute", action="store_true", help=EXECUTE_HELP)
    return found


def command(sub: Commands, name: str, help: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the command ``name`` with the parents' arguments first; its ``--help`` opens with ``help``."""
    return sub.add_parser(name, help=help, description=help, parents=list(parents))
