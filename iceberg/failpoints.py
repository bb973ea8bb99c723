"""Fail points: named places where the chaos suite kills a process with ``kill -9``.

Killing at a random moment rarely lands between two commits, which is exactly where bugs hide
(FoundationDB and TiKV use fail points for the same reason). When ``ICEGROUP_FAILPOINTS`` names a
directory, a process that reaches point ``p`` while the file ``<dir>/p`` exists claims it by an
atomic rename to ``<dir>/hit.<pid>.<p>``, and then waits to be killed. Without the variable a fail
point costs one dictionary lookup. The driver either kills the process, or deletes the ``hit`` file
to let it go on (the zombie test pauses a Borrower this way).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "ICEGROUP_FAILPOINTS"


def failpoint(name: str) -> None:
    """Stop here, until killed or released, if the chaos driver armed this point."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    hit = Path(folder) / f"hit.{os.getpid()}.{name}"
    try:
        (Path(folder) / name).rename(hit)
    except OSError:
        return
    while hit.exists():
        time.sleep(0.05)
