"""Benchmark of the coordinator against the protocol floor, measured in the same run.

Run with ``.venv/bin/python benchmarks/coordinator.py`` (or ``make bench``).

The workload is the demo's business trip (:mod:`hatp.demo.trip`): a 4-branch
plan (a seat hold, a room hold, a calendar entry that can be compensated, and
the card charge as the final step) and one approval group. A
:class:`~hatp.coordinator.Coordinator` runs it with the four real participants
in process, each on a durable store of its own, and a scripted gateway that
approves at once, on the system clock. Every transaction has its own txnId,
seat and traveller, and must commit.

The protocol floor (issue 24) is the work the protocol itself requires of one
committed trip, counted from a census of one transaction (``_trip_floor``):
the same Ed25519 signs and verifies on the same bytes; one canonicalization
per distinct object signed or digested (told apart by their canonical bytes);
and the durable commits that wrote, by store, of which 8 are in series by the
protocol's rules (``SERIAL_COMMITS``). That work is done bare, interleaved
with hatp's sequential runs: ``hatp.evidence.canonicalize`` of each distinct
object, the key's raw sign and verify, and each commit as a sqlite3 row insert
with ``synchronous=FULL`` on a file or a psycopg commit of a row.

- floor CPU = process CPU (``time.process_time``) of the evidence work and of
  all the commits; floor wall = the evidence work's wall + 8 x one bare commit.
- hatp's CPU per committed transaction = process CPU across the sequential
  run / its count (the participants' threads included: they run in process; on
  PostgreSQL it is the client's CPU, not the server's).

Targets, printed PASS or MISS for SQLite and for PostgreSQL (a fresh database
on ``--postgres``, dropped afterwards; skipped, with the reason, when no
server answers): CPU per transaction <= 2x the floor CPU; p50 latency <= 2x the
floor wall; with 16 transactions in flight, throughput >= 1.5x the sequential
figure on the same store. On PostgreSQL only: two coordinator processes on the
one database, each with 16 in flight on a world of its own, throughput >= 1.4x
one such process (``_two_processes``: child processes of this Python, started
together, start-up and warm-up untimed; on SQLite the target does not apply,
and it is not run). Also printed: the census, and where the time goes
(the floor's parts, the rest, a trip's CPU by the threads that spent it, an
instrumented split of what was waited for, the thread hand-offs of a trip with a
bare one's CPU measured in the same run, and the context switches), and beside
each run's CPU per transaction the cores it kept busy (its CPU over its wall time).

Nothing here asserts a timing and the exit status is 0 whatever the figures
(1 only when a transaction does not commit). ``--quick`` shrinks every count
so a test can smoke-run the script (16 in flight included). ``--json`` writes
one JSON object to stdout, with a ``sqlite`` and a ``postgresql`` object of
figures (``{"skipped": reason}`` and the figures null when there is no
server), and prints the human-readable report to stderr instead. ``--profile``
adds a cProfile listing of sequential transactions on SQLite, the
participants' worker threads included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cryptography
import psycopg
import sqlalchemy as sa

import _thread_cpu
from _trip_floor import Census, Floor, Sample, floor_sample, median_of, take_census
from _trip_profile import profile_sqlite
from _trip_rig import (
    ECONOMY,
    Backend,
    BareCommit,
    Batch,
    Rig,
    Spans,
    create_database,
    drop_database,
    in_flight,
)
from _two_processes import measure as measure_processes
from _wakeup import RECHECK_SECONDS
from _wakeup import measure as measure_wakeup
from hatp.demo.trip import COORDINATOR, GATEWAY, PARTICIPANT_IDS
from hatp.evidence import SigningKey, canonicalize

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
CPU_TARGET = 2.0  # hatp's CPU per transaction / the floor's CPU, at most
WALL_TARGET = 2.0  # sequential p50 / the floor's wall, at most
IN_FLIGHT = 16  # the in-flight level with a target
IN_FLIGHT_TARGET = 1.5  # its throughput / the sequential throughput, at least
PROCESSES_TARGET = 1.4  # two processes' throughput / one process's, at least (PostgreSQL)
WAKE_TARGET = 0.010  # vote stored -> decision logged, p50, the vote taken in process
WAKE_ACROSS_TARGET = 0.050  # the same, the vote taken by another process (PostgreSQL)
#: The figures --json writes per database (null, with a "skipped" reason, when not run).
JSON_KEYS = (
    "cpu_ms_per_txn",
    "floor_cpu_ms",
    "cpu_ratio",
    "p50_ms",
    "floor_wall_ms",
    "wall_ratio",
    "seq_txn_per_s",
    "inflight16_txn_per_s",
    "inflight16_ratio",
    "inflight16_cpu_ms_per_txn",
    "inflight16_cores",
    "two_processes_txn_per_s",
    "two_processes_ratio",
    "wake_p50_ms",
    "wake_across_p50_ms",
    "wake_recheck_s",
    "handoffs_per_txn",
    "handoff_cpu_us",
    "switches_per_txn",
    "operations_cpu_ms_per_txn",
    "least_cpu_ms",
    "least_cpu_ratio",
    "loop_cpu_ms_per_txn",
    "participants_cpu_ms_per_txn",
    "stores_cpu_ms_per_txn",
)


@dataclass(frozen=True)
class Settings:
    """How many transactions: the full run, or ``--quick`` for a smoke run."""

    warmup: int  # per world, before its measured transactions
    sequential: int
    rounds: int  # sequential runs and floor samples alternate this many times
    in_flight: tuple[int, ...]  # concurrency levels measured
    concurrent: int  # transactions per concurrency level
    per_process: int  # transactions per process, one process and two (PostgreSQL)
    instrumented: int  # sequential transactions timed part by part
    profiled: int
    wakes: int  # votes timed to the decision they wake, per way of voting


FULL = Settings(
    warmup=5,
    sequential=150,
    rounds=6,
    in_flight=(4, IN_FLIGHT),
    concurrent=150,
    per_process=150,
    instrumented=50,
    profiled=300,
    wakes=40,
)
QUICK = Settings(
    warmup=2,
    sequential=10,
    rounds=2,
    in_flight=(IN_FLIGHT,),
    concurrent=20,
    per_process=20,
    instrumented=5,
    profiled=20,
    wakes=5,
)
# Each world has len(ECONOMY) seats; a measured batch must fit in one world.
_MOST = len(ECONOMY) - FULL.warmup


# --------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    """One run of a backend: its transactions' latencies and how long it took."""

    mode: str
    latencies: list[float]
    elapsed: float  # sequential: the transactions' own time (the floor's is left out)
    cpu: float | None = None  # process CPU seconds across the batch, where measured

    @classmethod
    def of(cls, mode: str, batch: Batch, cpu: float | None = None) -> Measured:
        """A batch run several at a time: its transactions / its wall time."""
        return cls(mode, batch.latencies, batch.elapsed, cpu)

    @property
    def cpu_per_txn(self) -> float | None:
        return None if self.cpu is None else self.cpu / len(self.latencies)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed

    @property
    def cores(self) -> float | None:
        """Process CPU seconds per second of the run: how many cores it kept busy."""
        return None if self.cpu is None else self.cpu / self.elapsed

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def percentile(samples: Sequence[float], q: int) -> float:
    if len(samples) < 2:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


@dataclass
class Sequential:
    """Sequential transactions and the floor samples interleaved with them."""

    latencies: list[float]
    cpu: float  # process CPU seconds across the transactions (not the floor samples)
    samples: list[Sample]
    switches: int = 0  # the process's voluntary context switches across the transactions
    handoff: float = 0.0  # CPU seconds of one bare thread hand-off, measured between rounds
    #: CPU seconds across the transactions by the role of the thread that spent them
    #: (_thread_cpu.ROLES); empty where /proc does not say.
    by_thread: dict[str, float] = field(default_factory=dict)


async def sequential(
    rig: Rig, floor: Floor, bare: BareCommit, count: int, rounds: int
) -> Sequential:
    """Alternate runs of transactions with as many floor samples, ``rounds`` times."""
    run = Sequential([], 0.0, [])
    per_round = math.ceil(count / rounds)
    handoffs: list[float] = []
    while len(run.latencies) < count:
        batch = min(per_round, count - len(run.latencies))
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        threads = _thread_cpu.snapshot()
        started = time.process_time()
        for _ in range(batch):
            run.latencies.append((await rig.commit_one())[0])
        run.cpu += time.process_time() - started
        for role, seconds in _thread_cpu.split(threads, _thread_cpu.snapshot()).items():
            run.by_thread[role] = run.by_thread.get(role, 0.0) + seconds
        run.switches += resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
        run.samples += [floor_sample(floor, bare) for _ in range(batch)]
        handoffs.append(await bare_handoff(_HANDOFFS))
    run.handoff = statistics.median(handoffs)
    return run


_HANDOFFS = 50


async def bare_handoff(count: int) -> float:
    """CPU seconds of one hand-off of nothing to a worker thread and back, as hatp hands
    a store or participant call off (the loop's default executor); the mean of ``count``."""
    started = time.process_time()
    for _ in range(count):
        await asyncio.to_thread(_nothing)
    return (time.process_time() - started) / count


def _nothing() -> None:
    """The work of a bare hand-off."""


@dataclass(frozen=True)
class Split:
    """Mean wall time per transaction, by who was being waited for; and the mean CPU
    of the participants' operations."""

    count: int
    total: float
    participants: float  # some participant call in flight
    log: float  # a decision-log write (on a store worker; the transaction waits for it)
    calls: float
    writes: float
    operations: float  # CPU of the participants' operations (the workload's own code)

    @property
    def coordinator(self) -> float:
        return self.total - self.participants - self.log


async def instrumented(rig: Rig, spans: Spans, count: int) -> Split:
    """Time ``count`` sequential transactions part by part."""
    totals = [0.0] * 6
    for _ in range(count):
        spans.participants.clear()
        spans.log.clear()
        spans.operations.clear()
        latency, _ = await rig.commit_one()
        parts = (
            latency,
            _union(spans.participants),
            sum(end - start for start, end in spans.log),
            len(spans.participants),
            len(spans.log),
            sum(spans.operations),
        )
        totals = [t + p for t, p in zip(totals, parts, strict=True)]
    return Split(count, *(t / count for t in totals))


def _union(spans: Sequence[tuple[float, float]]) -> float:
    """How long at least one of ``spans`` was open."""
    covered, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


@dataclass
class BackendResult:
    """Everything measured on one backend, and the figures the targets are about."""

    name: str
    census: Census
    floor: Floor
    run: Sequential
    flights: dict[int, Measured]  # by how many were in flight
    processes: dict[int, Measured]  # by how many coordinator processes (PostgreSQL only)
    split: Split
    wakes: dict[str, list[float]]  # vote stored -> decision logged, by who took the vote

    @property
    def seq(self) -> Measured:
        return Measured("sequential", self.run.latencies, sum(self.run.latencies), self.run.cpu)

    @property
    def cpu_per_txn(self) -> float:
        return self.run.cpu / len(self.run.latencies)

    @property
    def handoffs(self) -> int:
        """Calls one transaction hands to a thread (census): store calls and participants'."""
        return self.census.calls["store hand-offs"] + self.census.calls["executor hand-offs"]

    @property
    def floor_cpu(self) -> float:
        return median_of(self.run.samples, "cpu")

    @property
    def least_cpu(self) -> float:
        """CPU seconds a trip costs before any of hatp's own code runs: the floor, the
        workload's operations (not in the floor) and the bare thread hand-offs that keep
        store work and participants off the event loop."""
        return self.floor_cpu + self.split.operations + self.handoffs * self.run.handoff

    def thread_cpu(self, role: str) -> float | None:
        """Milliseconds of CPU per sequential transaction spent by threads of ``role``
        (``None`` where /proc does not say)."""
        if not self.run.by_thread:
            return None
        return self.run.by_thread.get(role, 0.0) / len(self.run.latencies) * 1e3

    @property
    def floor_wall(self) -> float:
        return median_of(self.run.samples, "wall")

    def figures(self) -> dict[str, float | None]:
        """The figures --json writes (:data:`JSON_KEYS`), in ms, txn/s and ratios."""
        seq, flight = self.seq, self.flights.get(IN_FLIGHT)
        one, two = self.processes.get(1), self.processes.get(2)
        figures = {
            "cpu_ms_per_txn": self.cpu_per_txn * 1e3,
            "floor_cpu_ms": self.floor_cpu * 1e3,
            "cpu_ratio": self.cpu_per_txn / self.floor_cpu,
            "p50_ms": seq.p50 * 1e3,
            "floor_wall_ms": self.floor_wall * 1e3,
            "wall_ratio": seq.p50 / self.floor_wall,
            "seq_txn_per_s": seq.rate,
            "inflight16_txn_per_s": flight.rate if flight else None,
            "inflight16_ratio": flight.rate / seq.rate if flight else None,
            "inflight16_cpu_ms_per_txn": _ms_or_none(flight.cpu_per_txn if flight else None),
            "inflight16_cores": flight.cores if flight else None,
            # Null on SQLite: the target is about processes sharing one PostgreSQL.
            "two_processes_txn_per_s": two.rate if two else None,
            "two_processes_ratio": two.rate / one.rate if one and two else None,
            "wake_p50_ms": _p50_ms(self.wakes.get("one process")),
            "wake_across_p50_ms": _p50_ms(self.wakes.get("two processes")),
            # Without notifications, a vote taken elsewhere is seen at the next recheck.
            "wake_recheck_s": None if self.name == "postgresql" else RECHECK_SECONDS,
            "handoffs_per_txn": self.handoffs,
            "handoff_cpu_us": self.run.handoff * 1e6,
            "switches_per_txn": self.run.switches / len(self.run.latencies),
            "operations_cpu_ms_per_txn": self.split.operations * 1e3,
            "least_cpu_ms": self.least_cpu * 1e3,
            "least_cpu_ratio": self.least_cpu / self.floor_cpu,
            "loop_cpu_ms_per_txn": self.thread_cpu(_thread_cpu.LOOP),
            "participants_cpu_ms_per_txn": self.thread_cpu(_thread_cpu.PARTICIPANTS),
            "stores_cpu_ms_per_txn": self.thread_cpu(_thread_cpu.STORES),
        }
        return {key: None if value is None else round(value, 4) for key, value in figures.items()}


def _ms_or_none(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _p50_ms(samples: list[float] | None) -> float | None:
    return None if not samples else statistics.median(samples) * 1e3


def run_backend(backend: Backend, settings: Settings) -> BackendResult:
    """Census, sequential with its floor, in flight, and the instrumented pass on one backend."""
    with backend.rig() as rig:
        asyncio.run(rig.warm_up(settings.warmup))
        census = take_census(rig)
        directory_key = SigningKey.load(rig.world.folder / "keys" / "directory.jwk")
        keys = [*rig.world.keys.values(), *rig.world.people.values(), directory_key]
        floor = Floor.from_census(census, keys)
    bare = backend.bare_commit()
    try:
        for _ in range(3):
            floor_sample(floor, bare)  # warm-up
        with backend.rig() as rig:
            asyncio.run(rig.warm_up(settings.warmup))
            count = min(settings.sequential, _MOST)
            run = asyncio.run(sequential(rig, floor, bare, count, settings.rounds))
    finally:
        bare.close()
    flights: dict[int, Measured] = {}
    for width in settings.in_flight:
        with backend.rig() as rig:
            asyncio.run(rig.warm_up(settings.warmup))
            started = time.process_time()
            batch = asyncio.run(in_flight(rig, min(settings.concurrent, _MOST), width))
            cpu = time.process_time() - started
        flights[width] = Measured.of(f"{width} in flight", batch, cpu)
    processes: dict[int, Measured] = {}
    if backend.name == "postgresql":  # the target is about processes sharing one server
        count = min(settings.per_process, _MOST)
        one, two = measure_processes(backend, IN_FLIGHT, count, settings.warmup)
        processes = {1: Measured.of("1 process", one), 2: Measured.of("2 processes", two)}
    spans = Spans()
    with backend.rig(spans) as rig:
        asyncio.run(rig.warm_up(settings.warmup))
        split = asyncio.run(instrumented(rig, spans, settings.instrumented))
    wakes = {"one process": measure_wakeup(backend, settings.wakes, across=False).samples}
    if backend.name == "postgresql":  # SQLite has no notifications: it rechecks
        wakes["two processes"] = measure_wakeup(backend, settings.wakes, across=True).samples
    return BackendResult(backend.name, census, floor, run, flights, processes, split, wakes)


# --------------------------------------------------------------------------- output


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def print_census(result: BackendResult) -> None:
    census = result.census
    signers = Counter(_role(kid) for kid, _ in census.signs)
    verified = Counter(_role(kid) for kid, _ in census.verifies)
    canonical = sum(census.canonical_by.values())
    commits = sum(census.commits.values())
    parts = ", ".join(f"{_short(owner)} {n}" for owner, n in census.commits.items())
    events = census.record["events"]
    print(f"one committed transaction on {result.name} (counted on one, in every thread):")
    print(f"  Ed25519 signs        {len(census.signs):>4}  ({_tally(signers)})")
    print(f"  Ed25519 verifies     {len(census.verifies):>4}  (signed by {_tally(verified)})")
    print(f"  canonicalizations    {canonical:>4}  (called from {_tally(census.canonical_by)})")
    print(
        f"  distinct objects     {len(census.evidence):>4}  (signed, verified or digested, told "
        f"apart by their canonical bytes; from {census.evidence_calls} canonicalizations "
        "for sign, verify and digest, and stored texts digested)"
    )
    for name in (
        "digests",
        "pydantic validations",
        "JSON copies",
        "deep copies",
        "store hand-offs",
        "executor hand-offs",
    ):
        print(f"  {name:<20} {census.calls[name]:>4}")
    print(f"  durable commits      {commits:>4}  ({parts}; transactions that wrote)")
    print(f"    in the order they committed: {', '.join(map(_short, census.commit_order))}")
    print(f"  read-only commits    {census.reads:>4}  (transactions that wrote nothing)")
    print(
        f"  SQL statements       {sum(census.statements.values()):>4}  (BEGIN and COMMIT included)"
    )
    print(
        f"  record: {len(events)} events, {len(canonicalize(census.record)):,} bytes canonical; "
        f"types {', '.join(e['type'].removeprefix('txn.') for e in events)}"
    )
    floor = result.floor
    print(
        f"the protocol floor of one trip: {len(floor.signs)} signs + {len(floor.verifies)} "
        f"verifies + {len(floor.objects)} canonicalizations + {len(floor.bodies)} durable "
        f"commits, {floor.serial} of them in series (the rules' count, docs/design-notes.md)"
    )


def _short(owner: str) -> str:
    return owner.removeprefix("https://").removeprefix("mcp://").removesuffix(".example")


def _role(kid: str) -> str:
    issuer = kid.split("#", 1)[0]
    if issuer == COORDINATOR:
        return "coordinator"
    if issuer == GATEWAY:
        return "gateway"
    return "participants" if issuer in PARTICIPANT_IDS else issuer


def _tally(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _verdict(ratio: float, target: float, *, at_least: bool = False) -> str:
    return "PASS" if (ratio >= target if at_least else ratio <= target) else "MISS"


def print_results(results: Sequence[BackendResult], skipped: Sequence[str]) -> None:
    header = (
        f"{'backend':<11} {'txns':>5} {'cpu ms/txn':>10} {'floor cpu ms':>12} "
        f"{'cpu ratio':>9} {'<=2x':>5} {'p50 ms':>8} {'p99 ms':>8} {'floor wall ms':>13} "
        f"{'wall ratio':>10} {'<=2x':>5}"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        seq, figures = result.seq, result.figures()
        cpu_ratio, wall_ratio = figures["cpu_ratio"] or 0.0, figures["wall_ratio"] or 0.0
        print(
            f"{result.name:<11} {len(seq.latencies):>5} {ms(result.cpu_per_txn):>10} "
            f"{ms(result.floor_cpu):>12} {cpu_ratio:>8.2f}x {_verdict(cpu_ratio, CPU_TARGET):>5} "
            f"{ms(seq.p50):>8} {ms(seq.p99):>8} {ms(result.floor_wall):>13} "
            f"{wall_ratio:>9.2f}x {_verdict(wall_ratio, WALL_TARGET):>5}"
        )
    for line in skipped:
        print(f"{'postgresql':<11} skipped: {line}")
    print(
        "cpu ratio = hatp's process CPU per transaction over the sequential run (the "
        "participants' threads included; on PostgreSQL the client's) / the floor's CPU; "
        "wall ratio = sequential p50 / the floor's wall. The floor: the census's signs and "
        "verifies + one canonicalization per distinct object signed or digested + its "
        "durable commits, done bare, interleaved with the sequential runs (CPU: all of it; "
        "wall: the evidence work + the serial commits x one bare commit)"
    )
    print()
    header = (
        f"{'backend':<11} {'mode':<13} {'txns':>5} {'txn/s':>7} {'cpu ms/txn':>10} "
        f"{'cores':>5} {'p50 ms':>8} {'p99 ms':>8} {'vs sequential':>13} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        seq = result.seq
        print(
            f"{result.name:<11} {seq.mode:<13} {len(seq.latencies):>5} {seq.rate:>7.1f} "
            f"{ms(result.cpu_per_txn):>10} {_cores(seq):>5} {ms(seq.p50):>8} {ms(seq.p99):>8}"
        )
        for width, row in result.flights.items():
            ratio = row.rate / seq.rate
            target, verdict = "-", "info"
            if width == IN_FLIGHT:
                target = f">={IN_FLIGHT_TARGET:.1f}x"
                verdict = _verdict(ratio, IN_FLIGHT_TARGET, at_least=True)
            cpu = "-" if row.cpu_per_txn is None else ms(row.cpu_per_txn)
            print(
                f"{result.name:<11} {row.mode:<13} {len(row.latencies):>5} {row.rate:>7.1f} "
                f"{cpu:>10} {_cores(row):>5} {ms(row.p50):>8} {ms(row.p99):>8} {ratio:>12.2f}x "
                f"{target:>7}  "
                f"{verdict}"
            )
    for line in skipped:
        print(f"{'postgresql':<11} skipped: {line}")
    print(
        "txn/s: sequential = transactions / their summed latencies; in flight = transactions / "
        "the wall time of the batch, each on a fresh world of the same store; cpu ms/txn = the "
        "process's CPU across the run / its transactions; cores = that CPU / the run's wall time "
        "(with the GIL, about one core is what one process has: throughput in flight is bounded "
        "by it, and a sequential run near 1.0 already uses it)"
    )


def _cores(row: Measured) -> str:
    return "-" if row.cores is None else f"{row.cores:.2f}"


def print_processes(results: Sequence[BackendResult], skipped: Sequence[str]) -> None:
    """Two coordinator processes on one database against one, each with 16 in flight."""
    header = (
        f"{'backend':<11} {'mode':<12} {'txns':>5} {'txn/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'vs one process':>14} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        if not result.processes:
            print(
                f"{result.name:<11} {'2 processes':<12}     -       -        -        -"
                "              -       -  not run: the target is for PostgreSQL"
            )
            continue
        one = result.processes[1]
        for count, row in result.processes.items():
            ratio, target, verdict = row.rate / one.rate, "-", "info"
            if count == 2:
                target = f">={PROCESSES_TARGET:.1f}x"
                verdict = _verdict(ratio, PROCESSES_TARGET, at_least=True)
            print(
                f"{result.name:<11} {row.mode:<12} {len(row.latencies):>5} {row.rate:>7.1f} "
                f"{ms(row.p50):>8} {ms(row.p99):>8} {ratio:>13.2f}x {target:>7}  {verdict}"
            )
    for line in skipped:
        print(f"{'postgresql':<11} skipped: {line}")
    print(
        f"each process a child of this Python running the trip with {IN_FLIGHT} in flight on a "
        "fresh world of its own (its own schemas and txnIds) in the one database; all of a "
        "batch's processes start at one moment, after their start-up and warm-up; txn/s = "
        "committed transactions / (the last process's end - the first's start)"
    )


def print_wakeups(results: Sequence[BackendResult]) -> None:
    """A vote wakes its waiter: vote stored -> decision logged, by who took the vote."""
    header = (
        f"{'backend':<11} {'vote taken by':<26} {'votes':>5} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        for where, samples in result.wakes.items():
            across = where == "two processes"
            target = WAKE_ACROSS_TARGET if across else WAKE_TARGET
            who = "another process (NOTIFY)" if across else "the coordinator's process"
            p50 = statistics.median(samples)
            print(
                f"{result.name:<11} {who:<26} {len(samples):>5} {ms(p50):>8} "
                f"{ms(percentile(samples, 99)):>8} {'<=' + ms(target):>7}  "
                f"{_verdict(p50, target)}"
            )
        if result.name != "postgresql":
            print(
                f"{result.name:<11} {'another process':<26}     -        -        -        -  "
                f"no notifications: seen at the recheck, every {RECHECK_SECONDS:g} s"
            )
    print(
        "from the UPDATE that stored the deciding vote committing to the coordinator's "
        "decision logged (its observer told), on time.monotonic (one clock for every process); "
        "holds-first plans, so the vote is all the decision waits for"
    )


def print_breakdown(result: BackendResult) -> None:
    census, floor, split, samples = result.census, result.floor, result.split, result.run.samples
    seq = result.seq
    evidence_wall = median_of(samples, "evidence_wall")
    commit_wall = median_of(samples, "commits_wall") / len(floor.bodies)
    rest = seq.p50 - result.floor_wall
    print(
        f"  {result.name}: p50 {ms(seq.p50)} ms = the floor's wall {ms(result.floor_wall)} "
        f"(evidence work {ms(evidence_wall)}: {len(floor.signs)} signs + {len(floor.verifies)} "
        f"verifies + {len(floor.objects)} canonicalizations; + {floor.serial} commits in "
        f"series x {ms(commit_wall)}) + the rest {ms(rest)} ({rest / seq.p50:.0%})"
    )
    cpu_rest = result.cpu_per_txn - result.floor_cpu
    print(
        f"    CPU {ms(result.cpu_per_txn)} ms = the floor's {ms(result.floor_cpu)} (evidence "
        f"work {ms(median_of(samples, 'evidence_cpu'))} + {len(floor.bodies)} commits "
        f"{ms(median_of(samples, 'commits_cpu'))}) + the rest {ms(cpu_rest)} "
        f"({cpu_rest / result.cpu_per_txn:.0%}); floor figures are medians of {len(samples)} "
        "bare runs"
    )
    if result.run.by_thread:
        parts = ", ".join(
            f"{role} {result.thread_cpu(role) or 0.0:.2f}" for role in _thread_cpu.ROLES
        )
        print(
            f"    CPU by thread (ms a trip, on a CPU from /proc, the kernel's work for each "
            f"thread included): {parts}"
        )
    print(
        f"    waited for (mean of {split.count} more, instrumented): "
        f"participants {ms(split.participants)} ms ({split.calls:.0f} calls; time any of them "
        f"ran, counted once), log writes {ms(split.log)} ms ({split.writes:.0f}, on the store's "
        "workers), "
        f"coordinator's own work {ms(split.coordinator)} ms; total {ms(split.total)} ms"
    )
    calls = census.calls
    print(
        f"    thread hand-offs: {result.handoffs} ({calls['store hand-offs']} store calls, "
        f"{calls['executor hand-offs']} to the loop's executor: the participants' calls); "
        f"a bare one costs {result.run.handoff * 1e6:.0f} us of CPU here (measured between "
        f"the rounds), about {ms(result.handoffs * result.run.handoff)} ms a trip; "
        f"{result.run.switches / len(result.run.latencies):.0f} voluntary context switches "
        "a trip"
    )
    print(
        f"    before any of hatp's own code: the floor {ms(result.floor_cpu)} + the "
        f"participants' operations {ms(split.operations)} (the workload's own code, the demo's "
        f"Core statements: CPU, mean of the instrumented pass) + {result.handoffs} bare thread "
        f"hand-offs {ms(result.handoffs * result.run.handoff)} (store work and participants "
        f"off the event loop) = {ms(result.least_cpu)} ms of CPU, "
        f"{result.least_cpu / result.floor_cpu:.2f}x the floor (the target: "
        f"{CPU_TARGET:.0f}x for the whole trip)"
    )
    statements = sum(census.statements.values())
    redone = sum(census.canonical_by.values()) - len(floor.objects)
    print(
        f"    the rest: {statements} SQL statements (hatp's on the driver, the demo "
        "operations' through SQLAlchemy Core), the thread hand-offs and the context "
        f"switches above, pydantic, {redone} canonicalizations beyond the floor's (the same "
        "objects again, and canonical JSON for the stores)"
    )


def filesystem(path: Path) -> str:
    """The file system ``path`` is on, from /proc/mounts (fsync costs differ wildly)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown file system"
    best = ("", "unknown", "?")
    resolved = str(path.resolve())
    for line in mounts:
        device, point, kind = line.split()[:3]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best[0]):
            best = (point, kind, device)
    return f"{best[1]} on {best[2]}"


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="add a cProfile listing")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object to stdout; the report to stderr"
    )
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create a DB on")
    parser.add_argument("--folder", type=Path, default=None, help="where the SQLite files go")
    args = parser.parse_args(argv)
    if not args.json:
        run(args)
        return 0
    with contextlib.redirect_stdout(sys.stderr):
        figures = run(args)
    print(json.dumps(figures))
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure, print the report, and return the figures --json writes."""
    settings = QUICK if args.quick else FULL
    run_started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hatp-bench-", dir=args.folder) as tmp:
        folder = Path(tmp)
        print(
            f"hatp coordinator benchmark{' (--quick)' if args.quick else ''}: "
            f"Python {platform.python_version()}, cryptography {cryptography.__version__}, "
            f"SQLAlchemy {sa.__version__}, psycopg {psycopg.__version__}, {platform.machine()}, "
            f"{os.cpu_count()} CPUs; SystemClock"
        )
        print(
            "workload: the demo trip, 4 branches (seat hold, room hold, calendar compensate, "
            "card charge final) + 1 approval group approved at once; in-process participants, "
            "each on its own store; each transaction its own txnId, seat and traveller"
        )
        results: list[BackendResult] = []
        skipped: list[str] = []
        print(f"sqlite: SQLite files in {folder} ({filesystem(folder)})")
        results.append(run_backend(Backend("sqlite", folder / "sqlite"), settings))
        database, where = create_database(args.postgres)
        print(f"postgresql: {where}")
        if database is None:
            skipped.append(where)
        else:
            try:
                pg = Backend("postgresql", folder / "postgresql", database)
                results.append(run_backend(pg, settings))
            finally:
                drop_database(args.postgres, database)
        report(results, skipped)
        if args.profile:
            profile_sqlite(folder, settings.profiled)
    print(f"\ntotal run time {time.perf_counter() - run_started:.1f} s")
    figures: dict[str, Any] = {"benchmark": "coordinator", "quick": args.quick}
    figures |= {result.name: result.figures() for result in results}
    for reason in skipped:
        figures["postgresql"] = {"skipped": reason, **dict.fromkeys(JSON_KEYS)}
    return figures


def report(results: Sequence[BackendResult], skipped: Sequence[str]) -> None:
    """Print the census, the two tables and where the time goes."""
    print()
    print_census(results[0])
    for result in results[1:]:
        counts = {
            (len(c.signs), len(c.verifies), len(c.evidence))
            for c in (result.census, results[0].census)
        }
        same = "the same" if len(counts) == 1 else "OTHER"
        commits = sum(result.census.commits.values())
        statements = sum(result.census.statements.values())
        print(
            f"on {result.name}: {same} signs, verifies and distinct objects, "
            f"{commits} durable commits, {statements} SQL statements"
        )
    print()
    print_results(results, skipped)
    print("\ntwo coordinator processes on one database:")
    print_processes(results, skipped)
    print("\na vote wakes its waiter:")
    print_wakeups(results)
    print("\nwhere the time goes (sequential, per transaction):")
    for result in results:
        print_breakdown(result)


if __name__ == "__main__":
    sys.exit(main())
