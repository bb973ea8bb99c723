"""The ``icegroup`` command's exit codes: one table that every command, ``--help`` and the README share.

Scripts and schedulers branch on these codes, so each value means one thing across all commands:
a code is taken from this table, never written as a number where a command returns.
"""

from __future__ import annotations

import textwrap
from enum import IntEnum

from pyiceberg.exceptions import CommitStateUnknownException, ServiceUnavailableError

from icegroup.iceberg.errors import IcegroupError, Interrupted, NotCaughtUp, RunFailed


class Exit(IntEnum):
    """What the ``icegroup`` process tells its caller."""

    OK = 0
    RUN_FAILED = 1
    ERROR = 2
    INCOMPLETE = 3


MEANING: dict[Exit, str] = {
    Exit.OK: (
        "done: `consume` caught up (or did its one round), the preview or the change is complete; also when the "
        "reader of the output went away (`icegroup checkpoints demo --json | head -3`)"
    ),
    Exit.RUN_FAILED: (
        "a run or a command failed for a reason icegroup did not foresee; the log file it names (or --verbose) "
        "holds the traceback, and for a run the Dagster run says why"
    ),
    Exit.ERROR: (
        "an error icegroup names, with its remedy: a bad config or argument, a missing table, a stopped group, "
        "a refused commit or follow"
    ),
    Exit.INCOMPLETE: (
        "stopped short, run it again later: `consume --until-caught-up` did not catch up (it names each lease held "
        "elsewhere, its holder and when it is re-granted) or was stopped by SIGTERM or Ctrl-C (its leases handed "
        "back), `replay --cascade`/`--follow-upstream` left a chained "
        "group waiting, `expire` lost a race on a table, or the catalog did not answer (a commit whose answer was "
        "lost may have landed: a second run reads what landed and does not do it twice)"
    ),
}

# The catalog's answer never came: the connection dropped or timed out, or a gateway answered 5xx in its
# place. A commit may have landed or not; every verb reads what landed from the tables when it runs again,
# so the remedy is to run it again (tests/rest/test_lost_answers.py). A TLS or proxy failure is no lost
# answer: running again would fail the same way. The HTTP client's errors are in ``lost_answer``.
LOST_ANSWER: tuple[type[Exception], ...] = (CommitStateUnknownException, ServiceUnavailableError)

# The error-to-code map, most specific first: what ``main`` prints before the message, and the code.
ERRORS: tuple[tuple[type[IcegroupError], str, Exit], ...] = (
    (Interrupted, "stopped", Exit.INCOMPLETE),
    (NotCaughtUp, "not caught up", Exit.INCOMPLETE),
    (RunFailed, "run failed", Exit.RUN_FAILED),
    (IcegroupError, "error", Exit.ERROR),
)


def lost_answer(exc: Exception) -> bool:
    """Whether ``exc`` says the catalog's answer never came (and another run may well get it).

    ``requests`` (a REST catalog's client) is imported here, on an error's path, and not with the
    command: a command on a SQL catalog never loads it otherwise, and its import was 0.05 s of an
    idle ``consume``'s 1 s.
    """
    import requests

    dropped = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
    refused = (requests.exceptions.SSLError, requests.exceptions.ProxyError)
    return isinstance(exc, (*LOST_ANSWER, *dropped)) and not isinstance(exc, refused)


def exit_for(exc: IcegroupError) -> tuple[str, Exit]:
    """The label ``icegroup`` prints before a named error, and the code it exits with."""
    return next((label, code) for kind, label, code in ERRORS if isinstance(exc, kind))


def epilog() -> str:
    """The exit-code table as ``icegroup --help`` prints it: one code a paragraph."""
    rows = (
        textwrap.fill(text, 96, initial_indent=f"  {code.value}  ", subsequent_indent="     ")
        for code, text in MEANING.items()
    )
    return "exit codes:\n" + "\n".join(rows)
