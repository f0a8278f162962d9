"""The mode phase 1 runs in, chosen by the clock [COORD-MODE], and approval-first [COORD-QUOTE].

The demo's finance approver bob has a 15-minute SLA and escalates to carol,
whose SLA is 15 minutes too: the worst case along the chain is 30 minutes,
exactly the seat's and the room's 30-minute horizons, with no time left to
commit. So ``auto`` chooses approval-first: people approve quoted prices,
and the holds are placed after.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from coordinator.trips import (
    ALL_NONE,
    ALL_WHOLE,
    APPROVER,
    ForgeApproval,
    ScriptedAnswer,
    Trip,
    events,
    failed_findings,
    sleepers,
    types,
)
from hatp.clock import format_time, parse_time
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE
from hatp.demo._airline import BookSeat
from hatp.demo._hotel import HoldRoom
from hatp.evidence import digest, sign
from hatp.model import ApprovalDecision, Plan, TxnState
from hatp.participant import Participant, Relay

#: bob decides at once, without waiting for any prepare (approval-first asks first).
AT_ONCE = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_votes=False)


def _run(trip: Trip, plan: dict[str, Any], answer: ScriptedAnswer, seconds: float = 0.0,
         **options: Any) -> Outcome:  # fmt: skip
    """Run ``plan``; if the answer takes ``seconds``, move the clock on once bob waits."""

    async def drive() -> Outcome:
        task = asyncio.create_task(trip.coordinator(answer, **options).run(plan))
        if seconds:
            # the lease keeper, the deadline, the poll and bob, once quotes and estimates are in
            await sleepers(trip.clock, 4, tries=100_000)
            trip.clock.advance(seconds)
        return await task

    return asyncio.run(drive())


def _mode(outcome: Outcome) -> dict[str, Any]:
    (mode,) = events(outcome.record, "txn.mode")
    return dict(mode["body"])


def test_auto_chooses_approval_first_for_a_chain_of_two_15_minute_slas_COORD_MODE(
    trip: Trip,
) -> None:
    """[COORD-MODE] [COORD-QUOTE] worst case 30 min + 5 s to commit > the 30-minute holds:
    approval-first. bob approves the quoted prices; then the holds are placed; COMMITTED."""
    plan = trip.plan(decide_in=40 * 60, mode="auto")
    outcome = _run(trip, plan, AT_ONCE)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    mode = _mode(outcome)
    assert (mode["requested"], mode["chosen"]) == ("auto", "approval-first")
    assert (mode["worstSeconds"], mode["shortestHoldSeconds"]) == (1800, 1800)
    assert mode["commitSeconds"] == 5
    assert mode["basis"] in {"seat", "room"}
    (estimate,) = mode["estimates"]
    assert [(c["human"], c["sla"]) for c in estimate["chain"]] == [
        ("human://acme.com/bob", 900),
        ("human://acme.com/carol", 900),
    ]
    # The holds are quoted to choose; once approval-first is chosen, every other step is
    # quoted too, so that people approve each step's price and preview.
    branches = [b["branchId"] for b in plan["branches"]]
    assert [q["branchId"] for q in mode["quotes"]] == branches
    # Kept as the participants signed them, never re-serialized from the parsed model:
    # whole seconds stay integers (a float sends the event down canonicalize's slow path).
    held = [q for q in mode["quotes"] if q["leaseSeconds"] is not None]
    assert len(held) == 2
    assert all(type(q["leaseSeconds"]) is int and type(q["holdSeconds"]) is int for q in held)
    kinds = types(outcome.record)
    first_prepare = kinds.index("txn.prepared")
    assert kinds.index("txn.mode") < kinds.index("txn.terms") < kinds.index("txn.pending")
    assert kinds.index("txn.pending") < kinds.index("txn.approval")
    assert kinds.index("txn.approval") < first_prepare
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


def test_a_25_minute_decision_against_a_20_minute_seat_lease_COORD_MODE(trip: Trip) -> None:
    """[COORD-MODE] bob takes 25 minutes; the seat's lease is 20. Approval-first places the
    holds after he approved, so no hold ran out while he decided: COMMITTED, nothing renewed."""
    plan = trip.plan(decide_in=40 * 60, mode="auto")
    slow = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, 25 * 60, after_votes=False)
    outcome = _run(trip, plan, slow, 25 * 60)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert _mode(outcome)["chosen"] == "approval-first"
    assert events(outcome.record, "txn.renewed") == []
    (approval,) = events(outcome.record, "txn.approval")
    for prepared in events(outcome.record, "txn.prepared"):
        assert prepared["body"]["receipt"]["time"] >= approval["body"]["approval"]["decidedAt"]
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


def test_auto_chooses_parallel_when_the_chain_fits_inside_the_holds_COORD_MODE(
    trip: Trip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[COORD-MODE] two-hour horizons: 30 minutes + 5 s fits, so prepare and ask at once."""
    monkeypatch.setattr(BookSeat, "max_hold_seconds", 7200.0)
    monkeypatch.setattr(HoldRoom, "max_hold_seconds", 7200.0)
    plan = trip.plan(decide_in=40 * 60, mode="auto")
    outcome = _run(trip, plan, ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    mode = _mode(outcome)
    assert (mode["chosen"], mode["worstSeconds"], mode["shortestHoldSeconds"]) == (
        "parallel",
        1800,
        7200,
    )
    assert failed_findings(outcome, trip.world) == []


def test_a_plan_with_no_hold_runs_parallel_without_asking_for_numbers_COORD_MODE(
    trip: Trip,
) -> None:
    """[COORD-MODE] auto, but nothing is held: nothing to fit inside, parallel at once."""
    plan = trip.plan(mode="auto")
    plan["branches"] = [b for b in plan["branches"] if b["tier"] != "hold"]
    plan["branches"][-1]["settles"] = []
    outcome = _run(trip, plan, AT_ONCE)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    mode = _mode(outcome)
    assert (mode["chosen"], mode["estimates"], mode["quotes"]) == ("parallel", [], [])
    assert mode["worstSeconds"] is None and mode["shortestHoldSeconds"] is None


def test_an_explicit_mode_is_taken_as_it_is_COORD_MODE(trip: Trip) -> None:
    """[COORD-MODE] parallel asked for: no estimate; approval-first: the quotes, no estimate."""
    parallel = _run(trip, trip.plan(mode="parallel"), ScriptedAnswer(ApprovalDecision.APPROVE,
                                                                     APPROVER))  # fmt: skip
    assert _mode(parallel) | {"commitSeconds": 0} == {
        "planDigest": _mode(parallel)["planDigest"],
        "requested": "parallel",
        "chosen": "parallel",
        "estimates": [],
        "quotes": [],
        "worstSeconds": None,
        "shortestHoldSeconds": None,
        "commitSeconds": 0,
        "basis": None,
    }
    first = _run(trip, trip.plan(mode="approval-first"), AT_ONCE)
    assert first.state is TxnState.COMMITTED, first.reason
    mode = _mode(first)
    assert (mode["chosen"], mode["estimates"], len(mode["quotes"])) == ("approval-first", [], 4)


class Requote(Relay):
    """The airline's quote as it was before a fare change: 20.00 cheaper, re-signed with its
    own key (so the quote is genuine; the prepare later charges the current fare)."""

    def __init__(self, inner: Participant, trip: Trip) -> None:
        super().__init__(inner)
        self._key = trip.world.keys[AIRLINE]

    async def quote(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        quote = await self.inner.quote(plan, branch_id, fence)
        cost = dict(quote["cost"])
        cost["value"] = str(Decimal(cost["value"]) - Decimal("20.00"))
        unsigned = {k: v for k, v in quote.items() if k != "signature"}
        return sign({**unsigned, "cost": cost}, self._key)


def quote_changed(trip: Trip) -> Outcome:
    """Approval-first where the seat's fare went up between the quote and the prepare."""
    links = {AIRLINE: Requote(trip.links[AIRLINE], trip)}
    return _run(trip, trip.plan(mode="approval-first"), AT_ONCE, links=links)


def test_a_hold_that_does_not_match_its_quote_aborts_without_asking_again_COORD_QUOTE(
    trip: Trip,
) -> None:
    """[COORD-QUOTE] bob approved 400.00 for the seat; the airline holds it at 420.00: the
    seat's vote counts as no, ABORTED, and bob was asked once."""
    outcome = quote_changed(trip)
    assert outcome.state is TxnState.ABORTED
    assert "QUOTE_CHANGED" in outcome.reason
    assert len(events(outcome.record, "txn.pending")) == 1
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_approve_by_follows_the_quotes_valid_until_COORD_QUOTE(trip: Trip) -> None:
    """[COORD-QUOTE] approval-first: people must approve while every quote is valid. The
    seat's fare is quoted for 30 minutes, the room's rate for an hour: approveBy is the
    fare's validUntil less the commit allowance, and the gateway's ask carries it."""
    outcome = _run(trip, trip.plan(decide_in=24 * 3600, mode="approval-first"), AT_ONCE)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    quotes = {q["branchId"]: q for q in _mode(outcome)["quotes"]}
    seat_until = parse_time(quotes["seat"]["validUntil"])
    assert parse_time(quotes["room"]["validUntil"]) > seat_until
    (deadline,) = [e["body"] for e in events(outcome.record, "txn.deadline")]
    approve_by = format_time(seat_until - timedelta(seconds=5))
    assert (deadline["approveBy"], deadline["basis"]) == (approve_by, "seat")
    (pending,) = events(outcome.record, "txn.pending")
    assert pending["body"]["pending"]["decideBy"] == approve_by


def test_holds_first_places_the_holds_then_asks_people_to_approve_their_ends_COORD_TERMS(
    trip: Trip,
) -> None:
    """[COORD-TERMS] holds-first: every branch votes first; then the holds' ends and the
    approval deadline inside them (30 minutes less the commit allowance) go to finance with
    the plan; bob's vote and the approval carry the terms' digest; COMMITTED."""
    plan = trip.plan(decide_in=40 * 60, mode="holds-first")
    outcome = _run(trip, plan, ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert _mode(outcome)["chosen"] == "holds-first"
    kinds = types(outcome.record)
    last_prepare = max(i for i, kind in enumerate(kinds) if kind == "txn.prepared")
    assert last_prepare < kinds.index("txn.terms") < kinds.index("txn.pending")
    (terms_event,) = events(outcome.record, "txn.terms")
    terms, terms_digest = terms_event["body"]["terms"], terms_event["body"]["termsDigest"]
    prepared = {
        e["body"]["branchId"]: e["body"]["receipt"] for e in events(outcome.record, "txn.prepared")
    }
    assert [h["branchId"] for h in terms["holds"]] == ["seat", "room"]
    for held in terms["holds"]:
        receipt = prepared[held["branchId"]]
        assert (held["leaseExpiresAt"], held["holdHorizon"]) == (
            receipt["leaseExpiresAt"],
            receipt["holdHorizon"],
        )
    horizon = min(parse_time(h["holdHorizon"]) for h in terms["holds"])
    assert terms["approveBy"] == format_time(horizon - timedelta(seconds=5))
    (approval,) = events(outcome.record, "txn.approval")
    signed = approval["body"]["approval"]
    assert signed["termsDigest"] == terms_digest
    assert all(vote["termsDigest"] == terms_digest for vote in signed["votes"])
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


class OtherTerms(ForgeApproval):
    """The gateway's own key re-signs the approval as if for other terms."""

    def _forge(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("kind") != "approval":
            return answer
        unsigned = {k: v for k, v in answer.items() if k != "signature"}
        return sign({**unsigned, "termsDigest": digest({"other": "terms"})}, self._key)


def test_an_approval_of_other_terms_does_not_count_COORD_TERMS(trip: Trip) -> None:
    """[COORD-TERMS] [COORD-DIGEST] holds-first: an approval naming other terms is a no."""
    key = trip.world.keys["gateway"]
    plan = trip.plan(decide_in=40 * 60, mode="holds-first")
    outcome = trip.run(plan, forge=lambda gateway: OtherTerms(gateway, key))
    assert outcome.state is TxnState.ABORTED
    assert "approval is for terms" in outcome.reason
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
