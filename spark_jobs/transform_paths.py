"""A group's transform, named ``module:function``: found and checked without importing Spark where it can be.

The groups file is loaded by every ``icegroup`` command, including the ones that never start Spark.
Importing a transform module imports PySpark with it (a fifth of a second), so ``check_transforms``
first reads the module's source: a top-level ``def`` of that name settles it. Anything it cannot
settle that way (a missing module, a typo, a name bound some other way, a module without source)
is imported, so every problem still fails at once with an error naming the file, the group and
the field. A module that fails while it runs is reported when a Borrower loads it, before any lease.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import GroupConfig


def import_transform(path: str) -> Callable[[Any], Any]:
    """Import ``package.module:function``; a ``ValueError`` says what is wrong and how to fix it."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(
            f"{path!r}: module {module_name!r} cannot be imported ({type(exc).__name__}: {exc}); "
            "install it or fix the module path"
        ) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"{path!r}: module {module_name!r} has no function {attr!r}; fix the function name")
    return cast(Callable[[Any], Any], function)


def defined_in_source(path: str) -> bool:
    """Whether the module's source file defines the function at its top level; the module does not run."""
    module_name, _, attr = path.partition(":")
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == attr for node in tree.body)


def check_transforms(groups: Iterable[GroupConfig], source: str) -> None:
    """Check every group's transform; problems of all groups are reported together.

    ``source`` names where the groups were defined (the YAML file), as in every other config error.
    """
    problems = []
    for group in groups:
        if defined_in_source(group.transform):
            continue
        try:
            import_transform(group.transform)
        except ValueError as exc:
            problems.append(f"{source}: group {group.name!r}: transform: {exc}")
    if problems:
        raise ConfigError("\n".join(problems))
