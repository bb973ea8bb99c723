"""Only ``iceberg/store/`` writes with pyiceberg: every table and property icegroup keeps has one room."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import repo_root

# Table, transaction and catalog calls that change a table; ``delete`` counts with a ``delete_filter``.
WRITES = {
    "transaction",
    "overwrite",
    "expire_snapshots",
    "create_table",
    "create_table_if_not_exists",
    "set_properties",
    "remove_properties",
    "commit_transaction",
    "manage_snapshots",
    "update_schema",
    "update_spec",
}


def writes_in(path: Path) -> list[str]:
    """``file:line call`` for each pyiceberg write call in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in WRITES or (name == "delete" and any(k.arg == "delete_filter" for k in node.keywords)):
                found.append(f"{path.relative_to(path.parents[1])}:{node.lineno} {name}")
    return found


def writes_outside_the_store(package: Path) -> list[str]:
    """Write calls in ``package`` (an ``iceberg/`` tree) that are not under its ``store/``."""
    return [w for path in sorted(package.rglob("*.py")) if "store" not in path.parts for w in writes_in(path)]


def test_no_module_of_iceberg_outside_the_store_writes_a_table() -> None:
    assert writes_outside_the_store(repo_root() / "iceberg") == []


def test_a_write_outside_the_store_is_found(tmp_path: Path) -> None:
    package = tmp_path / "iceberg"
    (package / "store").mkdir(parents=True)
    (package / "store" / "ok.py").write_text("def f(t):\n    t.transaction().commit_transaction()\n")
    (package / "reset.py").write_text("def f(t):\n    t.delete(delete_filter='x')\n    t.append([1])\n")

    assert writes_outside_the_store(package) == ["iceberg/reset.py:2 delete"]
