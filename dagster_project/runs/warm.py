"""What the Leader hands the Borrower runs it starts: their tags, a warm run's config, and the code's stamp."""

from __future__ import annotations

import hashlib
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
    """16 hex characters over the group's config hash and the source of its transform's module, read now.

    The config hash counts a transform by its import path only, so a new body under the same name
    keeps it. Read when the definitions load, this stamp changes with the body: a warm Borrower
    launched before a reload carries the old stamp, and the Leader ends it between leases. A module
    with no source file (a built-in, a zip) counts by its path alone.
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
    return hashlib.sha256(group.config_hash.encode() + b"\0" + source).hexdigest()[:16]
