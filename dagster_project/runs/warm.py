"""What the Leader hands the Borrower runs it starts: their tags, a warm run's config, and the code's stamp."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from typing import Any

from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_CODE, TAG_GROUP, TAG_ROLE, TAG_WARM
from icegroup.iceberg.protocol.group import GroupConfig


def borrow_op_name(group: str) -> str:
    """The name of the Borrower job's one op, which a run's config addresses."""
    return f"{group}_borrow_op"


def borrower_tags(group: str, code: str, warm: bool) -> dict[str, str]:
    """The tags the Leader counts Borrower runs by: group, role, code stamp, and whether it stays up idle."""
    tags = {TAG_GROUP: group, TAG_ROLE: ROLE_BORROWER, TAG_CODE: code}
    return {**tags, TAG_WARM: "1"} if warm else tags


def warm_run_config(group: str) -> dict[str, Any]:
    """The run config of a warm Borrower: it keeps its session and never exits when idle."""
    return {"ops": {borrow_op_name(group): {"config": {"keep_warm": True}}}}


def code_stamp(group: GroupConfig) -> str:
    """16 hex characters over the group's settings, icegroup's version and its transform module's source, read now.

    Read when the definitions load, the stamp changes with any group setting (``warm_borrowers``
    lowered to 0 included), a new icegroup, or a new transform body under the same name (which the
    config hash does not see): a warm Borrower launched before the change carries the old stamp,
    and the Leader ends it. A module with no source file (a built-in, a zip) counts by its path.
    Modules the transform imports do not count.
    """
    module = group.transform.partition(":")[0]
    spec = importlib.util.find_spec(module)
    source = b""
    if spec is not None and spec.origin is not None and spec.has_location:
        try:
            with open(spec.origin, "rb") as file:
                source = file.read()
        except OSError:
            source = b""
    try:
        version = importlib.metadata.version("icegroup")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    stamped = "\0".join((group.model_dump_json(), version)).encode() + b"\0" + source
    return hashlib.sha256(stamped).hexdigest()[:16]
