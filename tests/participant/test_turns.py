"""The calls of in-process participants take turns on their worker threads, and a stuck
one holds the others up for its grace only (hatp._turns)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hatp import _turns
from hatp.clock import ManualClock
from hatp.model import BranchState
from hatp.participant import ParticipantServer, Prepared, Work
from hatp.store import Store, open_store
from participant.ops import HoldSeat, branch, plan, seat, server, setup_ledgers

#: How long a test waits for something it expects to happen (not a timing claim).
WAIT = 10.0


class Held(HoldSeat):
    """HoldSeat whose prepare says it started, then waits to be let go (a database that
    does not answer, while it waits)."""

    def __init__(self, log: list[str], name: str) -> None:
        self._log = log
        self._name = name
        self.started = threading.Event()
        self.go = threading.Event()

    def prepare(self, work: Work) -> Prepared:
        self._log.append(f"{self._name} starts")
        self.started.set()
        if not self.go.wait(WAIT):
            raise TimeoutError(f"{self._name} was never let go")
        prepared = super().prepare(work)
        self._log.append(f"{self._name} ends")
        return prepared


@pytest.fixture
def other_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path / "other.db")
    setup_ledgers(store)
    yield store
    store.close()


def _grace(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    monkeypatch.setattr(_turns, "GRACE_SECONDS", seconds)


def _pair(
    store: Store, other_store: Store, clock: ManualClock, log: list[str]
) -> tuple[ParticipantServer, Held, ParticipantServer, Held]:
    setup_ledgers(store)
    first_op, second_op = Held(log, "first"), Held(log, "second")
    return (
        server(store, clock, first_op),
        first_op,
        server(other_store, clock, second_op),  # the same airline, on a store of its own
        second_op,
    )


def test_two_participants_calls_run_one_after_the_other(
    store: Store, other_store: Store, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two participants prepared at once, within the grace: the second's work starts only
    once the first's has ended."""
    _grace(monkeypatch, 60.0)
    log: list[str] = []
    first, first_op, second, second_op = _pair(store, other_store, clock, log)
    p = plan("txn-1", branch("seat"))

    async def body() -> None:
        one = asyncio.ensure_future(first.prepare(p, "seat", 1))
        await asyncio.to_thread(first_op.started.wait, WAIT)
        two = asyncio.ensure_future(second.prepare(p, "seat", 1))
        await asyncio.sleep(0.05)
        assert not second_op.started.is_set()
        first_op.go.set()
        second_op.go.set()
        await asyncio.gather(one, two)

    asyncio.run(body())
    assert log == ["first starts", "first ends", "second starts", "second ends"]
    assert seat(store) == seat(other_store) == ("held", "txn-1/seat")


def test_a_stuck_participant_holds_another_up_only_for_the_grace(
    store: Store, other_store: Store, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A participant whose database does not answer does not keep another participant's
    call waiting past the grace: the other prepares, votes and ends while it is stuck."""
    _grace(monkeypatch, 0.05)
    log: list[str] = []
    stuck, stuck_op, other, other_op = _pair(store, other_store, clock, log)
    other_op.go.set()
    p = plan("txn-1", branch("seat"))

    async def body() -> None:
        held = asyncio.ensure_future(stuck.prepare(p, "seat", 1))
        await asyncio.to_thread(stuck_op.started.wait, WAIT)
        receipt = await asyncio.wait_for(other.prepare(p, "seat", 1), WAIT)
        assert receipt["vote"] == "yes"
        assert not held.done()
        stuck_op.go.set()
        await held

    asyncio.run(body())
    assert log == ["first starts", "second starts", "second ends", "first ends"]
    assert asyncio.run(stuck.status("txn-1", "seat")).state is BranchState.PREPARED
