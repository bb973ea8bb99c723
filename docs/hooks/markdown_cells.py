"""Text from help strings and field descriptions, made safe for a Markdown table cell or paragraph.

Help and descriptions are written for a terminal, so they hold characters Markdown reads as markup
(``_``, ``*``, ``<NAME>``, ``[*]``, a table's ``|``). Code spans written with backticks are kept as
code; everything else is escaped, so the rendered page says exactly what ``--help`` says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_CODE_SPAN = re.compile(r"(`[^`\n]+`)")
_MARKUP = re.compile(r"([\\*_\[\]<>|#~])")


def escape(text: str) -> str:
    """Plain prose as Markdown that renders as the same characters; backtick code spans stay code."""
    parts = _CODE_SPAN.split(" ".join(text.split()))
    return "".join(
        part.replace("|", "\\|") if index % 2 else _MARKUP.sub(r"\\\1", part) for index, part in enumerate(parts)
    )


def code(value: str) -> str:
    """A value as an inline code span that survives inside a table cell, whatever backticks or pipes it holds."""
    fence = "``" if "`" in value else "`"
    padded = f" {value} " if "`" in value else value
    return f"{fence}{padded.replace('|', chr(92) + '|')}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; the cells must already be escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(cell or " " for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def paragraphs(text: str) -> str:
    """A help text's paragraphs (blank-line separated), each escaped and joined into one Markdown paragraph."""
    blocks = [block for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]
    return "\n\n".join(escape(block) for block in blocks)
