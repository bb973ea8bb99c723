"""The configuration reference, rendered from the pydantic models that validate the configuration.

Each field is documented from the model itself: its name, type, default, whether it is required and
its ``Field(description=...)``. A field without a description stops the build
(``MissingDescription``), so the reference can never be silently incomplete. A nested model gets a
section of its own, linked from the field that holds it.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from markdown_cells import code, escape, paragraphs, table
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from icegroup.iceberg.protocol.durations import format_duration

_SCALARS: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    date: "date (YYYY-MM-DD)",
    datetime: "time (ISO-8601)",
    timedelta: "duration (30d, 12h, 15m, 90s or ISO-8601 P1DT12H)",
    Any: "any",
    type(None): "null",
}
_BOUNDS = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
)


class MissingDescription(ValueError):
    """A configuration field has no ``Field(description=...)``: the reference would have a hole."""


@dataclass(frozen=True)
class Root:
    """One configuration file's top-level model, as the reference introduces it."""

    title: str
    model: type[BaseModel]
    intro: str
    env: Mapping[str, str] = field(default_factory=dict)


def render_config(roots: Sequence[Root]) -> str:
    """Every root's section, then one section per nested model (each once, in the order first met)."""
    sections: list[str] = []
    nested: list[type[BaseModel]] = []
    for root in roots:
        sections.append(_root_section(root, nested))
    done = {root.model for root in roots}
    while nested:
        model = nested.pop(0)
        if model in done:
            continue
        done.add(model)
        sections.append(_model_section(model, level=2, heading=model.__name__, nested=nested))
    return "\n\n".join(sections) + "\n"


def anchor(model: type[BaseModel]) -> str:
    """The page anchor of a nested model's section (MkDocs' slug of its heading)."""
    return model.__name__.lower()


def _root_section(root: Root, nested: list[type[BaseModel]]) -> str:
    parts = [_model_section(root.model, level=2, heading=root.title, nested=nested, intro=root.intro)]
    if root.env:
        rows = ([code(var), code(path)] for var, path in root.env.items())
        parts.append(
            "Each of these environment variables, when set, overrides one field of the file:\n\n"
            + table(["variable", "field"], rows)
        )
    return "\n\n".join(parts)


def _model_section(
    model: type[BaseModel], level: int, heading: str, nested: list[type[BaseModel]], intro: str = ""
) -> str:
    parts = [f"{'#' * level} {heading}"]
    if intro:
        parts.append(intro)
    if model.__doc__:
        parts.append(paragraphs(model.__doc__))
    rows = [_field_row(model, name, info, nested) for name, info in model.model_fields.items()]
    parts.append(table(["field", "type", "required", "default", "description"], rows))
    return "\n\n".join(parts)


def _field_row(model: type[BaseModel], name: str, info: FieldInfo, nested: list[type[BaseModel]]) -> list[str]:
    if not (info.description or "").strip():
        raise MissingDescription(
            f"{model.__module__}.{model.__name__}.{name}: no description; give the field "
            "Field(description=...) so the configuration reference can document it"
        )
    assert info.description is not None
    key = info.alias or name
    kind = ", ".join([type_text(info.annotation, nested), *_bound_text(info)])
    required = "yes" if info.is_required() else "no"
    return [code(key), kind, required, default_text(info), escape(info.description)]


def _bound_text(info: FieldInfo) -> Iterator[str]:
    """The field's numeric bounds (``Field(ge=1)``) as ``≥ 1``."""
    for bound in info.metadata:
        for kind_of, attribute, sign in _BOUNDS:
            if isinstance(bound, kind_of):
                yield f"{sign} {getattr(bound, attribute)}"


def type_text(annotation: Any, nested: list[type[BaseModel]]) -> str:
    """A field's type as a YAML writer reads it; a model is a link to its section (and queued to get one)."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        nested.append(annotation)
        return f"[{annotation.__name__}](#{anchor(annotation)})"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(code(str(member.value)) for member in annotation)
    if origin is Literal:
        return "one of " + ", ".join(code(str(value)) for value in args)
    if origin in (Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        return " or ".join(type_text(arg, nested) for arg in present)
    if origin in (dict, Mapping) or annotation is dict:
        if len(args) == 2:
            return f"mapping of {type_text(args[0], nested)} to {type_text(args[1], nested)}"
        return "mapping"
    if origin in (list, tuple, set, frozenset, Sequence) or annotation in (list, tuple):
        return f"list of {type_text(args[0], nested)}" if args else "list"
    return escape(getattr(annotation, "__name__", str(annotation)))


def default_text(info: FieldInfo) -> str:
    """A field's default as it would be written in YAML; empty for a required field."""
    if info.is_required():
        return ""
    value = info.get_default(call_default_factory=True, validated_data={})
    return value_text(value)


def value_text(value: Any) -> str:
    """A default value in YAML terms: ``null``, ``true``, a duration as ``7d``, a model as its section's defaults."""
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return f"the [{type(value).__name__}](#{anchor(type(value))}) defaults"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, timedelta):
        return code(format_duration(value))
    if isinstance(value, date | datetime):
        return code(value.isoformat())
    if isinstance(value, Enum):
        return code(str(value.value))
    if isinstance(value, dict | list | tuple):
        return code(json.dumps(value, default=str))
    return code(str(value))
