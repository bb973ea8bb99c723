"""Text from help strings and field descriptions, made safe for a Markdown table cell or paragraph.

Help and descriptions are written for a terminal, so they hold characters Markdown reads as markup
(``_``, ``*``, ``<NAME>``, ``[*]``, a table's ``|``). Code spans written with backticks are kept as
code; everything else is escaped, so the rendered page says exactly what ``--help`` says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_CODE_SPAN = re.compile(r"(`[^`\n]+`)")
# Python-Markdown's backslash escapes (``<`` has none, so it and ``>`` and ``&`` become entities).
_MARKUP = re.compile(r"([\\*_\[\]|#])")
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))


def escape(text: str) -> str:
    """Plain prose as Markdown that renders as the same characters; backtick code spans stay code.

    A pipe inside a code span needs no escape: Python-Markdown's tables do not split cells there.
    """
    parts = _CODE_SPAN.split(" ".join(text.split()))
    return "".join(part if index % 2 else _prose(part) for index, part in enumerate(parts))


def _prose(text: str) -> str:
    escaped = _MARKUP.sub(r"\\\1", text)
    for character, entity in _ENTITIES:
        escaped = escaped.replace(character, entity)
    return escaped


def code(value: str) -> str:
    """A value as an inline code span, whatever backticks it holds."""
    if "`" not in value:
        return f"`{value}`"
    return f"`` {value} ``"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; the cells must already be escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(cell or " " for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def paragraphs(text: str) -> str:
    """A help text's paragraphs (blank-line separated), each escaped and joined into one Markdown paragraph."""
    blocks = [block for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]
    return "\n\n".join(escape(block) for block in blocks)
