"""What one committed trip does, counted, and the protocol floor it implies, redone bare.

:func:`take_census` runs one transaction on a :class:`~_trip_rig.Rig` with a
profile hook in every thread and a count of every store's statements at the
driver, and counts
what it did (:class:`Census`). :class:`Floor` is the work the protocol itself
requires of that transaction, ready to redo without hatp:

- the same Ed25519 signs and verifies, on the same bytes, by the same keys;
- one canonicalization per distinct object signed or digested. Objects are
  told apart by their canonical bytes: every message signed or verified and
  every text digested (the canonical form of an object, whether canonicalized
  there or kept from before) is collected, and equal bytes count once. So a
  vote one party signs and another verifies, or an event signed and then
  digested into the chain unchanged, is one canonicalization, as a party
  keeping the bytes would need. Canonicalizations for anything else (the stores'
  JSON columns, JSON checks) are not in the floor;
- the durable commits that wrote, by store, of which :data:`SERIAL_COMMITS`
  are in series (a rule count; see there).

:func:`floor_sample` times that work bare once: wall and process CPU of the
evidence work, and of the commits done through a :class:`~_trip_rig.BareCommit`.
Used by ``benchmarks/coordinator.py``.
"""

from __future__ import annotations

import asyncio
import copy
import sqlite3
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures.thread import _WorkItem
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import orjson
import psycopg
from sqlalchemy import event

from _trip_rig import BareCommit, Rig
from hatp.evidence import (
    PublicKey,
    SigningKey,
    canonicalize,
    copy_json,
    digest,
    digest_bytes,
    sign,
    verify,
)
from hatp.evidence._canonical import canonical_plain, plain_bytes
from hatp.store import Store
from hatp.store._offloop import _Call

#: The durable commits one committed trip makes one after another by the protocol's
#: own rules, whatever the code: the plan logged; the ask stored, then the vote on it
#: (the prepares overlap them); the decision logged before phase 2; the compensate
#: step, then the final step, then the holds (together); the outcome logged.
#: docs/design-notes.md counts them. Kept as a rule count rather than derived from
#: the census: the order commits happened in cannot tell a rule's ordering from one
#: the code chose (the census prints that order beside it, for a check by eye).
SERIAL_COMMITS = 8


# --------------------------------------------------------------------------- census


@dataclass
class Census:
    """What one committed transaction does, counted while it ran (every thread)."""

    signs: list[tuple[str, bytes]] = field(default_factory=list)  # (kid, signed bytes)
    verifies: list[tuple[str, bytes]] = field(default_factory=list)
    canonical_by: Counter[str] = field(default_factory=Counter)  # by calling function
    #: The canonical bytes of each object signed, verified or digested, first seen first.
    evidence: dict[bytes, None] = field(default_factory=dict)
    evidence_calls: int = 0  # canonicalizations (and digested texts) those came from
    calls: Counter[str] = field(default_factory=Counter)
    commits: Counter[str] = field(default_factory=Counter)  # that wrote, by store owner
    commit_order: list[str] = field(default_factory=list)  # their owners, in commit order
    reads: int = 0  # transactions that wrote nothing (their commit flushes nothing)
    statements: Counter[str] = field(default_factory=Counter)
    record: dict[str, Any] = field(default_factory=dict)


_COUNTED = {
    canonicalize.__code__: "canonicalize",
    # The signer's and the record writer's own canonical forms (one walk for both
    # the bytes and the read-back check), counted as the canonicalizations they are.
    canonical_plain.__code__: "canonicalize",
    plain_bytes.__code__: "canonicalize",
    digest.__code__: "digests",
    digest_bytes.__code__: "digest_bytes",
    SigningKey.sign_bytes.__code__: "sign",
    PublicKey.verify_bytes.__code__: "verify",
    copy.deepcopy.__code__: "deepcopy",
    copy_json.__code__: "JSON copies",
    # A call handed to a thread: a store call to the store's workers, anything else
    # (the in-process participants' calls) to the event loop's executor.
    _Call.__init__.__code__: "store hand-offs",
    _WorkItem.__init__.__code__: "executor hand-offs",
}
# Who canonicalizes to sign, verify or digest: the bytes it gets back are evidence.
_FOR_EVIDENCE = frozenset({sign.__code__, verify.__code__, digest.__code__})
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE"})


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
        if what not in ("call", "return"):
            return
        name = _COUNTED.get(frame.f_code)
        if name is None:
            return
        caller = frame.f_back
        caller_code = caller.f_code if caller else None
        with lock:
            if what == "return":
                # arg is what it returned: None when it raised
                if name == "canonicalize" and caller_code in _FOR_EVIDENCE and arg is not None:
                    census.evidence[arg] = None
                    census.evidence_calls += 1
            elif name in ("sign", "verify"):
                found = (frame.f_locals["self"].kid, bytes(frame.f_locals["message"]))
                (census.signs if name == "sign" else census.verifies).append(found)
                # The bytes signed or verified are an object's canonical form, however
                # the caller came by them (canonicalized now, or kept from before).
                census.evidence[found[1]] = None
            elif name == "canonicalize":
                census.canonical_by[caller_code.co_name if caller_code else "?"] += 1
            elif name == "digest_bytes":
                census.evidence[bytes(frame.f_locals["data"])] = None
                if caller_code is not digest.__code__:  # a canonical text kept, digested
                    census.evidence_calls += 1
                    census.calls["digests"] += 1
            elif name == "deepcopy":
                if caller_code is None or caller_code.co_filename != copy_module:
                    census.calls["deep copies"] += 1  # top-level ones; not the recursion
            else:
                census.calls[name] += 1

    database = _DatabaseCount(census, lock)
    for owner, store in rig.stores.items():
        database.watch(owner, store)
    threading.setprofile(hook)  # the event loop's worker threads start in asyncio.run
    sys.setprofile(hook)
    try:
        _, outcome = asyncio.run(rig.commit_one())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        database.stop()
    census.record = outcome.record
    return census


class _DatabaseCount:
    """Statements and commits, by store, counted at the driver: hatp runs its hot
    statements on the DB-API cursor (hatp.store._driver), below SQLAlchemy's events.

    A pool checkout tells which store a DB-API connection belongs to. On SQLite
    the connection's trace callback sees every statement it runs (``BEGIN
    IMMEDIATE`` and ``COMMIT`` among them); on PostgreSQL, while a connection is
    checked out, its class and cursor factory are swapped for ones that count
    ``execute``, ``executemany``, ``commit`` and ``rollback`` (psycopg sends
    ``BEGIN`` itself, uncounted). The store worker threads started before the
    census, so the profile hook cannot see them. A commit after an ``INSERT``,
    ``UPDATE`` or ``DELETE`` wrote; any other is a read.
    """

    def __init__(self, census: Census, lock: threading.Lock) -> None:
        self._census = census
        self._lock = lock
        self._owner: dict[int, str] = {}  # id of a checked-out DB-API connection -> owner
        self._wrote: set[int] = set()
        self._listening: list[tuple[Any, str, Any]] = []

    def watch(self, owner: str, store: Store) -> None:
        pool = store._engine.pool  # the benchmark counts below the store

        def checkout(dbapi: Any, _record: Any, _proxy: Any) -> None:
            with self._lock:
                self._owner[id(dbapi)] = owner
            if isinstance(dbapi, sqlite3.Connection):
                dbapi.set_trace_callback(lambda sql: self._statement(id(dbapi), sql))
            elif isinstance(dbapi, psycopg.Connection):
                _CountedConnection.count = self._statement
                dbapi.__class__ = _CountedConnection
                dbapi.cursor_factory = _CountedCursor

        def checkin(dbapi: Any, _record: Any) -> None:
            if isinstance(dbapi, sqlite3.Connection):
                dbapi.set_trace_callback(None)
            elif isinstance(dbapi, _CountedConnection):
                dbapi.__class__ = psycopg.Connection
                dbapi.cursor_factory = psycopg.Cursor
            with self._lock:
                self._owner.pop(id(dbapi), None)

        for name, fn in (("checkout", checkout), ("checkin", checkin)):
            event.listen(pool, name, fn)
            self._listening.append((pool, name, fn))

    def stop(self) -> None:
        for pool, name, fn in self._listening:
            event.remove(pool, name, fn)

    def _statement(self, conn: int, sql: str) -> None:
        with self._lock:
            owner = self._owner.get(conn)
            if owner is None:
                return  # not a store's (or the pool's own ping before checkout)
            census = self._census
            verb = sql.lstrip()[:8].upper()
            if verb.startswith("COMMIT"):
                if conn in self._wrote:
                    self._wrote.discard(conn)
                    census.commits[owner] += 1
                    census.commit_order.append(owner)
                else:
                    census.reads += 1
            elif verb.startswith("ROLLBACK"):
                self._wrote.discard(conn)
            elif verb[:6] in _WRITES:
                self._wrote.add(conn)
            census.statements[owner] += 1


class _CountedConnection(psycopg.Connection[Any]):
    """A checked-out psycopg connection while the census counts it."""

    __slots__ = ()
    count: Callable[[int, str], None]

    def commit(self) -> None:
        _CountedConnection.count(id(self), "COMMIT")
        super().commit()

    def rollback(self) -> None:
        _CountedConnection.count(id(self), "ROLLBACK")
        super().rollback()


class _CountedCursor(psycopg.Cursor[Any]):
    """Its cursors: each ``execute`` and ``executemany`` is one statement."""

    __slots__ = ()

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        _CountedConnection.count(id(self.connection), str(query))
        return super().execute(query, *args, **kwargs)

    def executemany(self, query: Any, *args: Any, **kwargs: Any) -> None:
        _CountedConnection.count(id(self.connection), str(query))
        super().executemany(query, *args, **kwargs)


# --------------------------------------------------------------------------- the floor


@dataclass(frozen=True)
class Floor:
    """The work the protocol requires of the census's transaction, ready to redo bare."""

    objects: list[Any]  # the distinct objects signed or digested, parsed back
    signs: list[tuple[bytes, SigningKey]]  # (canonical bytes, the key that signed them)
    verifies: list[tuple[bytes, bytes, PublicKey]]  # (signature, canonical bytes, key)
    bodies: list[str]  # one row per durable commit that wrote
    serial: int  # how many of those commits are in series

    @classmethod
    def from_census(cls, census: Census, keys: Sequence[SigningKey]) -> Floor:
        """The census's work, signed by the same keys (every kid it saw must be in ``keys``)."""
        by_kid = {key.kid: key for key in keys}
        texts = list(census.evidence)
        # Each commit writes one of the transaction's signed or digested objects in turn.
        commits = sum(census.commits.values())
        return cls(
            objects=[orjson.loads(text) for text in texts],
            signs=[(message, by_kid[kid]) for kid, message in census.signs],
            verifies=[
                (by_kid[kid].sign_bytes(message), message, by_kid[kid].public)
                for kid, message in census.verifies
            ],
            bodies=[texts[n % len(texts)].decode() for n in range(commits)],
            serial=SERIAL_COMMITS,
        )

    def evidence(self) -> None:
        """Canonicalize each distinct object once; make each sign and each verify."""
        for obj in self.objects:
            canonicalize(obj)
        for message, key in self.signs:
            key.sign_bytes(message)
        for signature, message, public in self.verifies:
            public.verify_bytes(signature, message)

    def commit(self, bare: BareCommit) -> None:
        """Make the durable commits, one after another, bare."""
        for body in self.bodies:
            bare.commit(body)


@dataclass(frozen=True)
class Sample:
    """One bare run of the floor: seconds of wall and of process CPU, by part."""

    evidence_wall: float
    evidence_cpu: float
    commits_wall: float  # all the durable commits, one after another
    commits_cpu: float
    commits: int
    serial: int

    @property
    def wall(self) -> float:
        """The floor's wall time: the evidence work, then the serial commits."""
        return self.evidence_wall + self.serial * self.commits_wall / self.commits

    @property
    def cpu(self) -> float:
        """The floor's CPU: the evidence work and every commit that wrote."""
        return self.evidence_cpu + self.commits_cpu


def floor_sample(floor: Floor, bare: BareCommit) -> Sample:
    """Do the floor's work bare once and time each part."""
    wall, cpu = time.perf_counter(), time.process_time()
    floor.evidence()
    wall_1, cpu_1 = time.perf_counter(), time.process_time()
    floor.commit(bare)
    wall_2, cpu_2 = time.perf_counter(), time.process_time()
    return Sample(
        wall_1 - wall, cpu_1 - cpu, wall_2 - wall_1, cpu_2 - cpu_1, len(floor.bodies), floor.serial
    )


def median_of(samples: Sequence[Sample], part: str) -> float:
    """The median over ``samples`` of one of a :class:`Sample`'s figures, by name."""
    return float(statistics.median(getattr(sample, part) for sample in samples))
