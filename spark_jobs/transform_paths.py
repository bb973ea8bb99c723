"""A group's transform, named ``module:function``: imported and checked when the groups load.

Every ``icegroup`` command loads the groups file, so a transform that cannot work fails there, with
an error that names the file, the group and the field, before any Spark job starts:
- a module that cannot be imported, with the module's own error (a dependency it imports that is
  not installed, say);
- a module without that function;
- a module-level UDF whose return type is a string (``@F.udf("long")``). The type string is parsed
  through the JVM when the module is imported, and an executor's Python worker has no JVM, so the
  module fails on every executor. Found in the module's source before it is imported, so the
  error says this rather than the import's own ``SparkContext ... should be created first``.
  ``@F.udf(LongType())`` is what works.

icegroup's own transforms are checked by reading their source instead (``own_and_defined``), so that a
command with no Spark work never imports PySpark.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from icegroup.iceberg.errors import ConfigError

if TYPE_CHECKING:
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


UDF_DECORATORS = frozenset({"udf", "pandas_udf"})
OWN_PACKAGE = __name__.split(".", 1)[0]


def module_source(path: str) -> ast.Module | None:
    """The parsed source of the transform's module, without running it; None for one without a ``.py`` source.

    A module that cannot be found or parsed gives None too: the import that follows names the problem.
    """
    module_name, _, _ = path.partition(":")
    try:
        spec = importlib.util.find_spec(module_name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return None
        return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (ImportError, OSError, SyntaxError, ValueError):
        return None


def string_typed_udfs(path: str) -> list[str]:
    """Module-level functions decorated with a UDF whose return type is given as a string, by name."""
    tree = module_source(path)
    found = []
    for node in tree.body if tree is not None else []:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and _name(decorator.func) in UDF_DECORATORS and _string_type(decorator):
                found.append(node.name)
    return found


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _string_type(call: ast.Call) -> bool:
    given = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "returnType")]
    return any(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in given)


def own_and_defined(path: str) -> bool:
    """Whether ``path`` is one of icegroup's own transforms, defined at the top level of its module's source.

    Those are checked by reading the source, not by importing it: importing them imports PySpark (a
    fifth of a second), which a consume with nothing to do never needs. A user's module is imported.
    """
    module_name, _, attr = path.partition(":")
    tree = module_source(path) if module_name.startswith(f"{OWN_PACKAGE}.") else None
    return tree is not None and any(isinstance(node, ast.FunctionDef) and node.name == attr for node in tree.body)


def check_transforms(groups: Iterable[GroupConfig], source: str) -> None:
    """Import and check every group's transform; problems of all groups are reported together.

    ``source`` names where the groups were defined (the YAML file), as in every other config error.
    """
    problems = []
    for group in groups:
        where = f"{source}: group {group.name!r}: transform"
        if own_and_defined(group.transform):
            continue
        typed_by_string = string_typed_udfs(group.transform)
        for name in typed_by_string:
            problems.append(
                f"{where}: {group.transform.partition(':')[0]}.{name} is a module-level UDF with its return type as a "
                "string, which is parsed through the JVM when the module is imported: without a SparkContext (as on "
                "every executor) the import fails; give the type as an object, such as @F.udf(LongType()) instead of "
                '@F.udf("long")'
            )
        if typed_by_string:
            continue
        try:
            import_transform(group.transform)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    if problems:
        raise ConfigError("\n".join(problems))
