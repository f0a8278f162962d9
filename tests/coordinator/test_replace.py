"""A lost hold is placed again without asking anyone twice [COORD-REPLACE].

People approve the plan, not one particular hold: when the seat's hold is
lost while bob decides, the coordinator places it again under the same plan
(the next attempt) and bob's one approval still decides the transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from coordinator.trips import (
    ALL_NONE,
    ALL_WHOLE,
    APPROVER,
    RENEW_AT,
    Late,
    ScriptedAnswer,
    Trip,
    approve_after,
    events,
    failed_findings,
    sleepers,
)
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE
from hatp.demo._time import simulate
from hatp.errors import ParticipantUnavailable
from hatp.model import ApprovalDecision, TxnState, parse_plan
from hatp.participant import Participant, Relay

T = TypeVar("T")
#: bob's delegate: asked when bob misses his 15-minute SLA.
DELEGATE = "human://acme.com/carol"


class LoseRenewals(Relay):
    """Loses every renew on the way to the airline; other calls go through."""

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == "renew":
            raise ParticipantUnavailable("the renew was lost", participant=self.participant_id)
        return await call()


def _seat(outcome: Outcome, kind: str) -> list[dict[str, Any]]:
    return [e["body"] for e in events(outcome.record, kind) if e["body"]["branchId"] == "seat"]


def test_a_hold_lost_at_renewal_is_placed_again_and_bob_is_asked_once_COORD_REPLACE(
    trip: Trip,
) -> None:
    """[COORD-REPLACE] the first renewals arrive 11 minutes late, after the 20-minute leases
    ended: HOLD_EXPIRED. The holds are placed again (attempt 2); bob misses his 15-minute
    SLA, carol is asked (the gateway notices at 22 minutes, once the clock moved on) and
    approves 5 minutes later; that one approval commits the trip."""
    plan = trip.plan(decide_in=40 * 60)
    slow = ScriptedAnswer(ApprovalDecision.APPROVE, DELEGATE, after_seconds=5 * 60)
    late = {AIRLINE: Late(trip.links[AIRLINE], trip.clock, 11 * 60, method="renew")}

    outcome = asyncio.run(simulate(trip.clock, trip.coordinator(slow, links=late).run(plan)))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    (replaced,) = _seat(outcome, "txn.replaced")
    assert replaced["problem"] is None
    assert replaced["receipt"]["attempt"] == 2
    (first,) = _seat(outcome, "txn.prepared")
    assert replaced["receipt"]["leaseExpiresAt"] > first["receipt"]["leaseExpiresAt"]
    assert len(events(outcome.record, "txn.pending")) == 1
    assert len(events(outcome.record, "txn.approval")) == 1
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


def test_a_lease_found_ended_at_the_decision_is_placed_again_COORD_REPLACE(trip: Trip) -> None:
    """[COORD-REPLACE] [COORD-LEASE] every renewal of the seat is lost, so its 20-minute lease
    has ended when bob approves at 25 minutes: the seat is held again, then committed."""
    links = {AIRLINE: LoseRenewals(trip.links[AIRLINE])}
    plan = trip.plan(decide_in=40 * 60)
    outcome = asyncio.run(
        approve_after(trip, plan, 25 * 60, links=links, renewals=1, keepers_after=1)
    )
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    (replaced,) = _seat(outcome, "txn.replaced")
    assert replaced["receipt"]["attempt"] == 2
    kinds = [e["type"] for e in outcome.record["events"]]
    assert kinds.index("txn.approval") < kinds.index("txn.replaced") < kinds.index("txn.decided")
    assert len(events(outcome.record, "txn.pending")) == 1
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


class Rival(Relay):
    """Before the replace reaches the airline, another trip holds the seat just freed."""

    def __init__(self, inner: Participant, trip: Trip, rival: dict[str, Any]) -> None:
        super().__init__(inner)
        self._airline = trip.world.participants[AIRLINE]
        self._rival = parse_plan(rival)

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == "replace":
            receipt = await self._airline.prepare(self._rival, "seat", 1)
            assert receipt["vote"] == "yes"
        return await call()


def test_a_hold_that_cannot_be_placed_again_aborts_COORD_REPLACE(trip: Trip) -> None:
    """[COORD-REPLACE] the seat's hold is lost and another trip takes the seat before it is
    placed again: the replace votes no (SOLD_OUT), the decision is abort, nothing is kept,
    and bob's pending ask is withdrawn."""
    plan = trip.plan(decide_in=40 * 60)
    rival = trip.plan(seat=plan["branches"][0]["args"]["seat"])
    slow = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_seconds=25 * 60)
    late = Late(trip.links[AIRLINE], trip.clock, 11 * 60, method="renew")
    links = {AIRLINE: Rival(late, trip, rival)}

    async def drive() -> Outcome:
        task = asyncio.create_task(trip.coordinator(slow, links=links).run(plan))
        await trip.votes.wait(plan["txnId"], len(plan["branches"]))
        await sleepers(trip.clock, 6)  # lease keeper, deadline, poll, approver, 2 hold keepers
        trip.clock.advance(RENEW_AT)
        return await task

    outcome = asyncio.run(drive())
    assert outcome.state is TxnState.ABORTED
    (replaced,) = _seat(outcome, "txn.replaced")
    assert replaced["receipt"]["vote"] == "no" and "SOLD_OUT" in replaced["problem"]
    assert "could not be placed again" in outcome.reason or "not placed again" in outcome.reason
    (approval,) = events(outcome.record, "txn.approval")
    assert approval["body"]["approval"]["withdrawn"] is True
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []
