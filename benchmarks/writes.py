"""Benchmark of approval-bound writes against the floor their rules imply (issue 24).

Run with ``.venv/bin/python benchmarks/writes.py`` (or ``make bench``).

The workload is the demo's inventory (:mod:`hatp.demo._inventory`): each
plan makes two corrections on two rows of its own, ``adjust_stock(-3)`` and
``set_unit("case")``, proposed and approved beforehand (not timed). One
hatp operation is ``Writes.execute`` of an approved plan version: its key
reserved, the records re-read and compared with the snapshot, the
corrections applied, the postcondition checked, the key completed and the
journal entry appended. Beside it, on rows of their own in the same table,
each with the same ``Correction.apply`` code:

- the **bare write**: the two corrections in one ``Store.transaction``, with
  no key, no snapshot check and no journal;
- the **floor**, what the rules require of an execute, done bare: first the
  reservation of the execution key, committed before the write (one small
  ``INSERT`` in a transaction of its own), then one transaction that re-reads
  the touched rows (one ``SELECT``, ``FOR UPDATE`` on PostgreSQL; on SQLite
  the transaction's ``BEGIN IMMEDIATE`` already holds the write lock) and
  applies the two corrections. The reservation commits as the rules require
  and hatp does: on SQLite durably (``synchronous=FULL``: the level cannot
  change inside a transaction); on PostgreSQL without waiting for its WAL
  flush (``synchronous_commit = off`` for that transaction, set in the
  ``INSERT``'s ``RETURNING`` as hatp does), since the rules need it committed
  and seen by other workers before the write, not flushed (docs/spec.md,
  "The reservation's durability"). Reading the records again after the write
  ([WRITE-VERIFY]), completing the key and the journal entry are hatp's
  bookkeeping, not in the floor.

Printed for SQLite (WAL, ``synchronous=FULL``) and PostgreSQL
(``synchronous_commit=on``; a fresh database on ``--postgres``, dropped
afterwards; skipped, with the reason, when no server answers), the three
interleaved (per repeat: the executes, then as many floors, then as many bare
writes):

1. executes/s beside the floor, and the ratio of their best per-operation
   times (target: within 1.5x, PASS or MISS);
2. the bookkeeping per execute: best execute minus best bare write, in ms
   (target: 0.5 ms on SQLite, 1 ms on PostgreSQL, PASS or MISS). It holds
   the floor's own work beyond the bare write (the reservation's transaction
   and the re-read: floor minus bare write, printed beside it) and hatp's
   beyond the floor (execute minus floor); both are printed for context, as
   is the ratio to the bare write;
3. for context, the same with plans ten times as big (20 corrections), to
   show which part of the bookkeeping is fixed and which grows with the plan;
4. where an execute's time goes: each database transaction it opens (its
   statements, the tables they touch, begin / body / commit) and the work
   outside any transaction, beside the floor's two transactions and the bare
   write's one.

Each figure is the best of several repeats (the median is shown too). No
timing is asserted; the exit status is 1 only if an execute did not run (a
correctness failure, not a slow one). ``--quick`` shrinks every count so a
test can smoke-run the script; ``--profile`` adds a cProfile listing of
executes on SQLite. ``--json`` prints one JSON object on stdout,
``{"sqlite": {...}, "postgresql": {...}}``, each with ``ratio``,
``execute_ms``, ``floor_ms``, ``bare_write_ms``, ``bookkeeping_ms``, their
targets and verdicts (see :data:`JSON_KEYS`; a database not measured has
them null and says why in ``skipped``); the human report then goes to stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import psycopg
import sqlalchemy as sa

from _timed_store import Span, Split, TimedStore, instrumented
from _timing import Timing
from _trip_rig import create_database, drop_database
from hatp.clock import ManualClock
from hatp.demo._inventory import POLICY, inventory, registry, stock
from hatp.store import Store, open_store
from hatp.writes import ExecutionStatus, Principal, Writes, draft_plan

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TARGET = 1.5
#: The most bookkeeping per execute (best execute - best bare write), in seconds.
BOOKKEEPING_TARGET = {"sqlite": 0.5e-3, "postgresql": 1e-3}
#: The context row's plans: this many pairs of rows, two corrections each.
WIDE = 10
AGENT = Principal("agent://acme.com/stock-bot", "agent")
OWNER = "human://acme.com/dana"
APPROVER = Principal("human://acme.com/erin", "human")
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
#: What each database's JSON object holds; all null (with ``skipped``) when not measured.
JSON_KEYS = (
    "ratio",
    "target",
    "verdict",
    "execute_ms",
    "floor_ms",
    "bare_write_ms",
    "execute_median_ms",
    "floor_median_ms",
    "bare_write_median_ms",
    "bookkeeping_ms",
    "bookkeeping_target_ms",
    "bookkeeping_verdict",
    "bookkeeping_over_floor_ms",
    "floor_over_bare_write_ms",
    "ratio_to_bare_write",
    "reservation_commit",
)
#: The floor's reservation: a small row per execution key, in a table of its own.
_floor_metadata = sa.MetaData()
floor_keys = sa.Table(
    "bench_floor_key",
    _floor_metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("lease_until", sa.BigInteger, nullable=False),
)


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
        self.floors = 0
        self.outcomes: list[ExecutionStatus] = []
        with store.transaction() as conn:
            _floor_metadata.create_all(conn)

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

    def steps(self) -> list[tuple[Any, Any]]:
        """The next fresh rows' corrections, parsed: ``(correction, params)`` pairs."""
        steps = []
        for name, params in self.corrections():
            correction = self.registry.correction(name)
            if correction is None:  # pragma: no cover - both are on the allowlist
                raise LookupError(name)
            steps.append((correction, correction.params.model_validate(params)))
        return steps

    def bare_ops(self, count: int, store: Any = None) -> list[Callable[[], None]]:
        """``count`` bare writes, each on two fresh rows: the corrections, one transaction."""
        sets = self.registry.sets
        target = self.store if store is None else store
        ops: list[Callable[[], None]] = []
        for _ in range(count):
            steps = self.steps()

            def op(steps: list[tuple[Any, Any]] = steps) -> None:
                with target.transaction() as conn:
                    for correction, params in steps:
                        correction.apply(conn, sets, params)

            ops.append(op)
        return ops

    def floor_ops(self, count: int, store: Any = None) -> list[Callable[[], None]]:
        """``count`` floors, each on two fresh rows: the key's reservation committed, then
        the touched rows re-read (locked) and the corrections applied, in one transaction."""
        sets = self.registry.sets
        target = self.store if store is None else store
        ops: list[Callable[[], None]] = []
        for _ in range(count):
            self.floors += 1
            steps = self.steps()
            skus = sorted(params.sku for _, params in steps)
            reserve = floor_keys.insert().values(
                key=f"floor-{self.width}x-{self.floors:07d}", owner="bench", lease_until=0
            )
            reread = sa.select(inventory).where(inventory.c.sku.in_(skus)).order_by(inventory.c.sku)
            if self.store.dialect == "postgresql":
                # Committed and seen before the write, not flushed: as hatp's reservation.
                reserve = reserve.returning(
                    sa.func.set_config("synchronous_commit", "off", sa.true())
                )
                reread = reread.with_for_update()

            def op(
                steps: list[tuple[Any, Any]] = steps,
                reserve: Any = reserve,
                reread: Any = reread,
            ) -> None:
                with target.transaction() as conn:
                    conn.execute(reserve)
                with target.transaction() as conn:
                    conn.execute(reread).all()
                    for correction, params in steps:
                        correction.apply(conn, sets, params)

            ops.append(op)
        return ops


def ops_needed(settings: Settings) -> int:
    """Executes, floors and bare writes: the warm-up, the timed repeats, the instrumented
    pass."""
    warm = max(5, settings.per_repeat // 10)
    return 3 * (warm + settings.per_repeat * settings.repeats + settings.instrumented) + 10


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timings:
    """One interleaved measurement: executes, floors and bare writes, seconds per op."""

    execute: Timing
    floor: Timing
    bare: Timing


def interleaved(work: Workload, settings: Settings) -> Timings:
    """Per repeat: ``per_repeat`` executes, then as many floors, then as many bare writes."""
    ours, floors, bare = [], [], []
    for _ in range(settings.repeats):
        plans = work.approved(settings.per_repeat)
        started = time.perf_counter()
        for plan_id in plans:
            work.execute(plan_id)
        ours.append((time.perf_counter() - started) / len(plans))
        floors.append(_per_op(work.floor_ops(settings.per_repeat)))
        bare.append(_per_op(work.bare_ops(settings.per_repeat)))
    return Timings(Timing(tuple(ours)), Timing(tuple(floors)), Timing(tuple(bare)))


def _per_op(ops: Sequence[Callable[[], None]]) -> float:
    started = time.perf_counter()
    for op in ops:
        op()
    return (time.perf_counter() - started) / len(ops)


@dataclass(frozen=True)
class Splits:
    """The instrumented pass, part by part: executes, floors, bare writes."""

    execute: Split
    floor: Split
    bare: Split


def split_executes(work: Workload, count: int) -> Splits:
    """The instrumented pass: ``count`` executes, floors and bare writes, part by part."""
    timed = TimedStore(work.store)
    try:
        traced = Writes(timed, work.registry, POLICY, ManualClock(NOW), lease_seconds=30.0)  # type: ignore[arg-type]

        def execute(plan_id: str) -> Callable[[], None]:
            return lambda: work.outcomes.append(traced.execute(plan_id, 1, "bench").status)

        ours = instrumented([execute(p) for p in work.approved(count)], timed)
        floor = instrumented(work.floor_ops(count, timed), timed)
        theirs = instrumented(work.bare_ops(count, timed), timed)
    finally:
        timed.close()
    return Splits(ours, floor, theirs)


# --------------------------------------------------------------------------- output


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


@dataclass(frozen=True)
class Result:
    name: str
    timings: Timings
    splits: Splits
    wide: Timings

    @property
    def ratio(self) -> float:
        return self.timings.execute.best / self.timings.floor.best

    @property
    def verdict(self) -> str:
        return "PASS" if self.ratio <= TARGET else "MISS"

    @property
    def bookkeeping(self) -> float:
        """Best execute minus best bare write, seconds: all an execute adds to the write."""
        return self.timings.execute.best - self.timings.bare.best

    @property
    def bookkeeping_target(self) -> float:
        return BOOKKEEPING_TARGET[self.name]

    @property
    def bookkeeping_verdict(self) -> str:
        return "PASS" if self.bookkeeping <= self.bookkeeping_target else "MISS"

    @property
    def reservation_commit(self) -> str:
        return "unflushed" if self.name == "postgresql" else "durable"

    def line(self) -> str:
        execute, floor = self.timings.execute, self.timings.floor
        return (
            f"{self.name:<11} execute {ms(execute.best):>7} ms ({1 / execute.best:5.0f}/s, "
            f"median {ms(execute.median)})  floor {ms(floor.best):>7} ms "
            f"({1 / floor.best:5.0f}/s, median {ms(floor.median)})  "
            f"ratio {self.ratio:5.2f}x  <={TARGET:.1f}x {self.verdict}"
        )

    def bookkeeping_line(self) -> str:
        t = self.timings
        return (
            f"{self.name:<11} bookkeeping {ms(self.bookkeeping)} ms per execute (bare write "
            f"{ms(t.bare.best)} ms, median {ms(t.bare.median)})  <="
            f"{ms(self.bookkeeping_target)} ms {self.bookkeeping_verdict}; of it the floor's "
            f"own {ms(t.floor.best - t.bare.best)} ms, beyond the floor "
            f"{ms(t.execute.best - t.floor.best)} ms (context); execute / bare write "
            f"{t.execute.best / t.bare.best:4.2f}x (context)"
        )

    def wide_line(self) -> str:
        wide = self.wide
        hatp, floor, bare = wide.execute.best, wide.floor.best, wide.bare.best
        return (
            f"{self.name:<11} {2 * WIDE} corrections: execute {ms(hatp)} ms, floor {ms(floor)} "
            f"ms ({hatp / floor:4.2f}x), bare write {ms(bare)} ms (context: the bookkeeping "
            f"costs {ms(hatp - bare)} ms here, {ms(self.bookkeeping)} ms at 2)"
        )

    def to_json(self) -> dict[str, Any]:
        t = self.timings
        return {
            "ratio": round(self.ratio, 3),
            "target": TARGET,
            "verdict": self.verdict,
            "execute_ms": _json_ms(t.execute.best),
            "floor_ms": _json_ms(t.floor.best),
            "bare_write_ms": _json_ms(t.bare.best),
            "execute_median_ms": _json_ms(t.execute.median),
            "floor_median_ms": _json_ms(t.floor.median),
            "bare_write_median_ms": _json_ms(t.bare.median),
            "bookkeeping_ms": _json_ms(self.bookkeeping),
            "bookkeeping_target_ms": _json_ms(self.bookkeeping_target),
            "bookkeeping_verdict": self.bookkeeping_verdict,
            "bookkeeping_over_floor_ms": _json_ms(t.execute.best - t.floor.best),
            "floor_over_bare_write_ms": _json_ms(t.floor.best - t.bare.best),
            "ratio_to_bare_write": round(t.execute.best / t.bare.best, 3),
            "reservation_commit": self.reservation_commit,
        }


def _json_ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


def print_split(result: Result, out: TextIO) -> None:
    ours, floor, theirs = result.splits.execute, result.splits.floor, result.splits.bare
    print(
        f"  {result.name}: one execute {ms(ours.total)} ms (mean of {ours.count}, "
        f"instrumented) in {len(ours.spans)} transactions; the floor {ms(floor.total)} ms "
        f"in {len(floor.spans)}; the bare write {ms(theirs.total)} ms in {len(theirs.spans)}",
        file=out,
    )
    for index, (span, shape) in enumerate(zip(ours.spans, ours.shapes, strict=True), start=1):
        print(f"    txn {index}: {_span(span)}  {shape}", file=out)
    print(
        f"    outside any transaction: {ms(ours.outside)} ms (the executor's Python between "
        "its transactions: plan checks, the policy, the key's digest, the outcome)",
        file=out,
    )
    for index, (span, shape) in enumerate(zip(floor.spans, floor.shapes, strict=True), start=1):
        print(f"    floor txn {index}: {_span(span)}  {shape}", file=out)
    for span, shape in zip(theirs.spans, theirs.shapes, strict=True):
        print(f"    bare: {_span(span)}  {shape}", file=out)
    commits = [s.commit for s in ours.spans]
    floor_commits = [s.commit for s in floor.spans]
    bare_commit = theirs.spans[0].commit if theirs.spans else 0.0
    print(
        f"    commits: {' + '.join(ms(c) for c in commits)} = {ms(sum(commits))} ms vs the "
        f"floor's {' + '.join(ms(c) for c in floor_commits)} = {ms(sum(floor_commits))} ms "
        f"and the bare write's one {ms(bare_commit)} ms; Core statements "
        f"{sum(len(s.statements) for s in ours.spans)} vs "
        f"{sum(len(s.statements) for s in floor.spans)} vs "
        f"{sum(len(s.statements) for s in theirs.spans)}",
        file=out,
    )


def _span(span: Span) -> str:
    return (
        f"{ms(span.total)} ms (begin {ms(span.begin)}, body {ms(span.body)}, "
        f"commit {ms(span.commit)})"
    )


def measure(name: str, store: Store, settings: Settings) -> Result:
    work = Workload(store, ops_needed(settings))
    warm = Settings(1, max(5, settings.per_repeat // 10), 0, 0)
    interleaved(work, warm)
    timings = interleaved(work, settings)
    splits = split_executes(work, settings.instrumented)
    # Context: the same bookkeeping over a plan WIDE times as big.
    fewer = Settings(settings.repeats, max(5, settings.per_repeat // 5), 0, 0)
    wide = Workload(store, ops_needed(fewer), WIDE, first=2 * ops_needed(settings))
    interleaved(wide, Settings(1, 5, 0, 0))
    result = Result(name, timings, splits, interleaved(wide, fewer))
    executed = [s for s in work.outcomes + wide.outcomes if s is ExecutionStatus.EXECUTED]
    journal = len(work.writes.journal())
    plans = work.plans + wide.plans
    if len(executed) != plans or journal != plans:
        raise SystemExit(
            f"{name}: {plans - len(executed)} executes did not run, {journal} journal "
            f"entries for {plans} plans: a correctness failure"
        )
    return result


# --------------------------------------------------------------------------- profile


def profile_sqlite(folder: Path, count: int, out: TextIO) -> None:
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
    listing = io.StringIO()
    stats = pstats.Stats(profiler, stream=listing)
    stats.sort_stats("cumulative").print_stats(r"hatp", 30)
    print(
        f"\n--- cProfile: {count} executes on SQLite, {wall / count * 1e3:.2f} ms each under "
        "the profiler (it inflates code made of many small calls); hatp's functions by "
        "cumulative time ---",
        file=out,
    )
    print(listing.getvalue().split("\n", 4)[-1].rstrip(), file=out)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create a DB on")
    parser.add_argument("--profile", action="store_true", help="add a cProfile listing (SQLite)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object on stdout; the report to stderr"
    )
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    out: TextIO = sys.stderr if args.json else sys.stdout
    print(
        f"hatp writes benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}, SQLAlchemy {sa.__version__}, psycopg "
        f"{psycopg.__version__}; {settings.repeats} repeats of {settings.per_repeat} "
        "executes, as many floors and as many bare writes, interleaved, best shown",
        file=out,
    )
    print(
        "workload: an approved plan of 2 corrections on 2 rows (adjust_stock -3, set_unit "
        "case); bare write = the same Correction.apply calls in one transaction, no "
        "bookkeeping; floor = the key's reservation committed (a small INSERT), then the "
        "touched rows re-read (FOR UPDATE on PostgreSQL) and the bare write, in one transaction",
        file=out,
    )
    results: dict[str, Result | str] = {}
    with tempfile.TemporaryDirectory(prefix="hatp-writes-bench-") as tmp:
        folder = Path(tmp)
        store = open_store(folder / "inventory.db")
        try:
            results["sqlite"] = measure("sqlite", store, settings)
        finally:
            store.close()
        database, where = create_database(args.postgres)
        print(f"postgresql: {where}", file=out)
        if database is None:
            results["postgresql"] = where
        else:
            try:
                store = open_store(database)
                try:
                    results["postgresql"] = measure("postgresql", store, settings)
                finally:
                    store.close()
            finally:
                drop_database(args.postgres, database)
        measured = [r for r in results.values() if isinstance(r, Result)]
        print(file=out)
        for name, result in results.items():
            text = f"{name:<11} skipped: {result}" if isinstance(result, str) else result.line()
            print(text, file=out)
        print(
            "ratio = best execute / best floor (seconds per operation); target "
            f"{TARGET:.1f}x or less. The floor's reservation commits durably on SQLite and "
            "unflushed on PostgreSQL, as the rules allow and hatp does",
            file=out,
        )
        for result in measured:
            print(result.bookkeeping_line(), file=out)
        print(
            "bookkeeping = best execute - best bare write, per execute (the floor's own "
            "reservation and re-read included); target "
            + " / ".join(f"{ms(t)} ms ({name})" for name, t in BOOKKEEPING_TARGET.items()),
            file=out,
        )
        for result in measured:
            print(result.wide_line(), file=out)
        print("\nwhere the time goes:", file=out)
        for result in measured:
            print_split(result, out)
        if args.profile:
            profile_sqlite(folder, settings.profiled, out)
    if args.json:
        report = {
            name: dict.fromkeys(JSON_KEYS) | {"skipped": result}
            if isinstance(result, str)
            else result.to_json()
            for name, result in results.items()
        }
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
