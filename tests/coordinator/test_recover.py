"""Taking over: presumed abort when nothing was decided, and one owner at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coordinator.trips import (
    ALL_NONE,
    ALL_WHOLE,
    APPROVE,
    APPROVER,
    REJECT,
    ScriptedAnswer,
    Stall,
    Trip,
    events,
    failed_findings,
)
from hatp.demo import AIRLINE, CALENDAR, COORDINATOR, HOTEL, PAYMENTS
from hatp.demo.trip import CARD
from hatp.evidence import RecordWriter, digest
from hatp.model import ApprovalDecision, Decision, TxnState, parse_plan


def _planned_then_crashed(trip: Trip) -> str:
    """Log a transaction exactly as a coordinator does at ``log.planned``, then stop."""
    plan = parse_plan(trip.plan())
    plan_digest = digest(plan.to_wire())
    writer = RecordWriter(plan.txn_id, trip.clock)
    body = {"planDigest": plan_digest, "plan": plan.to_wire(), "coordinator": COORDINATOR}
    writer.append("txn.planned", {**body, "fence": 1}, trip.world.keys["coordinator"])
    now = trip.clock.now()
    trip.log.create(plan.txn_id, plan.to_wire(), plan_digest, "crashed", now, 30.0, writer.events())
    return plan.txn_id


def _presumed_abort(record: dict[str, Any]) -> None:
    (taken,) = events(record, "txn.taken-over")
    assert (taken["body"]["owner"], taken["body"]["fence"]) == ("second", 2)
    (decided,) = events(record, "txn.decided")
    assert decided["body"]["decision"] == "abort"
    assert decided["body"]["reason"].startswith("presumed abort")


def test_nothing_decided_before_the_crash_is_presumed_abort_COORD_RECOVER(trip: Trip) -> None:
    """[COORD-RECOVER] only the plan was logged: the next owner aborts, continuing the chain."""
    txn = _planned_then_crashed(trip)
    first = trip.log.events(txn)[0]
    later = trip.coordinator(owner="second")
    assert asyncio.run(later.recover()) == []  # the crashed owner's lease is still live
    assert asyncio.run(later.resume(txn)) is None
    trip.clock.advance(31)
    (outcome,) = asyncio.run(later.recover())
    assert (outcome.txn_id, outcome.state) == (txn, TxnState.ABORTED)
    assert outcome.record["events"][0] == first
    _presumed_abort(outcome.record)
    assert len(events(outcome.record, "txn.aborted")) == 4
    assert trip.log.get(txn).decision is Decision.ABORT
    assert trip.world.effects(txn) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


async def _crash_while_asking(trip: Trip, plan: dict[str, Any]) -> None:
    """Run ``plan`` until every branch voted and the person is still deciding; then kill it."""
    silent = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, never=True)
    task = asyncio.create_task(trip.coordinator(silent).run(plan))
    await trip.votes.wait(plan["txnId"], 4)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_holds_placed_before_the_crash_are_released_on_takeover_COORD_RECOVER(
    trip: Trip,
) -> None:
    """[COORD-RECOVER] killed while the human decides: presumed abort releases every hold."""
    plan = trip.plan()
    txn = plan["txnId"]
    asyncio.run(_crash_while_asking(trip, plan))
    assert trip.log.get(txn).state is TxnState.ACTIVE
    first = trip.log.events(txn)
    assert [e["type"] for e in first] == ["txn.planned"]
    assert trip.kinds(AIRLINE, txn) == ["held"]
    trip.clock.advance(31)
    (outcome,) = asyncio.run(trip.coordinator(owner="second").recover())
    assert outcome.state is TxnState.ABORTED
    assert outcome.record["events"][0] == first[0]
    _presumed_abort(outcome.record)
    assert trip.kinds(AIRLINE, txn) == ["held", "released"]
    assert trip.kinds(HOTEL, txn) == ["held", "released"]
    assert trip.kinds(PAYMENTS, txn) == ["authorized", "voided"]
    assert trip.world.effects(txn) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


# A coordinator stopped in phase 2, at each logged state: the next owner finishes it.
STOPPED = [
    # decided commit; stopped as it sent the capture
    ("committing", APPROVE, False, PAYMENTS, "commit", TxnState.COMMITTED, ALL_WHOLE),
    # decided abort; stopped as it released the room
    ("aborting", REJECT, False, HOTEL, "abort", TxnState.ABORTED, ALL_NONE),
    # the capture was refused; stopped as it removed the calendar event
    ("unwinding", APPROVE, True, CALENDAR, "compensate", TxnState.ABORTED, ALL_NONE),
]


@pytest.mark.parametrize(
    ("logged", "answer", "edit_card", "participant", "method", "state", "effects"),
    STOPPED,
    ids=[s[0] for s in STOPPED],
)
def test_a_takeover_finishes_phase_two_from_the_log_COORD_RECOVER(
    trip: Trip,
    logged: str,
    answer: ScriptedAnswer,
    edit_card: bool,
    participant: str,
    method: str,
    state: TxnState,
    effects: dict[str, str],
) -> None:
    """[COORD-RECOVER] committing, aborting, unwinding: finished by the next owner, once."""
    plan = trip.plan()
    txn = plan["txnId"]
    stall = Stall(trip.links[participant], method)

    async def crash() -> None:
        edit = (lambda: trip.world.edit_card(CARD, "9000.00")) if edit_card else None
        coordinator = trip.coordinator(answer, links={participant: stall}, meanwhile=edit)
        task = asyncio.create_task(coordinator.run(plan))
        await asyncio.wait_for(stall.entered.wait(), 20.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(crash())
    assert trip.log.get(txn).state.value == logged
    before = trip.log.events(txn)
    trip.clock.advance(31)
    (outcome,) = asyncio.run(trip.coordinator(owner="second").recover())
    assert outcome.state is state
    assert outcome.record["events"][: len(before)] == before
    assert trip.world.effects(txn) == effects
    assert failed_findings(outcome, trip.world) == []
