"""OpenLineage events read back from the client's file transport and validated against the published schemas.

The schemas are OpenLineage's own JSON files (``tests/openlineage_spec``), found by their ``$id``:
the event against ``OpenLineage.json#/$defs/RunEvent``, then each facet against the schema its
``_schemaURL`` names, so a facet icegroup made up, or one of a version that was never published,
fails here as it would in a lineage tool that validates.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

SPEC = Path(__file__).parent / "openlineage_spec"
RUN_EVENT = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


@cache
def registry() -> Registry:
    """Every vendored schema by its ``$id``."""
    resources = []
    for path in sorted(SPEC.rglob("*.json")):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


def validator(url: str) -> Draft202012Validator:
    """A validator of the schema at ``url`` (a published ``$id`` with its JSON pointer), formats checked."""
    return Draft202012Validator({"$ref": url}, registry=registry(), format_checker=FormatChecker())


def facets_of(event: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every facet of the event, named by where it sits."""
    places = [("run", event["run"]), ("job", event["job"])]
    places += [(f"{side}[{i}]", d) for side in ("inputs", "outputs") for i, d in enumerate(event.get(side, []))]
    for place, holder in places:
        for kind in ("facets", "inputFacets", "outputFacets"):
            for name, facet in (holder.get(kind) or {}).items():
                yield f"{place}.{kind}.{name}", facet


def validate_event(event: dict[str, Any]) -> None:
    """Raise unless the event and each of its facets validate against the published schema they name."""
    validator(RUN_EVENT).validate(event)
    assert event["schemaURL"].split("#")[0] in registry(), f"unpublished event schema {event['schemaURL']}"
    for place, facet in facets_of(event):
        url = facet["_schemaURL"]
        assert url.split("#")[0] in registry(), f"{place}: no published schema {url}"
        validator(url).validate(facet)
    uuid.UUID(event["run"]["runId"])


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events the file transport wrote, one JSON object a line, each validated."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for event in events:
        validate_event(event)
    return events
