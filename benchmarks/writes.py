"""Benchmark of approval-bound writes against the bare write, in the same run.

Run with ``.venv/bin/python benchmarks/writes.py`` (or ``make bench``).

The workload is the demo's inventory (:mod:`hatp.demo._inventory`): each
plan makes two corrections on two rows of its own, ``adjust_stock(-3)`` and
``set_unit("case")``, proposed and approved beforehand (not timed). One
hatp operation is ``Writes.execute`` of an approved plan version: its key
reserved, the records re-read and compared with the snapshot, the
corrections applied, the postcondition checked, the key completed and the
journal entry appended. The bare write is the same two corrections (the same
``Correction.apply`` code, on rows of its own in the same table) in one
``Store.transaction``, with no key, no snapshot check and no journal.

Printed for SQLite (WAL, ``synchronous=FULL``) and PostgreSQL
(``synchronous_commit=on``; a fresh database on ``--postgres``, dropped
afterwards; skipped, with the reason, when no server answers):

1. executes/s beside bare writes/s, interleaved, and the ratio of their best
   per-operation times (target: within 1.5x, PASS or MISS);
2. where an execute's time goes: each database transaction it opens (its
   statements, the tables they touch, begin / body / commit) and the work
   outside any transaction, beside the bare write's single transaction.

Each figure is the best of several repeats (the median is shown too). No
timing is asserted; the exit status is 1 only if an execute did not run (a
correctness failure, not a slow one). ``--quick`` shrinks every count so a
test can smoke-run the script; ``--profile`` adds a cProfile listing of
executes on SQLite.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from _timing import Timing
from _trip_rig import create_database, drop_database
from hatp.clock import ManualClock
from hatp.demo._inventory import POLICY, registry, stock
from hatp.store import Store, open_store
from hatp.writes import ExecutionStatus, Principal, Writes, draft_plan

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TARGET = 1.5
#: The context row's plans: this many pairs of rows, two corrections each.
WIDE = 10
AGENT = Principal("agent://acme.com/stock-bot", "agent")
OWNER = "human://acme.com/dana"
APPROVER = Principal("human://acme.com/erin", "human")
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Settings:
    repeats: int
    per_repeat: int
    instrumented: int
    profiled: int


FULL = Settings(repeats=7, per_repeat=150, instrumented=100, profiled=500)
QUICK = Settings(repeats=2, per_repeat=10, instrumented=5, profiled=20)


# --------------------------------------------------------------------------- the workload


class Rows:
    """Hands out fresh pairs of SKUs; every one is stocked before anything is timed."""

    def __init__(self, first: int) -> None:
        self._next = first

    def pair(self) -> tuple[str, str]:
        self._next += 2
        return f"SKU-{self._next - 1}", f"SKU-{self._next}"

    @staticmethod
    def stock(store: Store, first: int, count: int) -> None:
        stock(store, {f"SKU-{n}": (1000, "each") for n in range(first + 1, first + count + 1)})


def corrections(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """For each pair of rows: ``adjust_stock(-3)`` on the first, ``set_unit`` on the second."""
    made: list[tuple[str, dict[str, Any]]] = []
    for adjusted, relabelled in pairs:
        made.append(("adjust_stock", {"sku": adjusted, "delta": -3, "reason": "cycle count"}))
        made.append(("set_unit", {"sku": relabelled, "unit": "case"}))
    return made


class Workload:
    """One store with the inventory and a Writes on it; approved plans and bare writes."""

    def __init__(self, store: Store, ops: int, width: int = 1, first: int = 0) -> None:
        self.store = store
        self.width = width  # pairs of rows per plan (or bare write)
        self.registry = registry()
        Rows.stock(store, first, 2 * width * ops)
        self.rows = Rows(first)
        self.writes = Writes(store, self.registry, POLICY, ManualClock(NOW), lease_seconds=30.0)
        self.plans = 0
        self.outcomes: list[ExecutionStatus] = []

    def approved(self, count: int) -> list[str]:
        """``count`` plans, each on two fresh rows, proposed and approved (v1)."""
        ids = []
        for _ in range(count):
            self.plans += 1
            plan_id = f"bench-{self.width}x-{self.plans:07d}"
            with self.store.transaction() as conn:
                doc = draft_plan(
                    conn,
                    self.registry,
                    plan_id=plan_id,
                    version=1,
                    corrections=self.corrections(),
                    proposed_by=AGENT.id,
                    on_behalf_of=OWNER,
                )
            self.writes.propose(doc, AGENT)
            self.writes.approve(plan_id, 1, APPROVER)
            ids.append(plan_id)
        return ids

    def corrections(self) -> list[tuple[str, dict[str, Any]]]:
        return corrections([self.rows.pair() for _ in range(self.width)])

    def execute(self, plan_id: str) -> None:
        self.outcomes.append(self.writes.execute(plan_id, 1, "bench").status)

    def bare_ops(self, count: int, store: Any = None) -> list[Callable[[], None]]:
        """``count`` bare writes, each on two fresh rows: the corrections, one transaction."""
        sets = self.registry.sets
        target = self.store if store is None else store
        ops = []
        for _ in range(count):
            steps = []
            for name, params in self.corrections():
                correction = self.registry.correction(name)
                if correction is None:  # pragma: no cover - both are on the allowlist
                    raise LookupError(name)
                steps.append((correction, correction.params.model_validate(params)))

            def op(steps: list[tuple[Any, Any]] = steps) -> None:
                with target.transaction() as conn:
                    for correction, params in steps:
                        correction.apply(conn, sets, params)

            ops.append(op)
        return ops


def ops_needed(settings: Settings) -> int:
    """Executes and bare writes: the warm-up, the timed repeats, the instrumented pass."""
    warm = max(5, settings.per_repeat // 10)
    return 2 * (warm + settings.per_repeat * settings.repeats + settings.instrumented) + 10


# --------------------------------------------------------------------------- timing


def interleaved(work: Workload, settings: Settings) -> tuple[Timing, Timing]:
    """Per repeat: ``per_repeat`` executes, then as many bare writes; seconds per op."""
    ours, bare = [], []
    for _ in range(settings.repeats):
        plans = work.approved(settings.per_repeat)
        started = time.perf_counter()
        for plan_id in plans:
            work.execute(plan_id)
        ours.append((time.perf_counter() - started) / len(plans))
        ops = work.bare_ops(settings.per_repeat)
        started = time.perf_counter()
        for op in ops:
            op()
        bare.append((time.perf_counter() - started) / len(ops))
    return Timing(tuple(ours)), Timing(tuple(bare))


# --------------------------------------------------------------------------- breakdown


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
        shapes.append(f"{counts} statements: {tables(nth[0].statements)}")
    return Split(len(per_op), statistics.fmean(totals), means, shapes)


def split_executes(work: Workload, count: int) -> tuple[Split, Split]:
    """The instrumented pass: ``count`` executes, then ``count`` bare writes, part by part."""
    timed = TimedStore(work.store)
    try:
        traced = Writes(timed, work.registry, POLICY, ManualClock(NOW), lease_seconds=30.0)  # type: ignore[arg-type]

        def execute(plan_id: str) -> Callable[[], None]:
            return lambda: work.outcomes.append(traced.execute(plan_id, 1, "bench").status)

        ours = instrumented([execute(p) for p in work.approved(count)], timed)
        theirs = instrumented(work.bare_ops(count, timed), timed)
    finally:
        timed.close()
    return ours, theirs


# --------------------------------------------------------------------------- output


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


@dataclass(frozen=True)
class Result:
    name: str
    hatp: Timing
    bare: Timing
    ours: Split
    theirs: Split
    wide_hatp: Timing
    wide_bare: Timing

    @property
    def ratio(self) -> float:
        return self.hatp.best / self.bare.best

    def line(self) -> str:
        verdict = "PASS" if self.ratio <= TARGET else "MISS"
        return (
            f"{self.name:<11} execute {ms(self.hatp.best):>7} ms ({1 / self.hatp.best:7.0f}/s, "
            f"median {ms(self.hatp.median)})  bare write {ms(self.bare.best):>7} ms "
            f"({1 / self.bare.best:7.0f}/s, median {ms(self.bare.median)})  "
            f"ratio {self.ratio:5.2f}x  <={TARGET:.1f}x {verdict}"
        )

    def wide_line(self) -> str:
        hatp, bare = self.wide_hatp.best, self.wide_bare.best
        return (
            f"{self.name:<11} {2 * WIDE} corrections: execute {ms(hatp)} ms, bare write "
            f"{ms(bare)} ms, ratio {hatp / bare:5.2f}x (context: the bookkeeping costs "
            f"{ms(hatp - bare)} ms here, {ms(self.hatp.best - self.bare.best)} ms at 2)"
        )


def print_split(result: Result) -> None:
    ours, theirs = result.ours, result.theirs
    print(
        f"  {result.name}: one execute {ms(ours.total)} ms (mean of {ours.count}, "
        f"instrumented) in {len(ours.spans)} transactions; the bare write "
        f"{ms(theirs.total)} ms in {len(theirs.spans)}"
    )
    for index, (span, shape) in enumerate(zip(ours.spans, ours.shapes, strict=True), start=1):
        print(
            f"    txn {index}: {ms(span.total)} ms (begin {ms(span.begin)}, body "
            f"{ms(span.body)}, commit {ms(span.commit)})  {shape}"
        )
    print(
        f"    outside any transaction: {ms(ours.outside)} ms (the executor's Python between "
        "its transactions: plan checks, the policy, the key's digest, the outcome)"
    )
    for span, shape in zip(theirs.spans, theirs.shapes, strict=True):
        print(
            f"    bare: {ms(span.total)} ms (begin {ms(span.begin)}, body {ms(span.body)}, "
            f"commit {ms(span.commit)})  {shape}"
        )
    commits = [s.commit for s in ours.spans]
    bare_commit = theirs.spans[0].commit if theirs.spans else 0.0
    print(
        f"    commits: {' + '.join(ms(c) for c in commits)} = {ms(sum(commits))} ms vs the "
        f"bare write's one {ms(bare_commit)} ms; statements "
        f"{sum(len(s.statements) for s in ours.spans)} vs "
        f"{sum(len(s.statements) for s in theirs.spans)}"
    )


def measure(name: str, store: Store, settings: Settings) -> Result:
    work = Workload(store, ops_needed(settings))
    warm = Settings(1, max(5, settings.per_repeat // 10), 0, 0)
    interleaved(work, warm)
    hatp, bare = interleaved(work, settings)
    ours, theirs = split_executes(work, settings.instrumented)
    bad = [s for s in work.outcomes if s is not ExecutionStatus.EXECUTED]
    journal = len(work.writes.journal())
    if bad or journal != work.plans:
        raise SystemExit(
            f"{name}: {len(bad)} executes did not run, {journal} journal entries for "
            f"{work.plans} plans: a correctness failure"
        )
    # Context: the same bookkeeping over a plan WIDE times as big.
    fewer = Settings(settings.repeats, max(5, settings.per_repeat // 5), 0, 0)
    wide = Workload(store, ops_needed(fewer), WIDE, first=2 * ops_needed(settings))
    interleaved(wide, Settings(1, 5, 0, 0))
    wide_hatp, wide_bare = interleaved(wide, fewer)
    return Result(name, hatp, bare, ours, theirs, wide_hatp, wide_bare)


# --------------------------------------------------------------------------- profile


def profile_sqlite(folder: Path, count: int) -> None:
    store = open_store(folder / "profile.db")
    try:
        work = Workload(store, count)
        plans = work.approved(count)
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for plan_id in plans:
            work.execute(plan_id)
        profiler.disable()
        wall = time.perf_counter() - started
    finally:
        store.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(r"hatp", 30)
    print(
        f"\n--- cProfile: {count} executes on SQLite, {wall / count * 1e3:.2f} ms each under "
        "the profiler (it inflates code made of many small calls); hatp's functions by "
        "cumulative time ---"
    )
    print(out.getvalue().split("\n", 4)[-1].rstrip())


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create a DB on")
    parser.add_argument("--profile", action="store_true", help="add a cProfile listing (SQLite)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    print(
        f"hatp writes benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}, SQLAlchemy {sa.__version__}, psycopg "
        f"{psycopg.__version__}; {settings.repeats} repeats of {settings.per_repeat} "
        "executes and as many bare writes, interleaved, best shown"
    )
    print(
        "workload: an approved plan of 2 corrections on 2 rows (adjust_stock -3, set_unit "
        "case); bare = the same Correction.apply calls in one transaction, no bookkeeping"
    )
    results: list[Result] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hatp-writes-bench-") as tmp:
        folder = Path(tmp)
        store = open_store(folder / "inventory.db")
        try:
            results.append(measure("sqlite", store, settings))
        finally:
            store.close()
        database, where = create_database(args.postgres)
        print(f"postgresql: {where}")
        if database is None:
            skipped.append(where)
        else:
            try:
                store = open_store(database)
                try:
                    results.append(measure("postgresql", store, settings))
                finally:
                    store.close()
            finally:
                drop_database(args.postgres, database)
        print()
        for result in results:
            print(result.line())
        for line in skipped:
            print(f"{'postgresql':<11} skipped: {line}")
        print(
            "ratio = best execute / best bare write (seconds per operation); "
            f"target {TARGET:.1f}x or less"
        )
        for result in results:
            print(result.wide_line())
        print("\nwhere the time goes:")
        for result in results:
            print_split(result)
        if args.profile:
            profile_sqlite(folder, settings.profiled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
