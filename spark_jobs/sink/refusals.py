"""The fenced commit's refusals: each Java exception it raises, mapped to one of icegroup's errors, in one place.

The Java side (``spark_jobs/sink/jvm``) refuses a commit with its own exception classes; Python sees
them through py4j by class name. A fence verdict (``Fenced``, ``AlreadyCommitted``, ``WindowMoved``)
is final for the attempt. Staged output an expiry took before its publish (``StagedOutputGone``) is
staged again. The commit's other refusals (its own checks: the sink's history expired, a sink
without write-audit-publish; a swap that kept losing) are a ``SinkError`` that names what is wrong.
None of them is ever the shard's fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from icegroup.iceberg.errors import AlreadyCommitted, Fenced, IcegroupError, SinkError, StagedOutputGone, WindowMoved

REFUSALS: dict[str, type[IcegroupError]] = {
    "icegroup.commit.FencedCommit$Fenced": Fenced,
    "icegroup.commit.FencedCommit$AlreadyCommitted": AlreadyCommitted,
    "icegroup.commit.FencedCommit$StagedGone": StagedOutputGone,
    "icegroup.commit.WindowReplace$WindowMoved": WindowMoved,
    "org.apache.iceberg.exceptions.ValidationException": SinkError,
    "org.apache.iceberg.exceptions.CommitFailedException": SinkError,
    "java.lang.IllegalStateException": SinkError,
}


@dataclass(frozen=True)
class Refusal:
    """A commit the Java side refused: the error class icegroup raises for it, and the Java message."""

    error: type[IcegroupError]
    message: str


def refusal(java_exception: Any) -> Refusal | None:
    """The refusal a Java exception (a ``Py4JJavaError``'s ``java_exception``, or a refused request's) is.

    None for any other Java failure: it is raised as it came.
    """
    error = REFUSALS.get(str(java_exception.getClass().getName()))
    return None if error is None else Refusal(error, str(java_exception.getMessage()))
