"""Where a benchmark's time goes: a Store that times each transaction it opens.

:class:`TimedStore` wraps a :class:`hatp.store.Store` and records, for every
transaction opened through it, its begin, body and commit times and the
statements SQLAlchemy's Core ran in it (those run on the DB-API driver, as hatp's
bookkeeping and record reads are, are not seen); :func:`instrumented` runs operations through
it and averages their transactions. Used by ``benchmarks/writes.py``.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from hatp.store import Store


@dataclass
class Span:
    """One database transaction: begin, body and commit seconds, and its statements."""

    begin: float = 0.0
    body: float = 0.0
    commit: float = 0.0
    statements: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.begin + self.body + self.commit


class TimedStore:
    """A Store that times every transaction it opens and collects its statements.

    Handed to ``Writes`` in place of the store: it only calls ``transaction``
    (and ``driver_transaction``), so the split needs nothing from its internals.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self.spans: list[Span] = []
        self._current: Span | None = None
        event.listen(Engine, "before_cursor_execute", self._on_statement)

    def close(self) -> None:
        event.remove(Engine, "before_cursor_execute", self._on_statement)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _on_statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self._current is not None:
            self._current.statements.append(statement)

    @contextmanager
    def _timed(self, opened: Any) -> Iterator[Any]:
        span = Span()
        started = time.perf_counter()
        with opened as conn:
            span.begin = time.perf_counter() - started
            self._current = span
            body = time.perf_counter()
            try:
                yield conn
            finally:
                self._current = None
                span.body = time.perf_counter() - body
                ending = time.perf_counter()
        span.commit = time.perf_counter() - ending
        self.spans.append(span)

    def transaction(self) -> Any:
        return self._timed(self._store.transaction())

    def driver_transaction(self) -> Any:
        return self._timed(self._store.driver_transaction())


_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+\"?(\w+)", re.IGNORECASE)


def tables(statements: Sequence[str]) -> str:
    seen: dict[str, None] = {}
    for statement in statements:
        verb = statement.split(None, 1)[0].upper() if statement.strip() else "?"
        for table in _TABLE.findall(statement):
            seen.setdefault(f"{verb} {table}", None)
    return ", ".join(seen) or "-"


@dataclass
class Split:
    """Mean time per operation, by transaction (in the order opened), and outside them."""

    count: int
    total: float
    spans: list[Span]  # the mean span of the i-th transaction of an operation
    shapes: list[str]

    @property
    def outside(self) -> float:
        return self.total - sum(span.total for span in self.spans)


def instrumented(ops: Sequence[Callable[[], None]], timed: TimedStore) -> Split:
    totals: list[float] = []
    per_op: list[list[Span]] = []
    for op in ops:
        timed.spans.clear()
        started = time.perf_counter()
        op()
        totals.append(time.perf_counter() - started)
        per_op.append(list(timed.spans))
    width = max(len(spans) for spans in per_op)
    means, shapes = [], []
    for index in range(width):
        nth = [spans[index] for spans in per_op if len(spans) > index]
        share = len(nth) / len(per_op)  # a transaction not every operation opens
        means.append(
            Span(
                begin=statistics.fmean(s.begin for s in nth) * share,
                body=statistics.fmean(s.body for s in nth) * share,
                commit=statistics.fmean(s.commit for s in nth) * share,
                statements=nth[0].statements,
            )
        )
        counts = "/".join(str(c) for c in sorted({len(s.statements) for s in nth}))
        shapes.append(f"{counts} Core statements: {tables(nth[0].statements)}")
    return Split(len(per_op), statistics.fmean(totals), means, shapes)
