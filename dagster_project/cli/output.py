"""How every ``icegroup`` command prints: JSON that no consumer can corrupt, text with no Python ``None``.

An Iceberg snapshot id is a 64-bit integer. jq 1.6 and every JavaScript JSON parser read numbers as
doubles, which hold integers exactly only up to 2**53, so a 19-digit id printed as a number comes
back as a *different* id. In ``--json`` output every snapshot id, and every other 64-bit id, is
therefore a string: by the name of its field (``ID_FIELD``, ``ID_LIST_FIELD``), so a field has one
type whatever its value, and, as a net under that rule, any integer too large for a double. Counts
stay numbers. An absent value is ``null`` in JSON and ``none`` in text: never ``-`` or ``None``.

A closed pipe (``icegroup checkpoints demo --json | head -3``) is not an error: ``quiet_pipe``
ends the command quietly with exit 0, as ``git log | head`` does.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import sys
from collections.abc import Callable, Mapping
from typing import Any

JSON_HELP = "print JSON: snapshot ids and other 64-bit ids are strings, an absent value is null"
ABSENT = "none"

# A scalar integer under one of these field names is an id: a snapshot (also ``..._at_grant``), a
# parent, a position or head (the snapshot a stream has reached), a cursor, a registry token.
ID_FIELD = re.compile(
    r"(^|_)(snapshot|snapshot_id|parent|parent_id|position|head|planned_through|cursor|token|current|new|"
    r"oldest_kept|upstream_replay)(_at_[a-z]+)?$"
)
# A list of integers under one of these is a list of ids (``snapshots`` as a count stays a number).
ID_LIST_FIELD = re.compile(r"snapshots?$|snapshot_ids$")
EXACT_IN_A_DOUBLE = 2**53


def is_count(value: object) -> bool:
    """Whether ``value`` is an integer (and not a bool, which JSON keeps as true/false)."""
    return isinstance(value, int) and not isinstance(value, bool)


def json_ready(value: Any, field: str = "") -> Any:
    """``value`` with every id as a string: ints under an id field, int lists under an id-list field, big ints.

    ``field`` is the name of the field ``value`` is in (empty at the top level and in lists of records).
    """
    if isinstance(value, Mapping):
        return {str(key): json_ready(item, str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else list(value)
        ids = bool(ID_LIST_FIELD.search(field))
        return [str(item) if ids and is_count(item) else json_ready(item, "") for item in items]
    if is_count(value) and (ID_FIELD.search(field) or abs(value) >= EXACT_IN_A_DOUBLE):
        return str(value)
    return value


def dumps(value: Any) -> str:
    """``value`` as the JSON ``--json`` prints: ids as strings, indented, anything else by its ``str``."""
    return json.dumps(json_ready(value), indent=2, default=str)


def text(value: object) -> str:
    """One value in text output: ``none`` for an absent one, yes or no, lists joined by commas, else as it is."""
    if value is None:
        return ABSENT
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(text(item) for item in value) or ABSENT
    return str(value)


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader went away (``| head``): polling it reports an error.

    Tells a closed ``| head`` from a broken pipe elsewhere (a socket), which is a failure.
    """
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(event & select.POLLERR for _, event in poller.poll(0))


def quiet_pipe(run: Callable[[], int]) -> int:
    """Run ``run``; if the reader of stdout went away (``| head``), stop quietly and exit 0.

    Python would print a ``BrokenPipeError`` traceback and exit 1, first when the write fails and
    again when it flushes stdout at exit. The reader has what it asked for, so this is no failure:
    stdout is pointed at ``/dev/null`` so the flush at exit cannot fail again, and the exit code is 0.
    """
    try:
        code = run()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    return code
