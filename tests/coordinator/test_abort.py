"""Phase 1 decides abort: a no, a rejection, a bad plan, a missed deadline, a lapsed lease."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from coordinator.conftest import OpenTrip
from coordinator.trips import (
    ALL_NONE,
    APPROVER,
    REJECT,
    RENEW_AT,
    ForgeApproval,
    NoRenew,
    ScriptedAnswer,
    Trip,
    approve_after,
    events,
    failed_findings,
    past_deadline,
    sleepers,
)
from hatp.clock import format_time, parse_time
from hatp.coordinator import ApprovalRequest, Gateway, Outcome
from hatp.demo import AIRLINE, HOTEL, PAYMENTS
from hatp.demo._airline import BookSeat
from hatp.errors import PlanInvalid
from hatp.model import ApprovalDecision, Decision, Plan, TxnState
from hatp.participant import Participant, Relay
from hatp.store import AskKind


def _branch(plan: dict[str, Any], branch_id: str) -> dict[str, Any]:
    return next(b for b in plan["branches"] if b["branchId"] == branch_id)


def _decided(outcome: Any) -> dict[str, Any]:
    (event,) = events(outcome.record, "txn.decided")
    body: dict[str, Any] = event["body"]
    return body


def test_a_rejection_aborts_and_releases_every_hold_COORD_ABORT(trip: Trip) -> None:
    """[COORD-ABORT] the approver rejects: ABORTED, holds released, card voided, nothing left."""
    plan = trip.plan()
    outcome = trip.run(plan, REJECT)
    assert outcome.state is TxnState.ABORTED
    assert f"the group decided reject: {APPROVER} rejected" in outcome.reason
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert trip.kinds(AIRLINE, outcome.txn_id) == ["held", "released"]
    assert trip.kinds(HOTEL, outcome.txn_id) == ["held", "released"]
    assert trip.kinds(PAYMENTS, outcome.txn_id) == ["authorized", "voided"]
    assert [e["body"]["branchId"] for e in events(outcome.record, "txn.aborted")] == [
        "seat",
        "room",
        "calendar",
        "charge",
    ]
    assert failed_findings(outcome, trip.world) == []
    assert trip.log.get(outcome.txn_id).decision is Decision.ABORT
    # The inventory is back: the same seat commits in the next transaction.
    again = trip.run(trip.plan(seat=_branch(plan, "seat")["args"]["seat"]))
    assert again.state is TxnState.COMMITTED


def test_a_sold_out_hotel_aborts_the_trip_COORD_ABORT(open_trip: OpenTrip) -> None:
    """[COORD-ABORT] the hotel votes no (SOLD_OUT): ABORTED, nothing left anywhere."""
    trip = open_trip(rooms=0)
    outcome = trip.run()
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith("room: voted no: SOLD_OUT:")
    decided = _decided(outcome)
    assert (decided["decision"], decided["reason"]) == ("abort", outcome.reason)
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_an_unknown_operation_aborts_with_plan_invalid_COORD_ABORT(trip: Trip) -> None:
    """[COORD-ABORT] [PLAN-OPERATION] a participant refuses a branch it cannot run:
    ABORTED, PLAN_INVALID (UNKNOWN_OPERATION), recorded as the room's problem."""
    plan = trip.plan()
    _branch(plan, "room")["operation"] = "book_suite"
    outcome = trip.run(plan)
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith("room: PLAN_INVALID:")
    prepared = [
        e["body"]
        for e in outcome.record["events"]
        if e["type"] == "txn.prepared" and e["body"]["branchId"] == "room"
    ]
    assert prepared[0]["receipt"] is None and "PLAN_INVALID" in prepared[0]["problem"]
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_an_unknown_participant_is_refused_before_anything_is_logged_PLAN_PARTICIPANT(
    trip: Trip,
) -> None:
    """[PLAN-PARTICIPANT] a branch names a participant nobody can reach: nothing logged."""
    plan = trip.plan()
    _branch(plan, "room")["participant"] = "mcp://bank.example"
    with pytest.raises(PlanInvalid) as caught:
        trip.run(plan)
    assert caught.value.data["reason"] == "UNKNOWN_PARTICIPANT"
    assert caught.value.data["where"] == "/branches/1/participant"
    assert trip.log.open_transactions() == []
    assert trip.log.list() == []
    assert trip.world.effects(plan["txnId"]) == ALL_NONE


def test_an_understated_cost_is_a_no_vote_COORD_COST(trip: Trip) -> None:
    """[COORD-COST] the plan says 400.00 for a 420.00 seat: the airline votes no, nothing held."""
    plan = trip.plan()
    _branch(plan, "seat")["amount"]["value"] = "400.00"
    charge = _branch(plan, "charge")
    charge["amount"]["value"] = charge["args"]["amount"]["value"] = "710.00"
    outcome = trip.run(plan)
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith("seat: voted no: COST_UNDERSTATED")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert trip.kinds(AIRLINE, outcome.txn_id) == ["held", "released"]


def test_no_answer_by_decide_by_aborts_COORD_DEADLINE_COORD_WITHDRAW(trip: Trip) -> None:
    """[COORD-DEADLINE] the approver never answers: at decideBy the trip aborts, holds released.

    [COORD-PENDING] the gateway's signed pending vote is recorded once;
    [COORD-WITHDRAW] the coordinator withdraws the pending ask and records the
    gateway's signed withdrawn reject, whose routing shows bob was asked.
    """
    plan = trip.plan(decide_in=15 * 60)
    silent = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, never=True)
    outcome = asyncio.run(past_deadline(trip, plan, silent))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == f"the deadline decideBy {plan['deadlines']['decideBy']} passed"
    (pending,) = events(outcome.record, "txn.pending")
    (approval,) = events(outcome.record, "txn.approval")
    withdrawn = approval["body"]["approval"]
    assert (withdrawn["decision"], withdrawn["withdrawn"]) == ("reject", True)
    assert withdrawn["askId"] == pending["body"]["pending"]["askId"]
    assert approval["body"]["problem"].startswith("the group decided reject: withdrawn")
    asked = {h["id"]: h["result"] for h in withdrawn["routing"]["humans"]}
    assert asked[APPROVER] == "asked"
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert trip.kinds(AIRLINE, outcome.txn_id) == ["held", "released"]
    assert failed_findings(outcome, trip.world) == []


def test_an_approval_dated_after_decide_by_does_not_count_COORD_DEADLINE(trip: Trip) -> None:
    """[COORD-DEADLINE] a gateway signs an approval dated 16 minutes in, past a 15-minute
    decideBy: it does not count, ABORTED."""
    plan = trip.plan(decide_in=15 * 60)
    late = format_time(trip.clock.now() + timedelta(minutes=16))
    key = trip.world.keys["gateway"]
    outcome = trip.run(plan, forge=lambda g: ForgeApproval(g, key, decidedAt=late))
    assert outcome.state is TxnState.ABORTED
    (approval,) = events(outcome.record, "txn.approval")
    assert approval["body"]["problem"] == f"decided at {late}, after the deadline"
    assert outcome.reason == f"approval finance: {approval['body']['problem']}"
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_a_hold_whose_lease_ended_before_the_decision_aborts_COORD_LEASE(trip: Trip) -> None:
    """[COORD-LEASE] approval after 25 minutes; the seat's renewals were lost, so it was held
    for 20: ABORTED, seat named."""
    plan = trip.plan(decide_in=40 * 60)
    lost = {AIRLINE: NoRenew(trip.links[AIRLINE])}
    outcome = asyncio.run(
        approve_after(trip, plan, 25 * 60, links=lost, renewals=1, keepers_after=1)
    )
    assert outcome.state is TxnState.ABORTED
    (seat,) = [e for e in events(outcome.record, "txn.prepared") if e["body"]["branchId"] == "seat"]
    lease = seat["body"]["receipt"]["leaseExpiresAt"]
    assert outcome.reason.startswith(f"seat: the hold's lease ended at {lease} before the decision")
    assert "it could not be placed again" in outcome.reason  # [COORD-REPLACE] lost too
    assert [e["body"]["branchId"] for e in events(outcome.record, "txn.renewed")] == ["room"]
    assert events(outcome.record, "txn.approval")[0]["body"]["problem"] is None
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_a_decision_past_the_holds_horizon_aborts_at_approve_by_COORD_APPROVE_BY(
    trip: Trip,
) -> None:
    """[COORD-APPROVE-BY] [COORD-WITHDRAW] decideBy is 40 minutes away but the holds end at
    30: phase 1 ends at the horizon less the commit allowance, the ask is withdrawn."""
    plan = trip.plan(decide_in=40 * 60)
    slow = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_seconds=35 * 60)

    async def drive() -> Outcome:
        task = asyncio.create_task(trip.coordinator(slow).run(plan))
        await trip.votes.wait(plan["txnId"], len(plan["branches"]))
        await sleepers(trip.clock, 6)  # lease keeper, deadline, poll, approver, 2 hold keepers
        trip.clock.advance(RENEW_AT)
        await trip.renewals.wait(plan["txnId"], 2)
        await sleepers(trip.clock, 4, exactly=True)
        trip.clock.advance(30 * 60 - 5 - RENEW_AT)  # to approveBy, not a second later
        return await task

    outcome = asyncio.run(drive())
    assert outcome.state is TxnState.ABORTED
    (deadline,) = events(outcome.record, "txn.deadline")
    (seat,) = [e for e in events(outcome.record, "txn.prepared") if e["body"]["branchId"] == "seat"]
    horizon = seat["body"]["receipt"]["holdHorizon"]
    approve_by = format_time(parse_time(horizon) - timedelta(seconds=5))
    assert deadline["body"]["approveBy"] == approve_by
    assert deadline["body"]["basis"] in {"seat", "room"}
    assert outcome.reason.startswith(f"the approval deadline approveBy {approve_by} passed")
    (approval,) = events(outcome.record, "txn.approval")
    withdrawn = approval["body"]["approval"]
    assert (withdrawn["decision"], withdrawn["withdrawn"]) == ("reject", True)
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_a_hold_that_cannot_be_renewed_shrinks_approve_by_COORD_APPROVE_BY(
    trip: Trip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[COORD-APPROVE-BY] [COORD-RENEW] the seat's lease is its whole 30-minute horizon, so
    it is never renewed; approveBy is 29:55 in, inside a 40-minute decideBy."""
    monkeypatch.setattr(BookSeat, "max_lease_seconds", BookSeat.max_hold_seconds)
    plan = trip.plan(decide_in=40 * 60)
    outcome = asyncio.run(approve_after(trip, plan, 25 * 60, keepers=1, renewals=1))
    assert outcome.state is TxnState.COMMITTED
    (seat,) = [e for e in events(outcome.record, "txn.prepared") if e["body"]["branchId"] == "seat"]
    receipt = seat["body"]["receipt"]
    assert receipt["leaseExpiresAt"] == receipt["holdHorizon"]
    assert [e["body"]["branchId"] for e in events(outcome.record, "txn.renewed")] == ["room"]
    deadlines = [e["body"] for e in events(outcome.record, "txn.deadline")]
    approve_by = format_time(parse_time(receipt["holdHorizon"]) - timedelta(seconds=5))
    assert deadlines[-1]["approveBy"] == approve_by
    assert failed_findings(outcome, trip.world) == []


class _AnswerHeldBack:
    """The gateway stores the ask, but its pending vote never gets back to the coordinator
    (a slow hop): ``stored`` is set once the ask is open at the gateway. Every other
    call goes to the gateway as it is."""

    def __init__(self, inner: Gateway, stored: asyncio.Event) -> None:
        self.inner = inner
        self._stored = stored
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        pending = await self.inner.ask(request)
        self.asked.append(pending["askId"])
        self._stored.set()
        await asyncio.Event().wait()  # never answers; the coordinator stops waiting
        raise AssertionError("unreachable")


class _PrepareAfter(Relay):
    """Prepares only once ``ready`` is set."""

    def __init__(self, inner: Participant, ready: asyncio.Event) -> None:
        super().__init__(inner)
        self._ready = ready

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        await self._ready.wait()
        return await super().prepare(plan, branch_id, fence)


def test_an_ask_stored_before_its_pending_vote_came_back_is_withdrawn_COORD_WITHDRAW(
    open_trip: OpenTrip,
) -> None:
    """[COORD-WITHDRAW] the hotel votes no (SOLD_OUT) after the gateway stored the ask but
    before its pending vote reached the coordinator, which so never learnt the ask's id:
    the trip aborts and the ask is withdrawn all the same, so nobody goes on being asked."""
    trip = open_trip(rooms=0)
    plan = trip.plan()

    held: list[_AnswerHeldBack] = []

    async def go() -> Outcome:
        stored = asyncio.Event()

        def hold_back(gateway: Gateway) -> Any:
            held.append(_AnswerHeldBack(gateway, stored))
            return held[-1]

        coordinator = trip.coordinator(
            ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, never=True),  # nobody answers
            forge=hold_back,
            links={HOTEL: _PrepareAfter(trip.links[HOTEL], stored)},
        )
        return await coordinator.run(plan)

    outcome = asyncio.run(go())
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith("room: voted no: SOLD_OUT:")
    assert events(outcome.record, "txn.pending") == []  # the log never named the ask
    [ask_id] = held[0].asked
    assert not trip.world.asks.get(ask_id).is_open
    assert trip.world.asks.open_for(AskKind.APPROVAL, plan["txnId"]) == []
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []
