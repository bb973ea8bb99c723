"""Shipping a group's transform code to a cluster's executors, as ``spark-submit --py-files`` does.

On ``local[*]`` the Python workers start in the driver's folder with the driver's interpreter, so
they import whatever the driver imports. On a cluster they start in an executor's work folder on
some host, and import only what is installed in that host's Python: a transform module from the
user's project would fail with ``ModuleNotFoundError`` in the first task that runs one of its UDFs.
So before a lease or a replay runs a transform on a cluster, its top-level package is zipped and
added to the session with ``addPyFile``. An installed package is not shipped: it must be installed
on the executors' Python like pyspark itself (see infra/README.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import sysconfig
import tempfile
import threading
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

_SHIPPED: set[tuple[str, str]] = set()
_SHIPPED_LOCK = threading.Lock()


def ships_code(master: str) -> bool:
    """Whether executors run apart from the driver's folder and interpreter: every master but ``local``."""
    return not master.startswith("local")


def code_root(module_name: str) -> Path | None:
    """The package folder (or single module file) to ship for ``module_name``, or None when it is installed.

    The whole top-level package goes, so the transform's own imports of sibling modules work too.
    "Installed" means inside the interpreter's library folders (site-packages, the standard
    library): those must be installed on the executors too. A project's own code, including an
    editable install, lives outside them and is shipped.
    """
    top = module_name.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin in ("built-in", "frozen"):
        return None
    locations = list(spec.submodule_search_locations or [])  # a namespace package has these but no origin
    if not locations and spec.origin is None:
        return None
    root = Path(locations[0]) if locations else Path(str(spec.origin))
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    if any(root.resolve().is_relative_to(place) for place in installed):
        return None
    return root


def zip_code(root: Path, folder: Path) -> Path:
    """Zip the ``.py`` files under ``root`` into ``folder``, named by their content.

    Spark refuses a second file of the same name with other content, and the code may change while a
    Borrower is warm: a content hash in the name keeps Spark accepting it. Python workers that
    already imported the old module keep it until they restart (a new Borrower run).
    """
    # os.walk, not rglob: icegroup's own package is made of links to the checkout's folders, and rglob skips them.
    walked = (Path(folder) / name for folder, _, names in os.walk(root, followlinks=True) for name in names)
    files = sorted(file for file in walked if file.suffix == ".py") if root.is_dir() else [root]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in files:
            if "__pycache__" in file.parts:
                continue
            info = zipfile.ZipInfo(str(file.relative_to(root.parent)), date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, file.read_bytes(), zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    target = folder / f"{root.stem}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        # Leases of one process (threads) and Borrowers of one host may write the same zip at once.
        handle, partial = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(partial, target)
    return target


def ship_transform(spark: SparkSession, transform: str) -> Path | None:
    """Add the transform's package to ``spark`` for its executors, once per session and content; returns the zip."""
    master = spark.sparkContext.master or "local"
    root = code_root(transform.partition(":")[0])
    if not ships_code(master) or root is None:
        return None
    archive = zip_code(root, Path(tempfile.gettempdir()) / "icegroup-py-files")
    key = (spark.sparkContext.applicationId, archive.name)
    with _SHIPPED_LOCK:
        if key not in _SHIPPED:
            spark.sparkContext.addPyFile(str(archive))
            _SHIPPED.add(key)
    return archive
