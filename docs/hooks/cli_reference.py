"""The command-line reference, rendered from the ``icegroup`` argparse parser itself.

The page is made from the live parser at build time, so a command, an option, a default or an exit
code added to the CLI appears in the docs without anyone writing it, and one removed disappears.
Subcommands are walked recursively, whatever exists.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping

from markdown_cells import code, escape, paragraphs, table

_NO_DEFAULT = (None, False, argparse.SUPPRESS)


def render_cli(top: argparse.ArgumentParser, exit_codes: Mapping[int, str]) -> str:
    """The whole reference: the global options, every command in the order ``--help`` lists them, the exit codes."""
    name = top.prog
    sections = [_command_section(name, top, summary=None, level=2)]
    sections.extend(
        _command_section(path, parser, summary=summary, level=2) for path, parser, summary in walk_commands(top, name)
    )
    codes = table(["code", "meaning"], ([code(str(int(value))), escape(text)] for value, text in exit_codes.items()))
    sections.append(f"## Exit codes\n\nEvery command exits with one of these codes.\n\n{codes}")
    return "\n\n".join(sections) + "\n"


def walk_commands(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """Each subcommand below ``parser`` as (full command, its parser, its one-line help), depth first, in order."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        seen: set[int] = set()
        for name, child in action.choices.items():
            if id(child) in seen:  # an alias of a command already listed
                continue
            seen.add(id(child))
            full = f"{path} {name}"
            yield full, child, helps.get(name, "")
            yield from walk_commands(child, full)


def _command_section(path: str, parser: argparse.ArgumentParser, summary: str | None, level: int) -> str:
    """One command: its help, description, usage, arguments table and epilog."""
    parts = [f"{'#' * level} {path}"]
    if summary:
        parts.append(escape(summary[:1].upper() + summary[1:]) + ("" if summary.endswith(".") else "."))
    if parser.description and not _same_text(parser.description, summary or ""):
        parts.append(paragraphs(parser.description))
    parts.append(f"```text\n{parser.format_usage().strip()}\n```")
    rows = [_argument_row(parser, action) for action in _documented_actions(parser)]
    if rows:
        parts.append(table(["argument", "description", "default"], rows))
    shared = [action.option_strings[0] for action in parser._actions if _shared(action)]
    if shared:
        parts.append(f"It also takes {', '.join(code(option) for option in shared)}, as the top level does.")
    parts.extend(_exclusive_notes(parser))
    if parser.epilog and summary is not None:
        parts.append(paragraphs(parser.epilog))
    return "\n\n".join(parts)


def _documented_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The arguments a reader types: everything but ``-h`` and the subcommand slot (documented as sections)."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if _shared(action):
            continue
        yield action


def _shared(action: argparse.Action) -> bool:
    """An option every command takes after its name as well (its default leaves the top level's value)."""
    return (
        bool(action.option_strings)
        and action.default == argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
    )


def _same_text(description: str, summary: str) -> bool:
    """Whether a command's description only repeats its one-line help (the CLI sets it so, for ``--help``)."""
    return description.strip().rstrip(".").lower() == summary.strip().rstrip(".").lower()


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    """One argument as (how it is typed, what it does, its default)."""
    formatter = parser._get_formatter()
    if action.option_strings:
        takes_value = action.nargs != 0
        metavar = formatter._format_args(action, action.dest.upper()) if takes_value else ""
        typed = ", ".join(code(f"{option} {metavar}".strip()) for option in action.option_strings)
    else:
        typed = code(formatter._format_args(action, action.dest))
    notes = []
    if action.help:
        notes.append(escape(formatter._expand_help(action)))
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        notes.append("One of " + ", ".join(code(str(choice)) for choice in action.choices) + ".")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or "").lower():
        notes.append("(repeatable)")
    if action.required and action.option_strings:
        notes.append("Required.")
    default = "" if action.default in _NO_DEFAULT or action.default == [] else code(str(action.default))
    return [typed, " ".join(notes), default]


def _exclusive_notes(parser: argparse.ArgumentParser) -> Iterator[str]:
    """A sentence per mutually exclusive group: which options cannot be combined, and whether one is required."""
    for group in parser._mutually_exclusive_groups:
        options = ", ".join(code(action.option_strings[0]) for action in group._group_actions if action.option_strings)
        yield f"{'Exactly' if group.required else 'At most'} one of {options}."
