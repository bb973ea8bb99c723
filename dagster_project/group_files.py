"""Where the group definitions come from, and loading them with every transform imported.

The code location and the ``icegroup`` command both read groups through here. It needs no Dagster,
so a command that answers without a run (``describe``, an idle ``consume``) never imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from icegroup.iceberg.config.groups import load_groups
from icegroup.iceberg.config.search import ENV_GROUPS
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.spark_jobs.transform_paths import check_transforms

DEFAULT_GROUPS = Path(__file__).parent / "groups.yaml"


def groups_path(explicit: str | None = None) -> Path:
    """The code location's groups: an explicit path, ``ICEGROUP_GROUPS``, or the packaged demo groups.

    The ``icegroup`` command searches further (``cli/configs.py``) and has no packaged fallback: a
    command run outside the checkout must not act on the demo's groups.
    """
    return Path(explicit or os.environ.get(ENV_GROUPS) or DEFAULT_GROUPS)


def load_checked_groups(path: Path) -> dict[str, GroupConfig]:
    """The groups defined in ``path``, with every transform imported: what the location and the CLI load."""
    groups = load_groups(path)
    check_transforms(groups.values(), source=str(path))
    return groups
