"""MkDocs hook: the reference pages are rendered from the live code at build time, so they cannot drift.

A page holds a marker, ``<!-- generated: cli -->`` or ``<!-- generated: configuration -->``, and the
hook replaces it with the CLI reference (from ``icegroup.dagster_project.cli.commands.parser()``) or the
configuration reference (from the pydantic models). Any error while rendering, such as a field
without a description, fails the build.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable
from typing import Any

from cli_reference import render_cli
from config_reference import Root, render_config
from pydantic import BaseModel

MARKER = re.compile(r"<!--\s*generated:\s*([a-z-]+)\s*-->")
COMPONENTS_MODULE = "icegroup.dagster_project.components"

LAKEHOUSE_INTRO = (
    "The lakehouse config says where the catalog and the warehouse are and how Spark reaches them; "
    "pyiceberg and Spark are both built from it. It is a YAML mapping of these fields. "
    "`ICEGROUP_OPENLINEAGE_FILE=PATH` turns the `openlineage` section on with the client's file transport "
    "(one JSON event a line in PATH), as `make demo` does."
)
GROUPS_INTRO = (
    "The groups file declares the consumer groups: a YAML mapping with one key, `groups`, a list whose "
    "entries each have these fields."
)
COMPONENT_INTRO = (
    "The attributes of the Dagster component, written under `attributes:` in a `defs.yaml` whose `type:` is `{path}`."
)


class UnknownMarker(ValueError):
    """A page names a generated section that no generator renders."""


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Each ``<!-- generated: NAME -->`` marker replaced by the reference it names."""
    return MARKER.sub(lambda found: render(found.group(1)), markdown)


def render(name: str) -> str:
    """The generated Markdown for one marker name."""
    generators: dict[str, Callable[[], str]] = {"cli": cli_markdown, "configuration": configuration_markdown}
    if name not in generators:
        raise UnknownMarker(f"<!-- generated: {name} -->: no such generated section; use one of {sorted(generators)}")
    return generators[name]()


def cli_markdown() -> str:
    """The command-line reference from the parser ``icegroup`` runs."""
    from icegroup.dagster_project.cli.commands import parser
    from icegroup.dagster_project.cli.exits import MEANING

    return render_cli(parser(), {int(code): text for code, text in MEANING.items()})


def configuration_markdown() -> str:
    """The configuration reference: the lakehouse config, the group model and, when it exists, the component."""
    from icegroup.iceberg.config.lakehouse import ENV_OVERRIDES, LakehouseConfig
    from icegroup.iceberg.protocol.group import GroupConfig

    roots = [
        Root("Lakehouse config", LakehouseConfig, LAKEHOUSE_INTRO, env=ENV_OVERRIDES),
        Root("Groups file", GroupConfig, GROUPS_INTRO),
    ]
    roots.extend(component_roots())
    return render_config(roots)


def component_roots() -> list[Root]:
    """A root per Dagster component in ``icegroup.dagster_project.components``, if it exists; import errors raise.

    A component that is itself a pydantic model (``dg.Model``) is documented from its own fields:
    Dagster's derived attribute model (``get_model_cls``) drops the description of every field
    that has a default (dagster 1.13 ``derive_model_type``), and adds ``| str`` to each type for
    templates, which every attribute accepts anyway.
    """
    if importlib.util.find_spec(COMPONENTS_MODULE) is None:
        return []
    import dagster as dg

    module = importlib.import_module(COMPONENTS_MODULE)
    found = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, dg.Component)
        and value.__module__.startswith("icegroup.dagster_project")
    ]
    roots = []
    for component in sorted(found, key=lambda cls: cls.__name__):
        model = component if issubclass(component, BaseModel) else component.get_model_cls()
        if model is None:
            continue
        path = f"{COMPONENTS_MODULE}.{component.__name__}"
        roots.append(Root(f"Dagster component {component.__name__}", model, COMPONENT_INTRO.format(path=path)))
    return roots
