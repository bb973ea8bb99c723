"""The ``icegroup`` console script: it sets its exit step before anything else loads, then runs the command.

Python runs exit handlers last registered, first run. The step that ends the process must run after
every other handler (``logging``'s, the one behind every ``weakref.finalize``, any a library adds as
it is imported), so it is registered here, before the command's modules are imported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

# Python's own exit status when flushing stdout fails at exit.
FLUSH_FAILED = 120


def script() -> NoReturn:
    """Run one command, then leave without tearing the interpreter down.

    A command that ran Spark holds Dagster, pyiceberg, a py4j gateway and thousands of Java object
    proxies. Python's own teardown frees them one by one, and py4j tells the JVM of each, which took
    0.8 to 0.95 s after a consume had finished. Nothing the command does is left to that teardown: its
    commits and its run record are written before it returns, and Python's exit steps that matter
    still run first, in order: other threads are joined, then every other exit handler (log
    handlers, temporary folders). Only then does the process end, with the command's exit code. A
    command that raised leaves the ordinary way, so its exit code and traceback are Python's own.
    """
    returned: list[int] = []
    atexit.register(_leave, returned)  # registered before any import of the command's, so it runs last
    from icegroup.dagster_project.cli.entry import main

    returned.append(main())
    sys.exit(returned[0])


def _leave(returned: list[int]) -> None:
    """End the process with the code a command returned, once stdout and stderr are flushed; nothing if it raised."""
    if not returned:
        return
    code = returned[0]
    with contextlib.suppress(ValueError):  # a stream already closed has nothing left to flush
        try:
            sys.stdout.flush()
        except OSError:
            code = code or FLUSH_FAILED
        with contextlib.suppress(OSError):
            sys.stderr.flush()
    os._exit(code)
