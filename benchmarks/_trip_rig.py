"""The benchmark's rig: fresh trip worlds on SQLite or PostgreSQL, and bare commits.

A :class:`Rig` is one trip world (:mod:`hatp.demo.trip`) with its own stores,
a decision log and a coordinator with acme's Human Gateway, whose people approve
at once. Each transaction takes one of the demo airline's economy seats, and a world is
stocked only when first opened, so every measured batch gets a fresh rig.
:class:`Backend` says where a rig's stores live; :class:`BareCommit` is a
durable commit of the floor, done without hatp; :func:`in_flight` runs a
batch of transactions several at a time. Used by ``benchmarks/coordinator.py``
and, in each of its processes, by ``benchmarks/_two_processes.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import psycopg
from sqlalchemy.engine import URL, make_url

from hatp.clock import SystemClock
from hatp.coordinator import Outcome
from hatp.demo import _airline
from hatp.demo.trip import CARD, PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.model import COMPENSATION, TxnState
from hatp.participant import Operation, Participant, ParticipantServer, Relay
from hatp.store import DecisionLog, Store, open_store

#: The demo airline's economy seats (rows 4-30, A-F): one per transaction.
#: Business seats cost more than the plan allows, so the airline votes no on them.
ECONOMY = tuple(
    f"{row}{letter}"
    for row in range(_airline.BUSINESS_ROWS + 1, _airline.ROWS + 1)
    for letter in _airline.LETTERS
)
T = TypeVar("T")

#: The decision log's name among a rig's store owners (the others are participant ids).
LOG = "coordinator log"


# --------------------------------------------------------------------------- the workload


class TimedParticipant(Relay):
    """A participant that notes when each call started and ended (the instrumented pass)."""

    def __init__(self, inner: Participant, spans: list[tuple[float, float]]) -> None:
        super().__init__(inner)
        self._spans = spans

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            return await call()
        finally:
            self._spans.append((started, time.perf_counter()))


class TimedLog(DecisionLog):
    """A decision log that adds up the time of its writes (the instrumented pass)."""

    def __init__(self, store: Store, spans: list[tuple[float, float]]) -> None:
        super().__init__(store)
        self._spans = spans

    def _timed(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self._spans.append((started, time.perf_counter()))

    def create(self, *args: Any, **kwargs: Any) -> int:
        return int(self._timed(super().create, *args, **kwargs))

    def append(self, *args: Any, **kwargs: Any) -> None:
        self._timed(super().append, *args, **kwargs)

    def release(self, *args: Any, **kwargs: Any) -> None:
        self._timed(super().release, *args, **kwargs)

    def renew(self, *args: Any, **kwargs: Any) -> None:
        self._timed(super().renew, *args, **kwargs)


#: What a participant server calls on an operation: the public methods of
#: hatp.participant.Operation (one it gains later is timed too).
_OPERATION_METHODS = tuple(
    name
    for name, member in vars(Operation).items()
    if inspect.isfunction(member) and not name.startswith("_")
)


def _time_operations(server: ParticipantServer, cpu: list[float]) -> None:
    """Have each of ``server``'s demo operations add the CPU of every call to ``cpu``.

    The methods are replaced on the operation objects the server holds. The operation
    a server adds itself to take back commits (``COMPENSATION``) is hatp's, not the
    workload's: it is not timed, but its calls into the demo's operations are."""
    for name, operation in server.operations.items():
        if name == COMPENSATION:
            continue
        for method in _OPERATION_METHODS:
            setattr(operation, method, _cpu_timed(getattr(operation, method), cpu))


def _cpu_timed(fn: Callable[..., T], cpu: list[float]) -> Callable[..., T]:
    def timed(*args: Any, **kwargs: Any) -> T:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            cpu.append(time.thread_time() - started)

    return timed


@dataclass
class Spans:
    """When the participants' calls and the log's writes ran, for the instrumented pass."""

    participants: list[tuple[float, float]] = field(default_factory=list)
    log: list[tuple[float, float]] = field(default_factory=list)
    #: The CPU seconds (of the thread that ran it) of each call into a participant's
    #: operation: the workload's own code, which the floor does not count.
    operations: list[float] = field(default_factory=list)


class Rig:
    """One fresh trip world, a decision log and a coordinator; one seat per transaction.

    ``urls`` maps each participant id and :data:`LOG` to a store URL.
    """

    def __init__(
        self, folder: Path, urls: Mapping[str, str], tag: str, spans: Spans | None = None
    ) -> None:
        self.clock = SystemClock()
        participant_urls = {pid: urls[pid] for pid in PARTICIPANT_IDS}
        self.world = TripWorld.open(
            folder, self.clock, rooms=len(ECONOMY), store_urls=participant_urls
        )
        # The demo card holds 5,000.00; each transaction charges 730.00.
        self.world.edit_card(CARD, "1000000.00")
        self.log_store = open_store(urls[LOG])
        log = DecisionLog(self.log_store) if spans is None else TimedLog(self.log_store, spans.log)
        links: dict[str, Participant] = {}
        if spans is not None:
            links = {
                pid: TimedParticipant(p, spans.participants)
                for pid, p in self.world.participants.items()
            }
            for server in self.world.participants.values():
                _time_operations(server, spans.operations)
        # acme's Human Gateway; whoever it asks approves at once, with a signed vote.
        gateway = self.world.gateway(self.world.scripted_people("approve"))
        self.coordinator = self.world.coordinator(log, gateway, links=links)
        self.tag = tag
        self._seats = iter(ECONOMY)
        self._count = 0

    @property
    def stores(self) -> dict[str, Store]:
        """Every store of the rig by owner: :data:`LOG` and each participant id."""
        return {LOG: self.log_store, **self.world.stores}

    def plan(self) -> dict[str, Any]:
        """The next plan: a new txnId, the next free seat, a traveller of its own."""
        seat = next(self._seats, None)
        if seat is None:
            raise RuntimeError(f"world {self.tag} has no free economy seat left")
        number, self._count = self._count, self._count + 1
        name = f"{self.tag}-{number:04d}"
        return trip_plan(
            f"bench-{name}",
            decide_by=self.clock.now() + timedelta(minutes=10),
            seat=seat,
            # Its own calendar: concurrent commits of one calendar would (rightly)
            # refuse each other's stale preconditions.
            traveller=f"human://acme.com/traveller-{name}",
        )

    async def commit_one(self, plan: dict[str, Any] | None = None) -> tuple[float, Outcome]:
        """Run one transaction; return its latency in seconds and its outcome.

        Raises:
            RuntimeError: it did not commit (the benchmark counts committed transactions only).
        """
        plan = plan or self.plan()
        started = time.perf_counter()
        outcome = await self.coordinator.run(plan)
        elapsed = time.perf_counter() - started
        if outcome.state is not TxnState.COMMITTED:
            raise RuntimeError(f"{outcome.txn_id} ended {outcome.state}: {outcome.reason}")
        return elapsed, outcome

    async def warm_up(self, count: int) -> None:
        for _ in range(count):
            await self.commit_one()

    def close(self) -> None:
        self.world.close()
        self.log_store.close()

    def __enter__(self) -> Rig:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class Batch:
    """Committed transactions' latencies, and when their batch started and ended.

    ``started`` and ``ended`` are on ``time.monotonic``, one clock for every process
    of the machine, so batches run by several processes at once can be put together.
    """

    latencies: list[float]
    started: float
    ended: float

    @property
    def elapsed(self) -> float:
        """The batch's wall time, in seconds."""
        return self.ended - self.started


async def in_flight(rig: Rig, count: int, width: int) -> Batch:
    """Run ``count`` transactions on ``rig``, ``width`` at a time; each must commit."""
    plans = iter([rig.plan() for _ in range(count)])
    latencies: list[float] = []

    async def worker() -> None:
        for plan in plans:  # shared: each worker takes the next plan when it is free
            latencies.append((await rig.commit_one(plan))[0])

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(width)))
    return Batch(latencies, started, time.monotonic())


# --------------------------------------------------------------------------- backends


class BareCommit(Protocol):
    """A durable commit done without hatp: the floor makes one per commit that wrote."""

    def commit(self, body: str) -> None: ...

    def close(self) -> None: ...


class SqliteCommit:
    """A SQLite file in WAL mode with ``synchronous=FULL``, as hatp's stores are."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")

    def commit(self, body: str) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute("INSERT INTO floor (body) VALUES (?)", (body,))
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class PostgresCommit:
    """A psycopg connection with ``synchronous_commit=on``, as hatp's stores have."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(_plain(url), options="-c synchronous_commit=on")
        self._conn.execute("CREATE TABLE hatp_floor (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        self._conn.commit()

    def commit(self, body: str) -> None:
        self._conn.execute("INSERT INTO hatp_floor (body) VALUES (%s)", (body,))
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


class Backend:
    """Where a rig's stores live: SQLite files in a folder, or schemas in one PG database."""

    def __init__(self, name: str, folder: Path, database_url: str | None = None) -> None:
        self.name = name
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._database_url = database_url
        self._rigs = 0

    def rig(self, spans: Spans | None = None) -> Rig:
        """Open a fresh world (full seat map, empty ledgers) and a fresh decision log."""
        folder, tag, urls = self.fresh([LOG, *PARTICIPANT_IDS])
        return Rig(folder, urls, tag, spans)

    def fresh(self, owners: list[str]) -> tuple[Path, str, dict[str, str]]:
        """A new folder, its tag, and a new store URL for each of ``owners``."""
        self._rigs += 1
        tag = f"{self.name[:2]}{self._rigs}"
        folder = self.folder / tag
        folder.mkdir()
        if self._database_url is None:
            urls = {owner: f"sqlite:///{folder / f's{n}.db'}" for n, owner in enumerate(owners)}
        else:
            urls = {
                owner: _schema_url(self._database_url, f"{tag}_s{n}")
                for n, owner in enumerate(owners)
            }
        return folder, tag, urls

    def bare_commit(self) -> BareCommit:
        if self._database_url is None:
            return SqliteCommit(self.folder / "floor.db")
        return PostgresCommit(self._database_url)


def _plain(url: str | URL) -> str:
    """The libpq form of a SQLAlchemy URL (psycopg takes no ``+psycopg``), password kept."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _schema_url(database_url: str, schema: str) -> str:
    with psycopg.connect(_plain(database_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def create_database(admin_url: str) -> tuple[str | None, str]:
    """Create a database for this run on the server ``admin_url`` names.

    Returns:
        The new database's URL, or ``None`` when no server answers; and a line
        saying which server and database, or why there is none.
    """
    admin = make_url(admin_url).set(drivername="postgresql+psycopg")
    name = f"hatp_bench_{os.getpid()}_{secrets.token_hex(3)}"
    shown = admin.render_as_string(hide_password=True)
    try:
        with psycopg.connect(_plain(admin), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
            version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    except psycopg.Error as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        return None, f"PostgreSQL not reachable at {shown} ({detail}); use --postgres URL"
    url = admin.set(database=name).render_as_string(hide_password=False)
    return url, f"PostgreSQL {version} at {shown}, database {name} (dropped at the end)"


def drop_database(admin_url: str, url: str) -> None:
    """Drop the database :func:`create_database` made, closing any session left in it."""
    with psycopg.connect(_plain(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
