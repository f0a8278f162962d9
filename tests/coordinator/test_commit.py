"""The whole trip commits: every effect in place, in tier order, the decision durable first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coordinator.trips import (
    ALL_WHOLE,
    Trip,
    approve_after,
    committed_order,
    events,
    failed_findings,
    types,
)
from hatp.demo import AIRLINE, CALENDAR, COORDINATOR, PAYMENTS
from hatp.errors import OutcomeConflict, PlanInvalid
from hatp.evidence import digest
from hatp.model import Decision, Plan, Preconditions, TxnState, parse_plan
from hatp.participant import Relay


def test_all_yes_and_approved_commits_the_whole_trip_COORD_COMMIT(trip: Trip) -> None:
    """[COORD-COMMIT] every branch yes and the group approves: COMMITTED, all of it in place."""
    outcome = trip.run()
    assert outcome.state is TxnState.COMMITTED
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []
    assert outcome.record == trip.log.record(outcome.txn_id)
    row = trip.log.get(outcome.txn_id)
    assert (row.state, row.decision, row.owner) == (TxnState.COMMITTED, Decision.COMMIT, None)
    assert outcome.head == row.head
    assert trip.log.open_transactions() == []


def test_commit_order_is_compensate_final_then_holds_COORD_ORDER(trip: Trip) -> None:
    """[COORD-ORDER] the calendar (compensate), the charge (final), then seat and room (holds)."""
    outcome = trip.run()
    assert committed_order(outcome.record) == ["calendar", "charge", "seat", "room"]
    kinds = [e["type"] for e in events(outcome.record)]
    assert kinds.index("txn.decided") < kinds.index("txn.committed")
    assert kinds[-2:] == ["txn.outcome", "record.sealed"]


class PeekAtPrepare(Relay):
    """Looks at the decision log the moment the first prepare request arrives."""

    def __init__(self, inner: Any, trip: Trip) -> None:
        super().__init__(inner)
        self.trip = trip
        self.seen: list[tuple[TxnState, int, list[str]]] = []

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        row = self.trip.log.get(plan.txn_id)
        self.seen.append(
            (row.state, row.fence, [e["type"] for e in self.trip.log.events(plan.txn_id)])
        )
        return await super().prepare(plan, branch_id, fence)


def test_the_plan_is_logged_before_any_prepare_COORD_BEGIN(trip: Trip) -> None:
    """[COORD-BEGIN] the first prepare finds the plan logged (txn.planned, fence 1)."""
    plan = trip.plan()
    peek = PeekAtPrepare(trip.links[AIRLINE], trip)
    outcome = trip.run(plan, links={AIRLINE: peek})
    assert peek.seen == [(TxnState.ACTIVE, 1, ["txn.planned"])]
    planned = events(outcome.record, "txn.planned")[0]["body"]
    normal = parse_plan(plan).to_wire()
    assert planned == {
        "planDigest": digest(normal),
        "plan": normal,
        "coordinator": COORDINATOR,
        "fence": 1,
    }


def test_a_second_plan_with_a_logged_txn_id_is_refused_COORD_BEGIN(trip: Trip) -> None:
    """[COORD-BEGIN] the same txnId again: OUTCOME_CONFLICT, the first record untouched."""
    plan = trip.plan()
    first = trip.run(plan)
    with pytest.raises(OutcomeConflict):
        trip.run(plan)
    assert trip.log.record(first.txn_id) == first.record
    assert trip.kinds(PAYMENTS, first.txn_id) == ["authorized", "captured"]


def test_an_invalid_plan_is_refused_before_anything_is_logged_COORD_BEGIN(trip: Trip) -> None:
    """[COORD-BEGIN] a plan that breaks a rule raises PLAN_INVALID; nothing logged or held."""
    plan = trip.plan()
    plan["branches"][0]["tier"] = "final"  # a second final step
    coordinator = trip.coordinator()
    with pytest.raises(PlanInvalid):
        asyncio.run(coordinator.run(plan))
    assert trip.log.list() == []
    assert trip.world.ledger(AIRLINE) == []


class Peek(Relay):
    """Looks at the decision log the moment the first commit request arrives."""

    def __init__(self, inner: Any, trip: Trip) -> None:
        super().__init__(inner)
        self.trip = trip
        self.seen: list[tuple[Decision | None, TxnState, list[str]]] = []

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        if not self.seen:
            row = self.trip.log.get(txn_id)
            logged = [e["type"] for e in self.trip.log.events(txn_id)]
            self.seen.append((row.decision, row.state, logged))
        return await super().commit(txn_id, branch_id, fence, plan_digest, preconditions)


def test_the_decision_is_durable_before_any_commit_COORD_DURABLE(trip: Trip) -> None:
    """[COORD-DURABLE] the first commit finds the decision, and every vote it rests on, logged."""
    peek = Peek(trip.links[CALENDAR], trip)
    outcome = trip.run(links={CALENDAR: peek})
    assert outcome.state is TxnState.COMMITTED
    ((decision, state, logged),) = peek.seen
    assert (decision, state) == (Decision.COMMIT, TxnState.COMMITTING)
    assert logged.count("txn.prepared") == 4 and logged.count("txn.approval") == 1
    assert logged[-1] == "txn.decided"
    assert "txn.committed" not in logged


def test_the_final_step_also_finds_the_decision_logged_COORD_DURABLE(trip: Trip) -> None:
    """[COORD-DURABLE] the irreversible capture is sent only under a logged commit decision."""
    peek = Peek(trip.links[PAYMENTS], trip)
    trip.run(links={PAYMENTS: peek})
    ((decision, _, logged),) = peek.seen
    assert decision is Decision.COMMIT and "txn.decided" in logged


def test_holds_are_renewed_while_the_approver_takes_25_minutes_COORD_RENEW(trip: Trip) -> None:
    """[COORD-RENEW] [COORD-LEASE] 20-minute leases, a 30-minute horizon, an approval after
    25 minutes: each hold is renewed once at half its lease, and the trip COMMITS."""
    plan = trip.plan(decide_in=40 * 60)
    outcome = asyncio.run(approve_after(trip, plan, 25 * 60))
    assert outcome.state is TxnState.COMMITTED
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    renewed = {
        e["body"]["branchId"]: e["body"]["receipt"] for e in events(outcome.record, "txn.renewed")
    }
    assert set(renewed) == {"seat", "room"}
    for receipt in renewed.values():
        assert receipt["kind"] == "renew"
        assert receipt["leaseExpiresAt"] == receipt["holdHorizon"]
    kinds = types(outcome.record)
    assert kinds.index("txn.renewed") < kinds.index("txn.approval") < kinds.index("txn.decided")
    assert failed_findings(outcome, trip.world) == []
