"""Reading icegroup's YAML config files, and turning validation errors into lines a user can act on.

Both configs, the lakehouse and the groups, go through here, so their errors look alike: the
file or variable, the field, and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from icegroup.iceberg.errors import ConfigError


def read_yaml_mapping(path: Path, what: str, unset: str) -> dict[str, Any]:
    """A YAML file whose top level is a mapping; any problem is a ``ConfigError`` naming the file."""
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist; create it or unset {unset}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def format_validation_error(exc: ValidationError, source: str, origins: Mapping[str, str] | None = None) -> str:
    """Render pydantic errors as ``source: field.path: message`` lines a user can act on.

    ``origins`` maps a top-level field to where its value came from (a file, a variable); that
    place replaces ``source`` so the message sends the user to what to fix.
    """
    lines = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        origin = (origins or {}).get(str(err["loc"][0]), source) if err["loc"] else source
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field; remove it or check its spelling"
        elif err["type"] == "missing":
            message = "field required"
        lines.append(f"{origin}: {where}: {message}")
    return "\n".join(lines)
