"""Undo with fresh consent: the journal's plans, approved and run as transactions of their
own [UNDO-PLAN] [UNDO-CHECK] [UNDO-CLAIM] [UNDO-RUN].

The trip commits; the coordinator builds the plan that takes its steps back from what
each commit receipt offered, and runs it like any plan: asked of a person, all or
nothing, with its own record. Nothing is undone without that approval, and no step
is undone twice.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from coordinator.test_effects import charged
from coordinator.trips import APPROVER, REJECT, ScriptedAnswer, Trip, events, failed_findings
from hatp._checks import unsafe_switched_off
from hatp.coordinator._undo import Step
from hatp.coordinator._undo import _problem as undo_problem
from hatp.demo import CALENDAR, COORDINATOR, HOTEL, PARTICIPANT_IDS, PAYMENTS
from hatp.errors import PlanInvalid, TransactionUnknown, UndoRefused
from hatp.evidence import sign, verify
from hatp.model import (
    ApprovalDecision,
    ApprovalGroup,
    Branch,
    OutcomeReceipt,
    Plan,
    Requirement,
    Tier,
    TxnState,
    UndoKind,
    UndoOffer,
    parse_plan,
)

#: The approver answers the undo at once (an undo's branches vote after the ask goes out).
APPROVE_UNDO = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_votes=False)
REJECT_UNDO = ScriptedAnswer(REJECT.decision, APPROVER, after_votes=False)


def _plan_undo(trip: Trip, txn_id: str, **options: Any) -> Plan:
    return asyncio.run(trip.coordinator().plan_undo(txn_id, **options))


def _refusal(trip: Trip, txn_id: str, **options: Any) -> UndoRefused:
    with pytest.raises(UndoRefused) as refused:
        _plan_undo(trip, txn_id, **options)
    return refused.value


def _committed(trip: Trip) -> str:
    outcome = trip.run()
    assert outcome.state is TxnState.COMMITTED
    return outcome.txn_id


def test_the_undo_plan_takes_back_what_can_be_and_shows_the_rest_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] one branch per undoable step, naming the step it undoes, its operation
    from the signed offer, in the reverse of the commit order (the holds, the final step,
    the compensate step); a fee is a cost, and the refund is the charge less the fees of
    the steps it paid for; the reference to the original's head is signed by the
    coordinator; the original's approval groups ask, without its declared amount."""
    txn_id = _committed(trip)
    plan = _plan_undo(trip, txn_id)
    assert [(b.branch_id, b.operation, b.tier.value) for b in plan.branches] == [
        ("room", "cancel_room", "hold"),
        ("seat", "cancel_seat", "hold"),
        ("charge", "refund", "final"),
        ("calendar", "hatp.compensate", "hold"),
    ]
    amounts = {b.branch_id: None if b.amount is None else str(b.amount) for b in plan.branches}
    assert amounts == {
        "room": "155.00 USD",  # the hotel's fee: one night
        "seat": "75.00 USD",  # the airline's fee
        "charge": "500.00 USD",  # 730.00 back, less the two fees
        "calendar": None,
    }
    assert plan.branch("charge").args["refund"] == {"value": "500.00", "currency": "USD"}
    assert plan.totals() == {"USD": Decimal("730.00")}  # what moves: every cent of the trip
    for branch in plan.branches:
        assert branch.undoes is not None
        assert (branch.undoes.txn_id, branch.undoes.branch_id) == (txn_id, branch.branch_id)
    assert plan.branch("calendar").participant == CALENDAR
    ref = plan.undoes
    assert ref is not None and ref.txn_id == txn_id
    assert ref.head == trip.log.get(txn_id).head
    assert verify(ref.to_wire(), trip.world.keyring).issuer == COORDINATOR
    assert ref.kept == []
    assert plan.on_behalf_of == "human://acme.com/alice"
    assert [(g.group_id, g.requirement.amount) for g in plan.approvals] == [("finance", None)]
    assert trip.log.undo_claims(txn_id) == {}  # built, not begun: nothing claimed


def test_steps_left_are_shown_and_their_price_stays_paid_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] asked for the seat and the charge only: the room and the calendar event
    are kept (not asked to undo), and the refund keeps the room's whole price."""
    txn_id = _committed(trip)
    plan = _plan_undo(trip, txn_id, steps=["seat", "charge"])
    assert [b.branch_id for b in plan.branches] == ["seat", "charge"]
    assert plan.branch("charge").args["refund"] == {"value": "345.00", "currency": "USD"}
    assert plan.undoes is not None
    assert [(k.branch_id, k.reason) for k in plan.undoes.kept] == [
        ("room", "not asked to undo"),
        ("calendar", "not asked to undo"),
    ]


def test_a_lapsed_offer_is_kept_or_refused_when_asked_for_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] past the room's undoBy (three days): kept, with why, when every step is
    asked for; refused UNDO_LAPSED when it is named."""
    txn_id = _committed(trip)
    trip.clock.advance(4 * 86400)
    plan = _plan_undo(trip, txn_id)
    assert "room" not in [b.branch_id for b in plan.branches]
    assert plan.undoes is not None
    (kept,) = plan.undoes.kept
    assert kept.branch_id == "room" and kept.reason.startswith("its undo offer lapsed at")
    # Not cancelled, the room keeps its whole price: 730.00 less the seat's fee and the room.
    assert plan.branch("charge").args["refund"] == {"value": "345.00", "currency": "USD"}
    lapsed = _refusal(trip, txn_id, steps=["room", "seat"])
    assert (lapsed.reason, lapsed.data["branchId"]) == ("UNDO_LAPSED", "room")


def test_a_step_without_a_way_back_is_kept_or_refused_UNDO_PLAN() -> None:
    """[UNDO-PLAN] a step whose receipt says not-undoable, or that has no offer (committed
    before offers existed): NOT_UNDOABLE with the participant's reason."""
    branch = Branch(branch_id="gift", participant=CALENDAR, operation="send", tier=Tier.FINAL)
    receipt = {
        "hatpVersion": "0.1",
        "kind": "commit",
        "txnId": "t",
        "branchId": "gift",
        "participant": CALENDAR,
        "planDigest": "sha256:" + "A" * 43,
        "fence": 1,
        "outcome": "committed",
        "undoToken": None,
        "effect": None,
        "observed": None,
        "time": "2026-12-02T09:00:00.000Z",
        "signature": {"alg": "Ed25519", "kid": "k", "sig": "A" * 86},
    }
    none = UndoOffer(kind=UndoKind.NOT_UNDOABLE, reason="sent is sent")
    now = datetime(2026, 12, 2, 9, tzinfo=UTC)
    for offer, why in ((none, "not undoable: sent is sent"), (None, "without an undo offer")):
        step = Step(branch, OutcomeReceipt.model_validate(receipt), offer)
        problem = undo_problem(step, None, now)
        assert problem is not None and problem[0] == "NOT_UNDOABLE" and why in problem[1]


def test_an_approved_undo_runs_as_a_transaction_of_its_own_UNDO_RUN(trip: Trip) -> None:
    """[UNDO-RUN] the undo is asked of a person, commits, and has its own verifiable
    record; the calendar event is gone; the journal says the step is undone."""
    txn_id = _committed(trip)
    plan = _plan_undo(trip, txn_id)
    done = trip.run(plan.to_wire(), APPROVE_UNDO)
    assert done.state is TxnState.COMMITTED, done.reason
    assert trip.world.effects(txn_id) == dict.fromkeys(PARTICIPANT_IDS, "undone")
    assert trip.world.effects(done.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "whole")
    assert failed_findings(done, trip.world) == []
    assert [e["type"] for e in events(done.record, "txn.approval")] == ["txn.approval"]
    assert events(done.record, "txn.planned")[0]["body"]["plan"]["undoes"]["txnId"] == txn_id
    claims = trip.log.undo_claims(txn_id)
    assert {c.undo_txn_id for c in claims.values()} == {plan.txn_id}
    assert set(claims) == {"seat", "room", "calendar", "charge"}
    assert all(c.undone for c in claims.values())
    refused = _refusal(trip, txn_id)
    assert refused.reason == "NOTHING_TO_UNDO"
    assert "already taken back" in refused.message


def test_undo_begins_the_plan_it_builds_UNDO_RUN(trip: Trip) -> None:
    """[UNDO-RUN] ``undo`` builds and begins in one call; the task ends with the outcome."""
    txn_id = _committed(trip)

    async def go() -> Any:
        coordinator = trip.coordinator(APPROVE_UNDO)
        task = await coordinator.undo(txn_id, undo_txn_id="undo-of-trip")
        return await task

    outcome = asyncio.run(go())
    assert (outcome.txn_id, outcome.state) == ("undo-of-trip", TxnState.COMMITTED)


def test_a_rejected_undo_changes_nothing_and_frees_the_steps_UNDO_CLAIM(trip: Trip) -> None:
    """[UNDO-CLAIM] the person says no: the undo aborts, the event stays, and a later
    undo can claim the step again."""
    txn_id = _committed(trip)
    rejected = trip.run(_plan_undo(trip, txn_id).to_wire(), REJECT_UNDO)
    assert rejected.state is TxnState.ABORTED
    assert trip.world.effects(txn_id) == dict.fromkeys(PARTICIPANT_IDS, "whole")
    assert all(c.void for c in trip.log.undo_claims(txn_id).values())
    again = trip.run(_plan_undo(trip, txn_id).to_wire(), APPROVE_UNDO)
    assert again.state is TxnState.COMMITTED


def test_a_step_already_undone_or_being_undone_is_refused_UNDO_CLAIM(trip: Trip) -> None:
    """[UNDO-CLAIM] two plans built for the same step: the first begun claims it, the
    second is refused UNDO_PENDING and nothing of it is logged; after the first commits,
    the same plan is refused ALREADY_UNDONE."""
    txn_id = _committed(trip)
    first, second = _plan_undo(trip, txn_id), _plan_undo(trip, txn_id)

    async def go() -> Any:
        coordinator = trip.coordinator(APPROVE_UNDO)
        task = await coordinator.begin(first)
        with pytest.raises(UndoRefused) as pending:
            await coordinator.begin(second)
        outcome = await task
        with pytest.raises(UndoRefused) as undone:
            await coordinator.begin(second)
        return pending.value, outcome, undone.value

    pending, outcome, undone = asyncio.run(go())
    assert (pending.reason, pending.data["branchId"]) == ("UNDO_PENDING", "calendar")
    assert outcome.state is TxnState.COMMITTED
    assert undone.reason == "ALREADY_UNDONE"
    with pytest.raises(TransactionUnknown):
        trip.log.get(second.txn_id)


def test_a_plan_asking_for_a_step_that_is_not_there_is_refused_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] a step named that the transaction did not commit: UNKNOWN_STEP, naming
    it; nothing written."""
    txn_id = _committed(trip)
    unknown = _refusal(trip, txn_id, steps=["calendar", "hotel-bar"])
    assert (unknown.reason, unknown.data["branchId"]) == ("UNKNOWN_STEP", "hotel-bar")
    only = _plan_undo(trip, txn_id, steps=["calendar"])
    assert [b.branch_id for b in only.branches] == ["calendar"]
    assert trip.log.undo_claims(txn_id) == {}


def test_only_a_committed_transaction_can_be_undone_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] an aborted transaction: NOT_COMMITTED; an unknown one: TXN_UNKNOWN."""
    aborted = trip.run(answer=REJECT)
    assert aborted.state is TxnState.ABORTED
    assert _refusal(trip, aborted.txn_id).reason == "NOT_COMMITTED"
    with pytest.raises(TransactionUnknown):
        _plan_undo(trip, "no-such-trip")


def test_only_steps_that_differ_from_their_preview_when_asked_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] [COORD-EFFECT] ``differing``: the card charged other than previewed is
    offered back alone, only with consent; a trip whose every step matched its preview
    has nothing to offer (NO_DIFFERENCE)."""
    differs = charged(trip, "790.00")
    assert differs.state is TxnState.COMMITTED
    plan = _plan_undo(trip, differs.txn_id, differing=True)
    assert [b.branch_id for b in plan.branches] == ["charge"]
    assert plan.approvals and plan.undoes is not None
    assert {k.branch_id for k in plan.undoes.kept} == {"seat", "room", "calendar"}
    txn_id = _committed(trip)
    assert _refusal(trip, txn_id, differing=True).reason == "NO_DIFFERENCE"


def test_approvals_given_replace_the_originals_and_an_undo_plan_needs_one_UNDO_PLAN(
    trip: Trip,
) -> None:
    """[UNDO-PLAN] an undo is never automatic: approvals given replace the original's; a
    plan with no approval group is not an undo plan (UNDO_SHAPE)."""
    txn_id = _committed(trip)
    ops = ApprovalGroup(
        group_id="ops",
        address="human://acme.com/role/finance-approver",
        requirement=Requirement(action="undo.trip"),
    )
    plan = _plan_undo(trip, txn_id, approvals=[ops])
    assert [g.group_id for g in plan.approvals] == ["ops"]
    wire = plan.to_wire()
    wire["approvals"] = []
    with pytest.raises(PlanInvalid) as refused:
        parse_plan(wire)
    assert refused.value.reason == "UNDO_SHAPE"


def test_an_original_that_needed_no_approval_needs_approvers_named_UNDO_PLAN(
    trip: Trip,
) -> None:
    """[UNDO-PLAN] [UNDO-REFUSE] a trip that committed with no approval group: its undo is
    refused NO_APPROVER until the caller names who approves it; then it is built."""
    unapproved = trip.plan()
    unapproved["approvals"] = []
    outcome = trip.run(unapproved)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert _refusal(trip, outcome.txn_id).reason == "NO_APPROVER"
    ops = ApprovalGroup(
        group_id="ops",
        address="human://acme.com/role/finance-approver",
        requirement=Requirement(action="undo.trip"),
    )
    plan = _plan_undo(trip, outcome.txn_id, approvals=[ops])
    assert [g.group_id for g in plan.approvals] == ["ops"]
    with pytest.raises(ValueError, match="decide_seconds"):
        _plan_undo(trip, outcome.txn_id, approvals=[ops], decide_seconds=0)


def _forged(trip: Trip, plan: Plan, **changes: Any) -> dict[str, Any]:
    """``plan`` with its reference changed and signed again (by ``key``: the coordinator's
    own unless another is given)."""
    key = changes.pop("key", trip.world.keys["coordinator"])
    wire = plan.to_wire()
    ref = {k: v for k, v in wire["undoes"].items() if k != "signature"}
    wire["undoes"] = sign({**ref, **changes}, key)
    return wire


def _begin_refused(trip: Trip, wire: dict[str, Any]) -> UndoRefused:
    with pytest.raises(UndoRefused) as refused:
        trip.run(wire, APPROVE_UNDO)
    with pytest.raises(TransactionUnknown):
        trip.log.get(str(wire["txnId"]))
    return refused.value


def test_an_undo_plan_from_an_older_head_is_refused_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] a reference to another head of the original: ORIGINAL_CHANGED."""
    txn_id = _committed(trip)
    stale = _forged(trip, _plan_undo(trip, txn_id), head="sha256:" + "A" * 43)
    assert _begin_refused(trip, stale).reason == "ORIGINAL_CHANGED"


def test_a_reference_not_signed_by_this_coordinator_is_refused_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] a reference signed by another party's key: REFERENCE_INVALID."""
    txn_id = _committed(trip)
    other = _forged(trip, _plan_undo(trip, txn_id), key=trip.world.keys["gateway"])
    assert _begin_refused(trip, other).reason == "REFERENCE_INVALID"


def test_a_branch_other_than_the_signed_offer_is_refused_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] a branch that undoes the step another way than its offer:
    REFERENCE_INVALID; one that undoes a step the original never committed: UNKNOWN_STEP."""
    txn_id = _committed(trip)
    wire = _plan_undo(trip, txn_id, steps=["calendar"]).to_wire()
    wire["branches"][0]["participant"] = HOTEL
    assert _begin_refused(trip, wire).reason == "REFERENCE_INVALID"
    wire = _plan_undo(trip, txn_id, steps=["calendar"]).to_wire()
    wire["branches"][0]["undoes"]["branchId"] = "spa"
    assert _begin_refused(trip, wire).reason == "UNKNOWN_STEP"


def test_a_refund_other_than_the_offer_gives_is_refused_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] the refund is recomputed from the signed offers for the steps the plan
    takes back: a plan edited to refund the whole charge while the airline and hotel keep
    their fees, or one that drops a step and keeps the refund, is REFERENCE_INVALID."""
    txn_id = _committed(trip)
    wire = _plan_undo(trip, txn_id).to_wire()
    (charge,) = [b for b in wire["branches"] if b["branchId"] == "charge"]
    charge["args"]["refund"] = {"value": "730.00", "currency": "USD"}
    refused = _begin_refused(trip, wire)
    assert (refused.reason, refused.data["branchId"]) == ("REFERENCE_INVALID", "charge")
    wire = _plan_undo(trip, txn_id).to_wire()
    wire["branches"] = [b for b in wire["branches"] if b["branchId"] != "room"]
    assert _begin_refused(trip, wire).reason == "REFERENCE_INVALID"


def test_with_the_head_check_off_a_stale_plan_runs_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] switched off, a plan built from another head is begun: the harm."""
    txn_id = _committed(trip)
    stale = _forged(trip, _plan_undo(trip, txn_id), head="sha256:" + "A" * 43)
    with unsafe_switched_off("UNDO-HEAD"):
        assert trip.run(stale, APPROVE_UNDO).state is TxnState.COMMITTED


def test_with_the_reference_check_off_a_foreign_reference_runs_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] switched off, a reference the gateway signed is taken as the
    coordinator's: the harm."""
    txn_id = _committed(trip)
    other = _forged(trip, _plan_undo(trip, txn_id), key=trip.world.keys["gateway"])
    with unsafe_switched_off("UNDO-REFERENCE"):
        assert trip.run(other, APPROVE_UNDO).state is TxnState.COMMITTED


def test_with_the_offer_check_off_the_whole_charge_is_refunded_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] switched off, an edited refund of the whole 730.00 USD runs while the
    airline and the hotel keep their fees: money paid twice, the harm."""
    txn_id = _committed(trip)
    wire = _plan_undo(trip, txn_id).to_wire()
    (charge,) = [b for b in wire["branches"] if b["branchId"] == "charge"]
    charge["args"]["refund"] = {"value": "730.00", "currency": "USD"}
    charge["amount"] = {"value": "730.00", "currency": "USD"}
    with unsafe_switched_off("UNDO-OFFER"):
        assert trip.run(wire, APPROVE_UNDO).state is TxnState.COMMITTED
    (refund,) = [
        line
        for line in trip.world.ledger(PAYMENTS)
        if line.txn_id == wire["txnId"] and line.kind == "refunded"
    ]
    assert refund.detail.startswith("730.00 USD")  # while 230.00 USD of fees were kept


def test_with_the_offer_check_off_a_mismatched_branch_is_begun_UNDO_CHECK(trip: Trip) -> None:
    """[UNDO-CHECK] switched off, a branch naming another participant than the step's is
    logged and sent (the participant there votes no: the undo aborts)."""
    txn_id = _committed(trip)
    wire = _plan_undo(trip, txn_id, steps=["calendar"]).to_wire()
    wire["branches"][0]["participant"] = HOTEL
    with unsafe_switched_off("UNDO-OFFER"):
        outcome = trip.run(wire, APPROVE_UNDO)
    assert outcome.state is TxnState.ABORTED
    assert trip.log.get(str(wire["txnId"])).state is TxnState.ABORTED


#: The checks these tests switch off, and the tests that show the harm.
SWITCH_OFF_TESTS = {
    "UNDO-HEAD": ("test_with_the_head_check_off_a_stale_plan_runs_UNDO_CHECK",),
    "UNDO-REFERENCE": ("test_with_the_reference_check_off_a_foreign_reference_runs_UNDO_CHECK",),
    "UNDO-OFFER": (
        "test_with_the_offer_check_off_a_mismatched_branch_is_begun_UNDO_CHECK",
        "test_with_the_offer_check_off_the_whole_charge_is_refunded_UNDO_CHECK",
    ),
}
