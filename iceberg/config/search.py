"""Where the ``icegroup`` command finds its two configs, the way pyiceberg finds ``.pyiceberg.yaml``.

A command run from any folder must either find the user's lake or say where it looked; it must never
invent an empty lake in the current folder. So the search is explicit and ordered, and every place
it tried is named when nothing is found.

Search order, first hit wins (the same for both configs):

1. the flag (``--lakehouse FILE`` / ``--groups FILE``);
2. the environment (``$ICEGROUP_LAKEHOUSE`` / ``$ICEGROUP_GROUPS``);
3. the current folder (``./lakehouse.yaml`` / ``./groups.yaml``);
4. the home folder (``~/.icegroup/lakehouse.yaml`` / ``~/.icegroup/groups.yaml``);
5. the lakehouse only: a local lake, ``$ICEGROUP_HOME/.lake`` when ``$ICEGROUP_HOME`` is set, else
   ``./.lake`` when it already holds a catalog; or a catalog named whole by ``$ICEGROUP_CATALOG_URI``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from icegroup.iceberg.config.lakehouse import ENV_CONFIG, ENV_HOME
from icegroup.iceberg.errors import ConfigError

ENV_GROUPS = "ICEGROUP_GROUPS"
ENV_CATALOG_URI = "ICEGROUP_CATALOG_URI"
LAKEHOUSE_FILE = "lakehouse.yaml"
GROUPS_FILE = "groups.yaml"
HOME_FOLDER = ".icegroup"
LOCAL_LAKE = ".lake"
LOCAL_CATALOG = "catalog.db"


@dataclass(frozen=True)
class Found:
    """A config the search settled on: a file, or (lakehouse only) a local lake's folder."""

    how: str
    file: Path | None = None
    lake_home: Path | None = None


@dataclass(frozen=True)
class Places:
    """Where one search looks: the folders it reads, so tests can point it anywhere."""

    cwd: Path
    home: Path
    env: Mapping[str, str]

    def files(self, flag: str | None, variable: str, name: str) -> list[tuple[str, Path | None]]:
        """The file candidates in order, each with how a user would name it; ``None`` where unset."""
        return [
            (f"--{name.removesuffix('.yaml')}", Path(flag).expanduser() if flag else None),
            (f"${variable}", Path(self.env[variable]).expanduser() if self.env.get(variable) else None),
            (f"./{name}", self.cwd / name),
            (f"~/{HOME_FOLDER}/{name}", self.home / HOME_FOLDER / name),
        ]


def find_lakehouse(flag: str | None, places: Places) -> Found:
    """The lakehouse config the command uses; a ``ConfigError`` listing every place tried if there is none."""
    found = _first_file(places.files(flag, ENV_CONFIG, LAKEHOUSE_FILE))
    if found is not None:
        return found
    if places.env.get(ENV_HOME):
        return Found(how=f"${ENV_HOME}/{LOCAL_LAKE}", lake_home=(places.cwd / places.env[ENV_HOME]).resolve())
    if (places.cwd / LOCAL_LAKE / LOCAL_CATALOG).is_file():
        return Found(how=f"./{LOCAL_LAKE}", lake_home=places.cwd.resolve())
    if places.env.get(ENV_CATALOG_URI):
        return Found(how=f"${ENV_CATALOG_URI}", lake_home=places.cwd.resolve())
    raise ConfigError(
        "no lakehouse config found; looked for --lakehouse FILE, $ICEGROUP_LAKEHOUSE, ./lakehouse.yaml, "
        f"~/{HOME_FOLDER}/lakehouse.yaml, a local lake in $ICEGROUP_HOME/{LOCAL_LAKE} or ./{LOCAL_LAKE}. "
        "Run `icegroup init` here to start a local lake, or point --lakehouse or $ICEGROUP_LAKEHOUSE at your "
        "lake's config"
    )


def find_groups(flag: str | None, places: Places) -> Found:
    """The groups file the command uses; a ``ConfigError`` listing every place tried if there is none."""
    found = _first_file(places.files(flag, ENV_GROUPS, GROUPS_FILE))
    if found is not None:
        return found
    raise ConfigError(
        f"no groups file found; looked for --groups FILE, $ICEGROUP_GROUPS, ./groups.yaml, ~/{HOME_FOLDER}/"
        "groups.yaml. Run `icegroup init` here to write a starter groups.yaml, or point --groups or "
        "$ICEGROUP_GROUPS at your groups file"
    )


def _first_file(candidates: list[tuple[str, Path | None]]) -> Found | None:
    """The first candidate that is set; a flag or variable naming a missing file is an error, not a fall-through.

    Falling through past a file the user named would run the command on some other lake.
    """
    for how, path in candidates:
        if path is None:
            continue
        explicit = not how.startswith(("./", "~/"))
        if path.is_file():
            return Found(how=how, file=path.resolve())
        if explicit:
            raise ConfigError(f"{how}: {path} does not exist; create it, or fix or unset {how}")
    return None
