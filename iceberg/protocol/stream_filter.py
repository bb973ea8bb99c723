"""Which streams a group's filter can match: a stream it provably cannot is neither planned nor lag.

The Borrower applies the filter to rows as Spark SQL (``df.where(filter)``); pyiceberg only parses
it here. Leaving a stream out must therefore never disagree with Spark, or its rows would be lost.
A stream is left out only when the filter is false (or null) for the one value that every row of
the stream holds in an identity partition column, under rules both dialects share: comparisons
(``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``NOT IN``) of a string, integer or boolean
column with literals of that same kind, ``IS NULL`` and ``IS NOT NULL``, combined with ``AND``,
``OR`` and ``NOT``. A comparison with a null value is null in SQL, so it matches no row.

Everything else is kept: predicates on other columns, on columns partitioned by another transform
(``days(ts)``, ``bucket``), ``LIKE`` (Spark's ``_`` wildcard and escapes are not pyiceberg's prefix
match), literals of another kind than the column's (Spark casts them its own way), and any filter
written with a double quote, a backtick, a backslash or a doubled single quote, which the two
parsers read differently (``"a"`` is a column to pyiceberg and a string to Spark).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.expressions import (
    BooleanExpression,
    BoundPredicate,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    LiteralPredicate,
    NotEqualTo,
    NotIn,
    NotNull,
    Reference,
    SetPredicate,
    UnboundPredicate,
)
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import BooleanExpressionVisitor, rewrite_not, visit

from icegroup.iceberg.protocol.shards import PartitionValue

# Text the pyiceberg parser and Spark SQL read differently; a filter holding any of it prunes nothing.
AMBIGUOUS_TEXT = ('"', "`", "\\", "''")
COMPARISONS = (
    EqualTo,
    NotEqualTo,
    LessThan,
    LessThanOrEqual,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    NotIn,
)


def stream_predicate(text: str | None) -> BooleanExpression | None:
    """The filter as a predicate over a stream's identity values; None when it can leave no stream out.

    ``NOT`` is pushed down to the predicates first (``NOT a = 'x'`` is ``a != 'x'``, which SQL's
    three-valued logic agrees with, nulls included), so the evaluation below never meets one.
    """
    if not text or any(mark in text for mark in AMBIGUOUS_TEXT):
        return None
    predicate = rewrite_not(parse_filter(text))
    return predicate if decidable_columns(predicate) else None


def decidable_columns(predicate: BooleanExpression) -> frozenset[str]:
    """Columns the predicate names in a form ``may_match`` can decide on; no other column prunes."""
    columns: set[str] = set()
    visit(predicate, _Columns(columns))
    return frozenset(columns)


def may_match(predicate: BooleanExpression | None, identity: Mapping[str, PartitionValue]) -> bool:
    """False only when no row whose identity partition columns hold ``identity`` can match the filter.

    ``identity`` maps identity-partitioned columns of a plain type to the value every row of the
    file or stream holds (``icegroup.iceberg.shards.identity_values``). A column it lacks is unknown, and an
    unknown predicate may match.
    """
    return predicate is None or visit(predicate, _MayMatch(identity))


def _column(predicate: UnboundPredicate) -> str | None:
    term = predicate.term
    return term.name if isinstance(term, Reference) else None


def _decidable(predicate: UnboundPredicate) -> bool:
    return isinstance(predicate, (IsNull, NotNull, *COMPARISONS)) and _column(predicate) is not None


class _Columns(BooleanExpressionVisitor[None]):
    """Collects the columns of decidable predicates."""

    def __init__(self, into: set[str]) -> None:
        self.into = into

    def visit_true(self) -> None:
        return None

    def visit_false(self) -> None:
        return None

    def visit_not(self, child_result: None) -> None:
        return None

    def visit_and(self, left_result: None, right_result: None) -> None:
        return None

    def visit_or(self, left_result: None, right_result: None) -> None:
        return None

    def visit_unbound_predicate(self, predicate: UnboundPredicate) -> None:
        column = _column(predicate)
        if column is not None and _decidable(predicate):
            self.into.add(column)

    def visit_bound_predicate(self, predicate: BoundPredicate) -> None:
        return None


class _MayMatch(BooleanExpressionVisitor[bool]):
    """True unless the predicate is provably false or null for every row with these identity values."""

    def __init__(self, identity: Mapping[str, PartitionValue]) -> None:
        self.identity = identity

    def visit_true(self) -> bool:
        return True

    def visit_false(self) -> bool:
        return False

    def visit_not(self, child_result: bool) -> bool:
        return True  # rewrite_not leaves none; should one appear, negating "may match" proves nothing

    def visit_and(self, left_result: bool, right_result: bool) -> bool:
        return left_result and right_result

    def visit_or(self, left_result: bool, right_result: bool) -> bool:
        return left_result or right_result

    def visit_bound_predicate(self, predicate: BoundPredicate) -> bool:
        return True

    def visit_unbound_predicate(self, predicate: UnboundPredicate) -> bool:
        column = _column(predicate)
        if column is None or column not in self.identity or not _decidable(predicate):
            return True
        value = self.identity[column]
        if isinstance(predicate, IsNull):
            return value is None
        if isinstance(predicate, NotNull):
            return value is not None
        if value is None:
            return False  # SQL: a comparison with null is null, and null matches no row
        if isinstance(predicate, LiteralPredicate):
            literals = [predicate.literal.value]
        elif isinstance(predicate, SetPredicate):
            literals = [literal.value for literal in predicate.literals]
        else:
            return True
        if any(type(literal) is not type(value) for literal in literals):
            return True  # another kind than the column's: Spark casts it its own way
        return _compare(predicate, value, literals)


def _compare(predicate: UnboundPredicate, value: str | int | bool, literals: list[object]) -> bool:
    """The predicate on a non-null value, with literals of the value's own type."""
    first = literals[0]
    if isinstance(predicate, EqualTo):
        return bool(value == first)
    if isinstance(predicate, NotEqualTo):
        return bool(value != first)
    if isinstance(predicate, In):
        return value in literals
    if isinstance(predicate, NotIn):
        return value not in literals
    if isinstance(predicate, LessThan):
        return bool(value < first)  # type: ignore[operator]
    if isinstance(predicate, LessThanOrEqual):
        return bool(value <= first)  # type: ignore[operator]
    if isinstance(predicate, GreaterThan):
        return bool(value > first)  # type: ignore[operator]
    if isinstance(predicate, GreaterThanOrEqual):
        return bool(value >= first)  # type: ignore[operator]
    return True


def pruning_predicate(text: str | None, identity_columns: frozenset[str]) -> BooleanExpression | None:
    """The filter ``text`` as a predicate on streams, or None when it cannot leave out any of a table's streams.

    Only a filter on a column the table is partitioned by identity (``identity_columns``) can.
    """
    predicate = stream_predicate(text)
    if predicate is None or not decidable_columns(predicate) & identity_columns:
        return None
    return predicate
