"""Consumer group definitions: YAML in, validated ``GroupConfig`` (``iceberg/protocol/group.py``) out.

Errors from every group of a file are reported together, each naming the group, the field and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from icegroup.iceberg.config.files import format_validation_error, read_yaml_mapping
from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import GroupConfig


def load_groups(path: Path) -> dict[str, GroupConfig]:
    """Load and validate every group in a YAML file of the form ``groups: [ {name: ..., ...}, ... ]``."""
    return parse_groups(read_yaml_mapping(path, what="group config", unset="ICEGROUP_GROUPS"), source=str(path))


def parse_groups(data: Any, source: str) -> dict[str, GroupConfig]:
    """Validate already-parsed YAML; errors from every group are reported together."""
    if not isinstance(data, dict) or not isinstance(data.get("groups", []), list):
        raise ConfigError(f"{source}: expected a mapping with a 'groups' list")
    unknown = set(data) - {"groups"}
    if unknown:
        raise ConfigError(f"{source}: unknown top-level keys {sorted(unknown)}; only 'groups' is allowed")
    groups: dict[str, GroupConfig] = {}
    problems: list[str] = []
    for index, raw in enumerate(data.get("groups", [])):
        label = f"groups[{index}]"
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            label = f"group {raw['name']!r}"
        try:
            group = GroupConfig.model_validate(raw)
        except ValidationError as exc:
            problems.append(format_validation_error(exc, source=f"{source}: {label}"))
            continue
        if group.name in groups:
            problems.append(f"{source}: {label}: name: defined twice; give each group its own name")
            continue
        shared = next((other for other in groups.values() if other.sink.lower() == group.sink.lower()), None)
        if shared is not None:
            problems.append(
                f"{source}: {label}: sink: {group.sink!r} is already the sink of group {shared.name!r}; give each "
                "group its own sink (a sink can be another group's source)"
            )
            continue
        groups[group.name] = group
    if problems:
        raise ConfigError("\n".join(problems))
    return groups
