"""Benchmark of the coordinator against a floor measured in the same run.

Run with ``.venv/bin/python benchmarks/coordinator.py`` (or ``make bench``).

The workload is the demo's business trip (:mod:`hatp.demo.trip`): a 4-branch
plan (a seat hold, a room hold, a calendar entry that can be compensated, and
the card charge as the final step) and one approval group. A
:class:`~hatp.coordinator.Coordinator` runs it with the four real participants
in process, each on a durable store of its own, and a scripted gateway that
approves at once, on the system clock. Every transaction has its own txnId,
seat and traveller, and must commit.

The floor is the work a committed transaction cannot avoid: the same Ed25519
signs and verifies, on the same objects, through ``hatp.evidence.sign`` and
``verify``, plus ONE durable commit of the sealed record, done bare (sqlite3
with ``synchronous=FULL`` on a file, or a psycopg commit inserting a row).
How many signs and verifies that is comes from a census of one transaction.

Printed for SQLite and for PostgreSQL (a fresh database on ``--postgres``,
dropped afterwards; skipped, with the reason, when no server answers):

1. what one transaction does (signs, verifies, digests, durable commits, SQL);
2. sequential latency p50/p99 and txn/s beside the floor, interleaved with
   it, and the ratio p50 / floor (target: 2x or less);
3. throughput with several transactions in flight;
4. where the time goes: crypto, durable commits x their bare cost, the rest.

Nothing here asserts a timing and the exit status is 0 whatever the figures.
``--quick`` shrinks every count so a test can smoke-run the script;
``--profile`` adds a cProfile listing of sequential transactions on SQLite,
the participants' worker threads included.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import io
import math
import os
import platform
import pstats
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import cryptography
import orjson
import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

import hatp
from _trip_rig import (
    ECONOMY,
    Backend,
    BareCommit,
    Rig,
    Spans,
    create_database,
    drop_database,
)
from hatp.demo.trip import COORDINATOR, GATEWAY, PARTICIPANT_IDS
from hatp.evidence import Keyring, SigningKey, canonicalize, copy_json, digest, sign, verify
from hatp.evidence._keys import PublicKey

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TARGET = 2.0
#: The durable commits one committed trip makes one after another, whatever the code:
#: the plan logged; the ask stored, then the vote (the prepares overlap them); the
#: decision logged before phase 2; the compensate step, the final step, then the holds
#: (together); the outcome logged. docs/design-notes.md counts them.
SERIAL_COMMITS = 8


@dataclass(frozen=True)
class Settings:
    """How many transactions: the full run, or ``--quick`` for a smoke run."""

    warmup: int  # per world, before its measured transactions
    sequential: int
    rounds: int  # sequential runs and floor samples alternate this many times
    in_flight: tuple[int, ...]  # concurrency levels measured
    concurrent: int  # transactions per concurrency level
    instrumented: int  # sequential transactions timed part by part
    profiled: int


FULL = Settings(
    warmup=5,
    sequential=150,
    rounds=6,
    in_flight=(4, 16),
    concurrent=150,
    instrumented=50,
    profiled=300,
)
QUICK = Settings(
    warmup=2, sequential=10, rounds=2, in_flight=(4,), concurrent=12, instrumented=5, profiled=20
)
# Each world has len(ECONOMY) seats; a measured batch must fit in one world.
_MOST = len(ECONOMY) - FULL.warmup


# --------------------------------------------------------------------------- census


@dataclass
class Census:
    """What one committed transaction does, counted while it ran (every thread)."""

    signs: list[tuple[str, bytes]] = field(default_factory=list)  # (kid, signed bytes)
    verifies: list[tuple[str, bytes]] = field(default_factory=list)
    canonical_by: Counter[str] = field(default_factory=Counter)  # by calling function
    calls: Counter[str] = field(default_factory=Counter)
    commits: Counter[str] = field(default_factory=Counter)  # that wrote, by store owner
    reads: int = 0  # transactions that wrote nothing (their commit flushes nothing)
    statements: Counter[str] = field(default_factory=Counter)
    record: dict[str, Any] = field(default_factory=dict)


_COUNTED = {
    canonicalize.__code__: "canonicalize",
    digest.__code__: "digests",
    SigningKey.sign_bytes.__code__: "sign",
    PublicKey.verify_bytes.__code__: "verify",
    copy.deepcopy.__code__: "deepcopy",
    copy_json.__code__: "JSON copies",
}


def take_census(rig: Rig) -> Census:
    """Run one transaction on ``rig`` and count what it does, in every thread."""
    census = Census()
    lock = threading.Lock()
    copy_module = copy.__file__

    def hook(frame: FrameType, what: str, arg: Any) -> None:
        if what == "c_call" and getattr(arg, "__name__", None) == "validate_python":
            with lock:
                census.calls["pydantic validations"] += 1
            return
        name = _COUNTED.get(frame.f_code) if what == "call" else None
        if name is None:
            return
        caller = frame.f_back
        with lock:
            if name in ("sign", "verify"):
                found = (frame.f_locals["self"].kid, bytes(frame.f_locals["message"]))
                (census.signs if name == "sign" else census.verifies).append(found)
            elif name == "canonicalize":
                census.canonical_by[caller.f_code.co_name if caller else "?"] += 1
            elif name == "deepcopy":
                if caller is None or caller.f_code.co_filename != copy_module:
                    census.calls["deep copies"] += 1  # top-level ones; not the recursion
            else:
                census.calls[name] += 1

    owners = {store.url: owner for owner, store in rig.stores.items()}

    def on_commit(conn: sa.Connection) -> None:
        with lock:
            if conn.info.pop(_WROTE, False):
                census.commits[owners.get(_url(conn.engine), "other")] += 1
            else:
                census.reads += 1

    def on_statement(conn: sa.Connection, _cursor: Any, statement: str, *_: Any) -> None:
        with lock:
            census.statements[owners.get(_url(conn.engine), "other")] += 1
        if statement.lstrip()[:6].upper() in _WRITES:
            conn.info[_WROTE] = True

    def on_rollback(conn: sa.Connection) -> None:
        conn.info.pop(_WROTE, None)

    event.listen(Engine, "commit", on_commit)
    event.listen(Engine, "before_cursor_execute", on_statement)
    event.listen(Engine, "rollback", on_rollback)
    threading.setprofile(hook)  # the event loop's worker threads start in asyncio.run
    sys.setprofile(hook)
    try:
        _, outcome = asyncio.run(rig.commit_one())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        event.remove(Engine, "commit", on_commit)
        event.remove(Engine, "before_cursor_execute", on_statement)
        event.remove(Engine, "rollback", on_rollback)
    census.record = outcome.record
    return census


_WROTE = "hatp-bench-wrote"
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE"})


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


@dataclass(frozen=True)
class Floor:
    """The census's signs and verifies, on the same objects, ready to redo bare."""

    to_sign: list[tuple[dict[str, Any], SigningKey]]
    to_verify: list[dict[str, Any]]
    keyring: Keyring
    record_text: str

    @classmethod
    def from_census(cls, census: Census, keys: Sequence[SigningKey], keyring: Keyring) -> Floor:
        by_kid = {key.kid: key for key in keys}
        to_sign = [(orjson.loads(payload), by_kid[kid]) for kid, payload in census.signs]
        # The verified objects, signed again by the same party (it is the verify we time).
        to_verify = [sign(orjson.loads(payload), by_kid[kid]) for kid, payload in census.verifies]
        return cls(to_sign, to_verify, keyring, canonicalize(census.record).decode())

    def crypto(self) -> None:
        for obj, key in self.to_sign:
            sign(obj, key)
        for signed in self.to_verify:
            verify(signed, self.keyring)


def floor_sample(floor: Floor, bare: BareCommit) -> tuple[float, float]:
    """One bare transaction: (seconds of signs and verifies, seconds of the one commit)."""
    started = time.perf_counter()
    floor.crypto()
    middle = time.perf_counter()
    bare.commit(floor.record_text)
    return middle - started, time.perf_counter() - middle


# --------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    """One row of the results: a backend, a mode, and its transactions' latencies."""

    backend: str
    mode: str
    latencies: list[float]
    elapsed: float
    target: bool  # the p50 / floor ratio is the target (sequential); else context

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed

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


async def sequential(
    rig: Rig, floor: Floor, bare: BareCommit, count: int, rounds: int
) -> tuple[list[float], list[tuple[float, float]]]:
    """Alternate runs of transactions with as many floor samples, ``rounds`` times."""
    latencies: list[float] = []
    samples: list[tuple[float, float]] = []
    per_round = math.ceil(count / rounds)
    while len(latencies) < count:
        batch = min(per_round, count - len(latencies))
        for _ in range(batch):
            latencies.append((await rig.commit_one())[0])
        samples += [floor_sample(floor, bare) for _ in range(batch)]
    return latencies, samples


async def in_flight(rig: Rig, count: int, width: int) -> tuple[list[float], float]:
    """Run ``count`` transactions, ``width`` at a time; return latencies and wall time."""
    plans = iter([rig.plan() for _ in range(count)])
    latencies: list[float] = []

    async def worker() -> None:
        for plan in plans:  # shared: each worker takes the next plan when it is free
            latencies.append((await rig.commit_one(plan))[0])

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(width)))
    return latencies, time.perf_counter() - started


@dataclass(frozen=True)
class Split:
    """Mean wall time per transaction, by who was being waited for."""

    count: int
    total: float
    participants: float  # some participant call in flight
    log: float  # a decision-log write (they block the event loop)
    calls: float
    writes: float

    @property
    def coordinator(self) -> float:
        return self.total - self.participants - self.log


async def instrumented(rig: Rig, spans: Spans, count: int) -> Split:
    """Time ``count`` sequential transactions part by part."""
    totals = [0.0] * 5
    for _ in range(count):
        spans.participants.clear()
        spans.log.clear()
        latency, _ = await rig.commit_one()
        parts = (
            latency,
            _union(spans.participants),
            sum(end - start for start, end in spans.log),
            len(spans.participants),
            len(spans.log),
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
    name: str
    census: Census
    rows: list[Measured]
    floor_crypto: list[float]
    floor_commit: list[float]
    split: Split

    @property
    def floor(self) -> float:
        return statistics.median(
            c + w for c, w in zip(self.floor_crypto, self.floor_commit, strict=True)
        )


def run_backend(backend: Backend, settings: Settings) -> BackendResult:
    """Census, sequential with its floor, in flight, and the instrumented pass on one backend."""
    with backend.rig() as rig:
        asyncio.run(rig.warm_up(settings.warmup))
        census = take_census(rig)
        directory_key = SigningKey.load(rig.world.folder / "keys" / "directory.jwk")
        keys = [*rig.world.keys.values(), *rig.world.people.values(), directory_key]
        # Votes verify under the keys on people's cards: the floor's keyring holds them too.
        keyring = Keyring.from_json(rig.world.keyring.to_json())
        for person, key in rig.world.people.items():
            keyring.add(key.public, person)
            keyring.trust(person)
        floor = Floor.from_census(census, keys, keyring)
    bare = backend.bare_commit()
    try:
        for _ in range(3):
            floor_sample(floor, bare)  # warm-up
        with backend.rig() as rig:
            asyncio.run(rig.warm_up(settings.warmup))
            count = min(settings.sequential, _MOST)
            latencies, samples = asyncio.run(sequential(rig, floor, bare, count, settings.rounds))
    finally:
        bare.close()
    rows = [Measured(backend.name, "sequential", latencies, sum(latencies), True)]
    for width in settings.in_flight:
        with backend.rig() as rig:
            asyncio.run(rig.warm_up(settings.warmup))
            flight, elapsed = asyncio.run(in_flight(rig, min(settings.concurrent, _MOST), width))
        rows.append(Measured(backend.name, f"{width} in flight", flight, elapsed, False))
    spans = Spans()
    with backend.rig(spans) as rig:
        asyncio.run(rig.warm_up(settings.warmup))
        split = asyncio.run(instrumented(rig, spans, settings.instrumented))
    crypto, commit = zip(*samples, strict=True)
    return BackendResult(backend.name, census, rows, list(crypto), list(commit), split)


# --------------------------------------------------------------------------- output


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def print_census(result: BackendResult) -> None:
    census = result.census
    signers = Counter(_role(kid) for kid, _ in census.signs)
    verified = Counter(_role(kid) for kid, _ in census.verifies)
    canonical = sum(census.canonical_by.values())
    commits = sum(census.commits.values())
    parts = ", ".join(
        f"{owner.removeprefix('mcp://').removesuffix('.example')} {n}"
        for owner, n in census.commits.items()
    )
    events = census.record["events"]
    print(f"one committed transaction on {result.name} (counted on one, in every thread):")
    print(f"  Ed25519 signs        {len(census.signs):>4}  ({_tally(signers)})")
    print(f"  Ed25519 verifies     {len(census.verifies):>4}  (signed by {_tally(verified)})")
    print(f"  canonicalizations    {canonical:>4}  (called from {_tally(census.canonical_by)})")
    for name in ("digests", "pydantic validations", "JSON copies", "deep copies"):
        print(f"  {name:<20} {census.calls[name]:>4}")
    print(f"  durable commits      {commits:>4}  ({parts}; transactions that wrote)")
    print(f"  read-only commits    {census.reads:>4}  (transactions that wrote nothing)")
    print(
        f"  SQL statements       {sum(census.statements.values()):>4}  (BEGIN and COMMIT included)"
    )
    print(
        f"  record: {len(events)} events, {len(canonicalize(census.record)):,} bytes canonical; "
        f"types {', '.join(e['type'].removeprefix('txn.') for e in events)}"
    )


def _role(kid: str) -> str:
    issuer = kid.split("#", 1)[0]
    if issuer == COORDINATOR:
        return "coordinator"
    if issuer == GATEWAY:
        return "gateway"
    return "participants" if issuer in PARTICIPANT_IDS else issuer


def _tally(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def print_results(results: Sequence[BackendResult], skipped: Sequence[str]) -> None:
    header = (
        f"{'backend':<11} {'mode':<12} {'txns':>5} {'txn/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'floor ms':>9} {'ratio':>7} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        for row in result.rows:
            # Sequential: p50 latency / floor. In flight: wall time per transaction / floor.
            cost = row.p50 if row.target else row.elapsed / len(row.latencies)
            ratio = cost / result.floor
            target, verdict = (f"<={TARGET:.1f}x", "PASS" if ratio <= TARGET else "MISS")
            if not row.target:
                target, verdict = "-", "info"
            print(
                f"{row.backend:<11} {row.mode:<12} {len(row.latencies):>5} {row.rate:>7.1f} "
                f"{ms(row.p50):>8} {ms(row.p99):>8} {ms(result.floor):>9} {ratio:>6.2f}x "
                f"{target:>7}  {verdict}"
            )
    for line in skipped:
        print(f"{'postgresql':<11} skipped: {line}")
    print(
        "ratio = sequential p50 latency / floor p50 (in flight: wall time per transaction / "
        "floor); floor = the same signs and verifies + 1 durable commit, done bare, "
        "interleaved with the sequential runs"
    )


def print_breakdown(result: BackendResult) -> None:
    census, split = result.census, result.split
    row = result.rows[0]
    crypto = statistics.median(result.floor_crypto)
    commit = statistics.median(result.floor_commit)
    commits = sum(census.commits.values())
    rest = row.p50 - crypto - commits * commit
    print(
        f"  {result.name}: p50 {ms(row.p50)} ms = crypto {ms(crypto)} "
        f"({len(census.signs)} signs + {len(census.verifies)} verifies) "
        f"+ {commits} durable commits x {ms(commit)} = {ms(commits * commit)} "
        f"+ the rest {ms(rest)} ({rest / row.p50:.0%})"
    )
    print(
        f"    the floor: crypto {ms(crypto)} + 1 commit {ms(commit)} = {ms(result.floor)} ms "
        f"(p50 of {len(result.floor_crypto)})"
    )
    serial = crypto + SERIAL_COMMITS * commit
    print(
        f"    the protocol's own floor, for context: crypto + the {SERIAL_COMMITS} durable "
        f"commits it puts in series = {ms(serial)} ms, {serial / result.floor:.2f}x the floor; "
        f"p50 is {row.p50 / serial:.2f}x it"
    )
    print(
        f"    waited for (mean of {split.count} more, instrumented): "
        f"participants {ms(split.participants)} ms ({split.calls:.0f} calls; the prepares "
        f"overlap), log writes {ms(split.log)} ms ({split.writes:.0f}, on the event loop), "
        f"coordinator's own work {ms(split.coordinator)} ms; total {ms(split.total)} ms"
    )
    statements = sum(census.statements.values())
    print(
        f"    the rest: {statements} SQL statements built and run through SQLAlchemy, thread "
        "hand-offs to the participants, pydantic, record copies, canonical JSON for the stores"
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


# --------------------------------------------------------------------------- profile


def profile_sqlite(folder: Path, count: int) -> None:
    """cProfile ``count`` sequential transactions on SQLite, CPU time of every thread."""
    backend = Backend("sqlite", folder / "profile")
    profilers: list[cProfile.Profile] = []

    def start_thread_profile() -> None:
        profiler = cProfile.Profile(time.thread_time)
        profilers.append(profiler)
        profiler.enable()

    async def batch(rig: Rig, size: int) -> None:
        executor = ThreadPoolExecutor(initializer=start_thread_profile)
        asyncio.get_running_loop().set_default_executor(executor)
        loop_profile.enable()
        for _ in range(size):
            await rig.commit_one()
        loop_profile.disable()

    loop_profile = cProfile.Profile(time.thread_time)
    done, wall = 0, 0.0
    while done < count:
        size = min(count - done, _MOST)
        with backend.rig() as rig:
            asyncio.run(rig.warm_up(2))
            started = time.perf_counter()
            asyncio.run(batch(rig, size))  # shuts the executor down: its threads are done
            wall += time.perf_counter() - started
        done += size
    stats = pstats.Stats(loop_profile)
    for profiler in profilers:
        stats.add(profiler)
    cpu = stats.get_stats_profile().total_tt
    print(
        f"\n--- cProfile: {count} sequential transactions on SQLite, CPU time (time.thread_time) "
        f"of the event loop and the participants' worker threads: {cpu / count * 1e3:.1f} ms "
        f"CPU per transaction ({wall / count * 1e3:.1f} ms wall under the profiler); "
        "waits (fsync, locks, the GIL) are not CPU and not in it. cProfile's cost per call "
        "inflates code made of many small calls (deepcopy, SQLAlchemy) several-fold: read it "
        "for what calls what; the instrumented split above has the wall time ---"
    )
    for title, order, limit in (
        ("by own time", "tottime", (30,)),
        ("hatp's functions by cumulative time", "cumulative", (_own_code(), 40)),
    ):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(*limit)
        print(f"\n{title}:")
        print(out.getvalue().split("\n", 4)[-1].rstrip())


def _own_code() -> str:
    return re.escape(str(Path(hatp.__file__).parent))


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="add a cProfile listing")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create a DB on")
    parser.add_argument("--folder", type=Path, default=None, help="where the SQLite files go")
    args = parser.parse_args(argv)
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
        where = f"SQLite files in {folder} ({filesystem(folder)})"
        print(f"sqlite: {where}")
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

        print()
        print_census(results[0])
        for result in results[1:]:
            counts = {len(c.signs) + len(c.verifies) for c in (result.census, results[0].census)}
            same = "the same" if len(counts) == 1 else "OTHER"
            commits = sum(result.census.commits.values())
            statements = sum(result.census.statements.values())
            print(
                f"on {result.name}: {same} signs and verifies, "
                f"{commits} durable commits, {statements} SQL statements"
            )
        print()
        print_results(results, skipped)
        print("\nwhere the time goes (sequential, per transaction):")
        for result in results:
            print_breakdown(result)
        if args.profile:
            profile_sqlite(folder, settings.profiled)
    print(f"\ntotal run time {time.perf_counter() - run_started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
