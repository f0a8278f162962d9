"""A participant whose own side fails: its store full or down, or its replies lost.

The coordinator-side fault points (:mod:`hatp._faults`) kill the
coordinator; these are the other half, what a participant does to the
coordinator. :class:`FaultyParticipant` sits in front of a real participant
and fails chosen calls in one of four ways:

- ``store-full``: the participant's store refuses the write, as SQLite does
  when the disk is full ("database or disk is full"), raised through the
  store's own mapping, so it is the very ``StoreUnavailable`` the participant
  would raise; nothing was done;
- ``store-unavailable``: the store cannot be reached (``StoreUnavailable``);
  nothing was done;
- ``unreachable``: no answer at all (``ParticipantUnavailable``); nothing was done;
- ``lost-reply``: the call ran and its effect is durable, the reply was lost
  (``ParticipantUnavailable``).

The crash-test child (:mod:`hatp.demo._child`, ``HATP_CHILD_FAULTS``) and the
kill-loop soak (``benchmarks/soak.py``) read the faults from a spec such as
``hotel.abort=store-full,payments.commit=unreachable*2``: the participant by
its service name, the call, the kind and, after ``*``, how many calls fail
(every one without it).
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import exc

from hatp.errors import HatpError, ParticipantUnavailable, StoreUnavailable
from hatp.participant import Participant, Relay
from hatp.store import Store

__all__ = ["FAULT_KINDS", "FAULT_METHODS", "Fault", "FaultyParticipant", "parse_faults"]

T = TypeVar("T")
log = logging.getLogger(__name__)

#: How a call can fail (see the module's docstring).
FAULT_KINDS = ("store-full", "store-unavailable", "unreachable", "lost-reply")
#: The calls a fault can be put on.
FAULT_METHODS = ("prepare", "quote", "renew", "replace", "commit", "abort", "compensate")
#: Every call of the kind fails when a fault says no count.
EVERY = -1


@dataclass(frozen=True)
class Fault:
    """Calls to ``method`` of the participant named ``service`` fail as ``kind``, ``times``
    times (:data:`EVERY`: always)."""

    service: str
    method: str
    kind: str
    times: int = EVERY

    def __str__(self) -> str:
        count = "" if self.times == EVERY else f"*{self.times}"
        return f"{self.service}.{self.method}={self.kind}{count}"


def parse_faults(spec: str, services: Sequence[str]) -> list[Fault]:
    """Read a fault spec (``service.method=kind[*times]``, comma-separated; empty: none).

    Raises:
        ValueError: an entry is malformed, or names an unknown service, call or kind;
            the message says which and lists what is allowed.
    """
    faults = []
    for entry in (part.strip() for part in spec.split(",")):
        if not entry:
            continue
        target, _, how = entry.partition("=")
        service, _, method = target.partition(".")
        kind, _, count = how.partition("*")
        if service not in services:
            raise ValueError(f"fault {entry!r}: the service is one of {', '.join(services)}")
        if method not in FAULT_METHODS:
            raise ValueError(f"fault {entry!r}: the call is one of {', '.join(FAULT_METHODS)}")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault {entry!r}: the kind is one of {', '.join(FAULT_KINDS)}")
        if count and not (count.isdigit() and int(count) > 0):
            raise ValueError(f"fault {entry!r}: the count after '*' is a whole number above 0")
        faults.append(Fault(service, method, kind, int(count) if count else EVERY))
    return faults


class FaultyParticipant(Relay):
    """Forwards every call to ``inner``, failing those ``faults`` name (``store`` is the
    participant's own store: a ``store-full`` fault is raised through it)."""

    def __init__(self, inner: Participant, store: Store, faults: Sequence[Fault]) -> None:
        super().__init__(inner)
        self._store = store
        self._faults: Mapping[str, Fault] = {f.method: f for f in faults}
        self._left = Counter({f.method: f.times for f in faults})
        self.failed: Counter[str] = Counter()

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        fault = self._faults.get(method)
        if fault is None or self._left[method] == 0:
            return await call()
        self._left[method] -= 1
        self.failed[method] += 1
        log.info("fault %s: %s of %s fails", fault.kind, method, self.participant_id)
        if fault.kind == "lost-reply":
            await call()
        raise self._failure(fault)

    def _failure(self, fault: Fault) -> HatpError:
        pid = self.participant_id
        if fault.kind == "store-full":
            return self._disk_full()
        if fault.kind == "store-unavailable":
            return StoreUnavailable(
                f"{pid}'s store could not be reached; nothing was recorded", participant=pid
            )
        if fault.kind == "unreachable":
            return ParticipantUnavailable(f"{pid} did not answer {fault.method}", participant=pid)
        return ParticipantUnavailable(
            f"the answer to {fault.method} from {pid} was lost on the way back", participant=pid
        )

    def _disk_full(self) -> StoreUnavailable:
        """The error the store raises when SQLite finds the disk full, by the store's own path."""
        full = sqlite3.OperationalError("database or disk is full")
        try:
            with self._store.transaction():
                raise exc.OperationalError("INSERT INTO ledger", {}, full)
        except StoreUnavailable as refused:
            return refused
        return StoreUnavailable("database or disk is full", participant=self.participant_id)
