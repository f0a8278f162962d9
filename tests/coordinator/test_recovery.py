"""A served coordinator finishes its own work: the recovery loop, asks withdrawn after a
presumed abort, and participants that sweep their expired holds ([COORD-RECOVER],
[COORD-WITHDRAW], [PART-SWEEP]).

The owner that "dies" is a real coordinator run cancelled while the person decides
(nothing of phase 1 reached its log); the next owner is another coordinator on the
same log, on the same manual clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from coordinator.trips import (
    ALL_NONE,
    APPROVER,
    SLEEPERS_SECONDS,
    ScriptedAnswer,
    Trip,
    failed_findings,
)
from hatp.coordinator import Recovery
from hatp.demo import AIRLINE, HOTEL, PAYMENTS
from hatp.model import ApprovalDecision, TxnState
from hatp.store import AskKind

SILENT = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, never=True)


async def _until(check: Callable[[], bool]) -> None:
    """Let the loop (and the stores' worker threads) run until ``check()`` holds; fail the
    test after :data:`SLEEPERS_SECONDS` (a bound on a hang, not a claim about timing)."""
    end = time.monotonic() + SLEEPERS_SECONDS
    while not check():
        if time.monotonic() > end:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.005)


async def _die_while_asking(trip: Trip, plan: dict[str, Any]) -> None:
    """Run ``plan`` until every branch voted and the ask is open at the gateway (nothing
    of it logged yet); then stop the run as a killed process would."""
    task = asyncio.create_task(trip.coordinator(SILENT).run(plan))
    await trip.votes.wait(plan["txnId"], 4)
    await _until(lambda: bool(trip.world.asks.open_for(AskKind.APPROVAL, plan["txnId"])))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_presumed_abort_withdraws_the_asks_the_log_never_named_COORD_WITHDRAW(
    trip: Trip,
) -> None:
    """[COORD-WITHDRAW] The ask's pending vote never reached the log; the next owner's
    presumed abort still withdraws it, so nobody goes on being asked until decideBy."""
    plan = trip.plan()
    txn = plan["txnId"]
    asyncio.run(_die_while_asking(trip, plan))
    [ask_id] = trip.world.asks.open_for(AskKind.APPROVAL, txn)
    assert [e["type"] for e in trip.log.events(txn)] == ["txn.planned"]
    trip.clock.advance(31)
    (outcome,) = asyncio.run(trip.coordinator(owner="second").recover())
    assert outcome.state is TxnState.ABORTED
    assert trip.world.asks.open_for(AskKind.APPROVAL, txn) == []
    withdrawn = trip.world.asks.get(ask_id)
    assert not withdrawn.is_open
    assert trip.world.effects(txn) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_the_loop_takes_a_stopped_owners_transactions_over_once_its_lease_ends_COORD_RECOVER(
    trip: Trip,
) -> None:
    """[COORD-RECOVER] A served process recovers at start and keeps looking: two
    transactions left open by a stopped owner are finished by the loop once that owner's
    lease has ended, each once, holds released and asks withdrawn."""
    plans = [trip.plan(), trip.plan()]

    async def go() -> Recovery:
        for plan in plans:
            await _die_while_asking(trip, plan)
        recovery = Recovery(trip.coordinator(owner="second"), every=10)
        async with recovery.running():
            await _until(lambda: recovery.stats.runs >= 1)
            assert recovery.stats.takeovers == 0  # the stopped owner's lease still runs
            trip.clock.advance(31)
            await _until(lambda: recovery.stats.finished == 2)
        return recovery

    recovery = asyncio.run(go())
    assert recovery.stats.takeovers == 2 and recovery.stats.failures == 0
    for plan in plans:
        txn = plan["txnId"]
        assert trip.log.get(txn).state is TxnState.ABORTED
        assert trip.world.effects(txn) == ALL_NONE
        assert trip.world.asks.open_for(AskKind.APPROVAL, txn) == []
        assert failed_findings(recovery.stats.outcomes[txn], trip.world) == []


def test_a_transaction_being_finished_is_not_claimed_twice_COORD_RECOVER(trip: Trip) -> None:
    """[COORD-RECOVER] Two turns while one takeover is still running start it once."""
    plan = trip.plan()

    async def go() -> tuple[list[str], list[str]]:
        await _die_while_asking(trip, plan)
        trip.clock.advance(31)
        recovery = Recovery(trip.coordinator(owner="second"), every=10)
        first = await recovery.turn()
        again = await recovery.turn()
        await recovery.settle()
        return first, again

    first, again = asyncio.run(go())
    assert first == [plan["txnId"]] and again == []
    assert trip.log.get(plan["txnId"]).state is TxnState.ABORTED


def test_a_failing_log_is_logged_and_looked_at_again_COORD_RECOVER(
    trip: Trip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[COORD-RECOVER] A turn whose store fails does not end the loop."""
    from hatp.errors import StoreUnavailable

    coordinator = trip.coordinator(owner="second")
    failing = {"left": 1}
    claimable = coordinator.log.claimable

    def flaky(now: Any) -> list[str]:
        if failing["left"]:
            failing["left"] -= 1
            raise StoreUnavailable("the database did not answer")
        return claimable(now)

    monkeypatch.setattr(coordinator.log, "claimable", flaky)

    async def go() -> Recovery:
        recovery = Recovery(coordinator, every=5)
        async with recovery.running():
            await _until(lambda: recovery.stats.failures == 1)
            trip.clock.advance(5)
            await _until(lambda: recovery.stats.runs == 2)
        return recovery

    recovery = asyncio.run(go())
    assert recovery.stats.failures == 1 and recovery.stats.runs == 2


def test_a_participant_sweeps_a_hold_whose_coordinator_vanished_PART_SWEEP(trip: Trip) -> None:
    """[PART-SWEEP] No coordinator ever comes back: the holds end at their lease, released
    by the participants' own sweep."""
    plan = trip.plan()
    txn = plan["txnId"]

    async def go() -> None:
        await _die_while_asking(trip, plan)
        async with trip.world.sweeping(every=60):
            assert trip.kinds(AIRLINE, txn) == ["held"]
            trip.clock.advance(21 * 60)  # past the 20-minute leases
            await _until(lambda: trip.kinds(AIRLINE, txn) == ["held", "released"])
            await _until(lambda: trip.kinds(HOTEL, txn) == ["held", "released"])

    asyncio.run(go())
    assert trip.kinds(PAYMENTS, txn)[0] == "authorized"
