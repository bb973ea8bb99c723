"""The error a person reads when a shard's read or transform fails, and whose failure it is.

A failure inside a Spark task reaches the driver wrapped in py4j and JVM exceptions; the Borrower's
redelivery logs and the dead-letter table record what ``describe_error`` makes of it. Only a failure
of the user's transform or data counts toward ``max_deliver``: one whose cause chain shows the
catalog, storage or network failing (``is_infrastructure``) is the platform's, and is retried.
"""

from __future__ import annotations

import logging
import re
import traceback
from pathlib import Path

log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    """What went wrong, for a person: the root cause's type and message, and where it was raised.

    A transform that raises inside a Spark task reaches the driver wrapped twice: py4j's error
    around a JVM ``PythonException``, whose message is the Python worker's traceback as text. The
    user's own exception is its last line, and the user's code its last frame outside Spark; that is
    what is shown. A JVM error shows its root cause; a plain Python error its type, message and
    last frame. The whole chain goes to the debug log.
    """
    log.debug("delivery failed", exc_info=exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        while java.getCause() is not None:
            java = java.getCause()
        message = str(java.getMessage() or "")
        return _python_error(message) or _cut(f"{java.getClass().getSimpleName()}: {_first(message)}")
    text = str(exc)
    from_worker = _python_error(text)
    if from_worker is not None:
        return from_worker
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_spark(f.filename)]
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    message = _first(text)
    return _cut(f"{type(exc).__name__}{': ' + message if message else ''}{where}")


TRACEBACK = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def _python_error(text: str) -> str | None:
    """The last exception of a Python traceback given as text, and its last frame outside Spark."""
    if TRACEBACK not in text:
        return None
    lines = text[text.rindex(TRACEBACK) + len(TRACEBACK) :].splitlines()
    frames = [m for m in (FRAME.match(line) for line in lines) if m is not None and not _is_spark(m.group(1))]
    errors = [line.strip() for line in lines if line.strip() and not line.startswith((" ", "\t"))]
    if not errors:
        return None
    where = f" (at {Path(frames[-1].group(1)).name}:{frames[-1].group(2)} in {frames[-1].group(3)})" if frames else ""
    return _cut(f"{errors[-1]}{where}")


def _is_spark(path: str) -> bool:
    return any(part in path for part in ("/pyspark/", "pyspark.zip", "/py4j/", "py4j-"))


def _first(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _cut(text: str) -> str:
    return text[:400]


# Failures of the platform, not of the user's transform or data: another try may well succeed, so
# they never count toward max_deliver. Matched by class name along the whole cause chain, Python's
# and the JVM's (a simple name, or a package prefix).
INFRASTRUCTURE = (
    "java.sql.",
    "java.net.",
    "java.io.IOException",
    "java.io.FileNotFoundException",
    "java.util.concurrent.TimeoutException",
    "org.postgresql.util.PSQLException",
    "org.sqlite.SQLiteException",
    "org.apache.iceberg.jdbc.UncheckedSQLException",
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.ServiceUnavailableException",
    "org.apache.iceberg.exceptions.RESTException",
    "org.apache.iceberg.exceptions.ServiceFailureException",
    "org.apache.iceberg.exceptions.CommitStateUnknownException",
    "org.apache.iceberg.exceptions.RuntimeIOException",
    "org.apache.spark.scheduler.ExecutorLostFailure",
    "sqlalchemy.exc.OperationalError",
    "sqlalchemy.exc.InterfaceError",
    "sqlalchemy.exc.DisconnectionError",
    "sqlite3.OperationalError",
    "psycopg2.OperationalError",
    "builtins.ConnectionError",
    "builtins.ConnectionRefusedError",
    "builtins.ConnectionResetError",
    "builtins.TimeoutError",
    "py4j.protocol.Py4JNetworkError",
    "requests.exceptions.ConnectionError",
    "requests.exceptions.Timeout",
    "pyiceberg.exceptions.ServiceUnavailableError",
    "pyiceberg.exceptions.ServerError",
    "pyiceberg.exceptions.CommitStateUnknownException",
    "icegroup.iceberg.errors.CatalogUnavailable",
    "icegroup.iceberg.errors.PlatformUnavailable",
)


def failure_classes(exc: BaseException) -> list[str]:
    """Every class along the failure's cause chain: Python's ``__cause__``/``__context__`` and the JVM's causes.

    A context that ``raise ... from None`` suppressed is followed too: PySpark converts JVM errors
    that way (``raise converted from None``), and the JVM's causes are only in that context.
    """
    names: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names.append(f"{type(current).__module__}.{type(current).__qualname__}")
        java = getattr(current, "java_exception", None)
        while java is not None:
            names.append(str(java.getClass().getName()))
            java = java.getCause()
        current = current.__cause__ or current.__context__
    return names


def is_infrastructure(names: list[str]) -> bool:
    """Whether a failure with these classes along its chain is the platform's (catalog, storage, network)."""
    return any(
        name == known or (known.endswith(".") and name.startswith(known)) for name in names for known in INFRASTRUCTURE
    )


# Iceberg's reference handlers up to 1.10 (its REST fixture; Polaris before apache/polaris#5138) answer a
# commit that lost the race for the table's next sequence number with 400, where other servers answer
# 409. Nothing was applied, so it is a lost race like a CommitFailedException, not a fault of the shard.
LOST_SEQUENCE_RACE = "Cannot add snapshot with sequence number"


def failure_messages(exc: BaseException) -> list[str]:
    """Every message along the failure's cause chain, Python's and the JVM's, as ``failure_classes`` walks it."""
    messages: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        messages.append(str(current))
        java = getattr(current, "java_exception", None)
        while java is not None:
            messages.append(str(java.getMessage() or ""))
            java = java.getCause()
        current = current.__cause__ or current.__context__
    return messages


def is_platform_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the platform's (``is_infrastructure``) or a lost race a server answered with 400."""
    classes = failure_classes(exc)
    if is_infrastructure(classes):
        return True
    bad_request = any(name.endswith(("BadRequestException", "BadRequestError")) for name in classes)
    return bad_request and any(LOST_SEQUENCE_RACE in text for text in failure_messages(exc))
