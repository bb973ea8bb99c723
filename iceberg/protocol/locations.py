"""A local file's location in every spelling table metadata and people use: ``/p``, ``file:/p``, ``file:///p``."""

from __future__ import annotations


def file_forms(path: str) -> list[str]:
    """Every spelling of a local file's location that a table's metadata may hold, or just ``path`` if not local.

    A local file appears as ``/p``, ``file:/p`` or ``file:///p`` depending on which engine wrote the
    metadata (Spark writes ``file:``, pyiceberg the plain path), and people paste any of them. They
    all name one file, so a question about one matches all three. Other schemes (``s3://``) are
    matched exactly.
    """
    local = local_path(path)
    return [path] if local is None else sorted({local, f"file:{local}", f"file://{local}"})


def local_path(path: str) -> str | None:
    """The absolute path a ``/p``, ``file:/p`` or ``file:///p`` location names; None for anything else."""
    if path.startswith("file:"):
        rest = path.removeprefix("file:")
        if rest.startswith("//"):
            rest = rest.removeprefix("//")
            if not rest.startswith("/"):  # file://host/p names another host: not a local path
                return None
        path = rest
    if not path.startswith("/"):
        return None
    return "/" + path.lstrip("/")
