"""MkDocs hook: renders the reference pages from the live code at build time, so they cannot drift."""

from typing import Any


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Placeholder until the generators land: the page's markdown, unchanged."""
    return markdown
