"""Poison isolated to the row: which rows of a failing shard make its transform fail, found by bisection.

A shard that fails every delivery fails because of its rows (the platform's failures never count).
Under ``on_poison: isolate`` the Borrower then looks for the rows: it tries the transform on half of
the shard's files, then on half of those, down to single files, and then on halves of a file's row
positions, down to single rows. A half that passes holds no poison; a half that fails is split
again (when the first half passes, the second is known to fail without a try). What is left are
the rows that fail on their own, each with the error it raised.

This works for a transform that turns each row into its output on its own (a projection, a
filter, a UDF): a row's failure then does not depend on the rows around it. Bisection of ``k``
poison rows among ``n`` costs at most about ``2 k log2(n)`` tries (3 rows of 100,000 in one file:
79). ``max_isolated_rows`` bounds ``k``, and a shard with more, or whose failure goes away when it
is split (it needs rows together to fail), stops as a whole poison shard, as without isolation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Why a shard's rows could not be isolated (``Bisection.stopped`` and the Borrower's own checks).
NOT_ROWWISE = "the transform does not turn each row into its output on its own (it aggregates, sorts or joins)"
FILES_GONE = "its files are not in the source at its last snapshot any more"
TOGETHER = "the failure needs several rows together: no single row fails on its own"
OVER_CAP = "more than max_isolated_rows ({cap}) rows fail"
REST_FAILS = "the shard fails without its isolated rows too"


def not_isolated(reason: str) -> str:
    """Why ``on_poison: isolate`` did not apply to a shard, and the setting or fix that would change that."""
    if reason == NOT_ROWWISE:
        remedy = "isolation needs a row-wise transform; set on_poison: park to park the shard while the rest goes on"
    elif reason == TOGETHER:
        remedy = "no row can be left out on its own; fix the transform or the data"
    elif reason == REST_FAILS:
        remedy = "the other rows fail as a whole; fix the transform or the data"
    elif reason == FILES_GONE:
        remedy = "the source was rewritten or expired under the shard; fix the transform and redrive the shard"
    else:
        remedy = "raise max_isolated_rows if that many bad rows are expected, or fix the data"
    return f"on_poison: isolate could not isolate its rows: {reason}; {remedy}"


# A run of rows: a data file of the shard, and the positions [first, end) in it.
Span = tuple[str, int, int]
# Tries a set of spans: None when the transform passes on their rows, else the error it raised.
Probe = Callable[[Sequence[Span]], str | None]


@dataclass(frozen=True)
class PoisonRow:
    """A row the transform fails on, by itself: its file, its position in the file, and the error."""

    file: str
    pos: int
    error: str


@dataclass
class Bisection:
    """What bisecting a failing shard found; ``rows`` is complete only when ``stopped`` is None."""

    rows: list[PoisonRow] = field(default_factory=list)
    probes: int = 0
    stopped: str | None = None


def rows_in(spans: Sequence[Span]) -> int:
    """How many rows ``spans`` hold."""
    return sum(end - first for _, first, end in spans)


def halves(spans: Sequence[Span]) -> tuple[list[Span], list[Span]]:
    """Split spans into two with about as many rows each: whole files while there are several, else positions."""
    if len(spans) > 1:
        total, running, cut = rows_in(spans), 0, 1
        for index, (_, first, end) in enumerate(spans[:-1], start=1):
            running += end - first
            cut = index
            if running * 2 >= total:
                break
        return list(spans[:cut]), list(spans[cut:])
    ((path, first, end),) = spans
    middle = first + (end - first) // 2
    return [(path, first, middle)], [(path, middle, end)]


def bisect(spans: Sequence[Span], error: str, probe: Probe, cap: int) -> Bisection:
    """The rows of ``spans`` (which fail as a whole, with ``error``) that fail on their own.

    When the first half of a failing set passes, the second must hold the failure, so it is not
    tried; a single row reached that way is tried once, to confirm it fails by itself. Stops
    (``Bisection.stopped`` says why) once more than ``cap`` rows were found, or when a failing set
    of rows has halves that each pass, or a row that passes alone: that failure is not any single row's.
    """
    found = Bisection()
    together = TOGETHER
    pending: list[tuple[list[Span], str, bool]] = [(list(spans), error, False)]
    while pending:
        failing, why, inferred = pending.pop()
        if rows_in(failing) == 1:
            ((path, first, _),) = [span for span in failing if span[2] > span[1]]
            if inferred:
                found.probes += 1
                confirmed = probe(failing)
                if confirmed is None:
                    found.stopped = together
                    return found
                why = confirmed
            found.rows.append(PoisonRow(path, first, why))
            if len(found.rows) > cap:
                found.stopped = OVER_CAP.format(cap=cap)
                return found
            continue
        first_half, second_half = (part for part in halves(failing))
        failed: list[tuple[list[Span], str, bool]] = []
        for part in (first_half, second_half):
            if not rows_in(part):
                continue
            if part is second_half and not failed and rows_in(first_half):
                failed.append((part, why, True))  # the first half passed: the failure is in this one
                continue
            found.probes += 1
            part_error = probe(part)
            if part_error is not None:
                failed.append((part, part_error, False))
        if not failed:
            found.stopped = together
            return found
        pending += reversed(failed)
    found.rows.sort(key=lambda row: (row.file, row.pos))
    return found


def positions_by_file(rows: Sequence[PoisonRow]) -> dict[str, list[int]]:
    """The isolated rows as file -> sorted positions: what a commit records and a read excludes."""
    out: dict[str, list[int]] = {}
    for row in rows:
        out.setdefault(row.file, []).append(row.pos)
    return {path: sorted(positions) for path, positions in sorted(out.items())}


def redrive_id(shard_id: str) -> str:
    """The id a re-drive of ``shard_id``'s isolated rows commits under: 16 hex digits, its own, always the same.

    The fenced commit refuses an id already in the sink, so two re-drives of one shard cannot both land.
    """
    return hashlib.sha256(f"redrive:{shard_id}".encode()).hexdigest()[:16]
