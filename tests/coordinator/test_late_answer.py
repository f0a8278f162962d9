"""A final step in doubt near the holds' end [COORD-ESCALATE] [COORD-LATE-ANSWER]
[COORD-RECOVERY-OFFER].

The card is captured at once but every answer from payments is lost for 35
minutes. Meanwhile the seat and the room (20-minute leases, 30-minute
horizons) are kept alive, and ``leadSeconds`` before the first horizon a
person is brought in. The answer comes after the horizons: it is recorded
with both holds lapsed, they are released, recovery is offered, and the
transaction ends ``needs-recovery``. Nothing is voided on a guess.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from coordinator.trips import APPROVE, Trip, events, failed_findings, types
from hatp.clock import parse_time
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE, CALENDAR, HOTEL, PAYMENTS
from hatp.demo._airline import BookSeat
from hatp.demo._lossy import LostFor
from hatp.demo._time import simulate
from hatp.model import TxnState
from hatp.participant import Refuse

#: The clock moves this much at a time while the coordinator retries.
STEP = 30.0
TEN_MINUTES = 600


def _late(trip: Trip, plan: dict[str, Any], answer_after: float) -> Outcome:
    """Run ``plan`` with payments' answers to the capture lost for ``answer_after`` seconds,
    moving the clock ``STEP`` seconds at a time while the transaction runs."""
    links = {PAYMENTS: LostFor(trip.links[PAYMENTS], trip.clock, answer_after)}
    coordinator = trip.coordinator(
        APPROVE, links=links, retry_delay=STEP, retry_cap=STEP, max_attempts=10_000
    )

    return asyncio.run(simulate(trip.clock, coordinator.run(plan), STEP))


def _consenting(plan: dict[str, Any], *, lead: int) -> None:
    """Consent to re-authorize off-session up to 800.00 USD; escalate to carol ``lead``
    seconds before the first hold ends."""
    plan["escalation"] = {"address": "human://acme.com/carol", "leadSeconds": lead}
    plan["recovery"] = {
        "offSessionReauth": {
            "consented": True,
            "upTo": {"value": "800.00", "currency": "USD"},
            "mandate": "pm_saved_1",
        }
    }


def _body(outcome: Outcome, kind: str) -> dict[str, Any]:
    (event,) = events(outcome.record, kind)
    return dict(event["body"])


def test_a_final_step_that_answers_after_the_horizon_ends_needing_recovery(
    trip: Trip,
) -> None:
    """[COORD-ESCALATE] [COORD-LATE-ANSWER] [COORD-RECOVERY-OFFER] no consent to re-charge
    off-session: alice (the payer) is brought in 10 minutes before the first horizon; the
    capture's answer comes at 35 minutes; seat and room lapsed and are released."""
    plan = trip.plan(decide_in=15 * 60)
    plan["escalation"] = {"address": None, "leadSeconds": TEN_MINUTES}
    outcome = _late(trip, plan, 35 * 60)
    assert outcome.state is TxnState.NEEDS_RECOVERY, outcome.reason
    kinds = types(outcome.record)
    assert kinds.index("txn.in-doubt") < kinds.index("txn.escalated")
    assert kinds.index("txn.escalated") < kinds.index("txn.late-answer")
    assert "txn.renewed" in kinds[kinds.index("txn.in-doubt") :]  # the holds were kept

    escalated = _body(outcome, "txn.escalated")
    assert escalated["branchId"] == "charge"
    assert escalated["to"] == plan["onBehalfOf"] and escalated["payerPresent"] is True
    due = parse_time(escalated["firstHoldEnds"]) - timedelta(seconds=TEN_MINUTES)
    (event,) = events(outcome.record, "txn.escalated")
    at = parse_time(event["time"])
    assert due <= at <= due + timedelta(seconds=STEP)
    assert escalated["question"]["kind"] == "pending" or escalated["problem"]

    late = _body(outcome, "txn.late-answer")
    assert {h["branchId"]: h["live"] for h in late["holds"]} == {"seat": False, "room": False}
    released = {e["body"]["branchId"] for e in events(outcome.record, "txn.aborted")}
    assert released == {"seat", "room"}
    offer = _body(outcome, "txn.recovery-offered")
    assert offer["lapsed"] == ["seat", "room"] and offer["payerPresent"] is True
    assert [b["branchId"] for b in offer["plan"]["branches"]] == ["seat", "room"]
    assert offer["linkedTxnId"] == f"{outcome.txn_id}.recovery"

    assert trip.world.effects(outcome.txn_id) == {
        AIRLINE: "none",
        HOTEL: "none",
        CALENDAR: "whole",
        PAYMENTS: "whole",
    }
    assert failed_findings(outcome, trip.world) == []


def test_a_card_hold_that_cannot_be_renewed_is_escalated_before_its_fixed_end(
    trip: Trip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[COORD-ESCALATE] the seat's hold is fixed at 30 minutes, like a card authorization's
    capture_before; consent to re-authorize off-session up to 800.00 USD: the escalation
    goes to the escalation address, and the capture's answer at 12 minutes is in time."""
    monkeypatch.setattr(BookSeat, "max_lease_seconds", BookSeat.max_hold_seconds)
    plan = trip.plan(decide_in=5 * 60)
    _consenting(plan, lead=20 * 60)
    outcome = _late(trip, plan, 12 * 60)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    escalated = _body(outcome, "txn.escalated")
    assert escalated["to"] == "human://acme.com/carol" and escalated["payerPresent"] is False
    late = _body(outcome, "txn.late-answer")
    assert all(h["live"] for h in late["holds"])
    renewed = {e["body"]["branchId"] for e in events(outcome.record, "txn.renewed")}
    assert "seat" not in renewed
    assert "txn.recovery-offered" not in types(outcome.record)
    assert failed_findings(outcome, trip.world) == []


def test_an_answer_before_escalation_is_not_late_COORD_IN_DOUBT(trip: Trip) -> None:
    """[COORD-IN-DOUBT] answered after 2 minutes: no person brought in, nothing late."""
    plan = trip.plan(decide_in=5 * 60)
    outcome = _late(trip, plan, 2 * 60)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    kinds = types(outcome.record)
    assert "txn.in-doubt" in kinds
    assert not {"txn.escalated", "txn.late-answer", "txn.recovery-offered"} & set(kinds)


def test_a_recovering_coordinator_does_not_escalate_twice_COORD_RECOVER(trip: Trip) -> None:
    """[COORD-RECOVER] [COORD-ESCALATE] the first coordinator escalates, then gives up
    retrying with the capture still in doubt; a second one takes the transaction over from
    the log, keeps asking without bringing anyone in again, and records the late answer."""
    plan = trip.plan(decide_in=15 * 60)
    plan["escalation"] = {"address": None, "leadSeconds": TEN_MINUTES}
    links = {PAYMENTS: LostFor(trip.links[PAYMENTS], trip.clock, 35 * 60)}
    options = {"links": links, "retry_delay": STEP, "retry_cap": STEP}
    first = trip.coordinator(APPROVE, max_attempts=45, **options)
    stopped = asyncio.run(simulate(trip.clock, first.run(plan), STEP))
    assert stopped.state is TxnState.IN_DOUBT, stopped.reason
    assert "txn.escalated" in types(stopped.record)
    second = trip.coordinator(APPROVE, max_attempts=10_000, **options)
    (outcome,) = asyncio.run(simulate(trip.clock, second.recover(), STEP))
    assert outcome.state is TxnState.NEEDS_RECOVERY, outcome.reason
    kinds = types(outcome.record)
    assert kinds.count("txn.escalated") == 1
    assert kinds.index("txn.taken-over") < kinds.index("txn.late-answer")
    assert failed_findings(outcome, trip.world) == []


def test_a_renewal_declined_for_authentication_brings_the_payer_in_at_once_COORD_ESCALATE(
    trip: Trip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[COORD-ESCALATE] consent to re-authorize off-session, and an escalation address; but
    the seat's renewal is declined AUTHENTICATION_REQUIRED, which is handled like no
    consent: alice, the payer, is brought in at once, well before the lead time."""

    def declined(self: BookSeat, work: Any) -> None:
        raise Refuse("AUTHENTICATION_REQUIRED", "the issuer wants the cardholder present")

    monkeypatch.setattr(BookSeat, "renew", declined)
    plan = trip.plan(decide_in=5 * 60)
    _consenting(plan, lead=TEN_MINUTES)
    outcome = _late(trip, plan, 15 * 60)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    escalated = _body(outcome, "txn.escalated")
    assert escalated["to"] == plan["onBehalfOf"]
    assert (escalated["payerPresent"], escalated["declined"]) == (True, ["seat"])
    (event,) = events(outcome.record, "txn.escalated")
    lead_due = parse_time(escalated["firstHoldEnds"]) - timedelta(seconds=TEN_MINUTES)
    assert parse_time(event["time"]) < lead_due
    renewed = {e["body"]["branchId"] for e in events(outcome.record, "txn.renewed")}
    assert renewed == {"room"}
    assert failed_findings(outcome, trip.world) == []
