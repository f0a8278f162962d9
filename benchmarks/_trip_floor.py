"""What one committed trip does, counted, and the protocol floor it implies, redone bare.

:func:`take_census` runs one transaction on a :class:`~_trip_rig.Rig` with a
profile hook in every thread and SQLAlchemy events on every engine, and counts
what it did (:class:`Census`). :class:`Floor` is the work the protocol itself
requires of that transaction, ready to redo without hatp:

- the same Ed25519 signs and verifies, on the same bytes, by the same keys;
- one canonicalization per distinct object signed or digested. Objects are
  told apart by their canonical bytes: every value :func:`hatp.evidence.canonicalize`
  returned to ``sign``, ``verify`` or ``digest``, and every already-canonical
  text given to ``digest_bytes`` directly, is collected, and equal bytes count
  once. So a vote one party signs and another verifies, or an event signed and
  then digested into the chain unchanged, is one canonicalization, as a party
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
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

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
    digest.__code__: "digests",
    digest_bytes.__code__: "digest_bytes",
    SigningKey.sign_bytes.__code__: "sign",
    PublicKey.verify_bytes.__code__: "verify",
    copy.deepcopy.__code__: "deepcopy",
    copy_json.__code__: "JSON copies",
}
# Who canonicalizes to sign, verify or digest: the bytes it gets back are evidence.
_FOR_EVIDENCE = frozenset({sign.__code__, verify.__code__, digest.__code__})
_WROTE = "hatp-bench-wrote"
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
            elif name == "canonicalize":
                census.canonical_by[caller_code.co_name if caller_code else "?"] += 1
            elif name == "digest_bytes":
                if caller_code is not digest.__code__:  # a stored canonical text, digested
                    census.evidence[bytes(frame.f_locals["data"])] = None
                    census.evidence_calls += 1
            elif name == "deepcopy":
                if caller_code is None or caller_code.co_filename != copy_module:
                    census.calls["deep copies"] += 1  # top-level ones; not the recursion
            else:
                census.calls[name] += 1

    owners = {store.url: owner for owner, store in rig.stores.items()}

    def on_commit(conn: sa.Connection) -> None:
        with lock:
            if conn.info.pop(_WROTE, False):
                owner = owners.get(_url(conn.engine), "other")
                census.commits[owner] += 1
                census.commit_order.append(owner)
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


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


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
