"""Prepare: plan checks [PART-PLAN], signed votes [PART-SIGNED], reported costs [PART-COST],
and refusals that leave nothing behind."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock
from hatp.errors import OutcomeConflict, PlanInvalid, SignatureInvalid
from hatp.evidence import digest, verify
from hatp.model import BranchState, PrepareReceipt
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import AIRLINE, branch, keyring, plan, run, seat


def test_yes_vote_is_signed_and_names_plan_txn_branch_fence_PART_SIGNED(
    airline: ParticipantServer,
) -> None:
    p = plan()
    receipt = run(airline.prepare(p, "seat", 3))
    signer = verify(receipt, keyring())
    model = PrepareReceipt.model_validate(receipt)
    assert signer.issuer == AIRLINE
    assert (model.plan_digest, model.txn_id, model.branch_id) == (
        digest(p.to_wire()),
        "txn-1",
        "seat",
    )
    assert (model.fence, model.participant, model.vote, model.tier) == (3, AIRLINE, "yes", "hold")
    assert model.cost is not None and str(model.cost) == "420.00 USD"
    with pytest.raises(SignatureInvalid):
        verify({**receipt, "fence": 4}, keyring())


def test_prepare_places_the_hold_in_the_same_transaction_PART_DURABLE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    assert seat(ledgers) == ("held", "txn-1/seat")
    assert run(airline.status("txn-1", "seat")).state is BranchState.PREPARED


def test_repeated_prepare_returns_the_same_receipt_and_holds_once_PART_IDEMPOTENT(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    first = run(airline.prepare(plan(), "seat", 1))
    clock.advance(5)
    assert run(airline.prepare(plan(), "seat", 1)) == first
    assert seat(ledgers) == ("held", "txn-1/seat")


def test_branch_not_in_plan_is_plan_invalid_shape_PART_PLAN(airline: ParticipantServer) -> None:
    with pytest.raises(PlanInvalid) as caught:
        run(airline.prepare(plan(), "hotel", 1))
    assert caught.value.reason == "SHAPE"
    assert caught.value.data["branchId"] == "hotel"
    assert run(airline.status("txn-1", "hotel")).state is BranchState.UNKNOWN


def test_branch_for_another_participant_is_unknown_participant_PART_PLAN(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan("txn-1", branch("seat", participant="mcp://hotel.example"))
    with pytest.raises(PlanInvalid) as caught:
        run(airline.prepare(p, "seat", 1))
    assert caught.value.reason == "UNKNOWN_PARTICIPANT"
    assert caught.value.data["where"] == "/branches/0/participant"
    assert seat(ledgers) == ("free", None)


def test_unknown_operation_is_refused_PART_PLAN(airline: ParticipantServer) -> None:
    p = plan("txn-1", branch("seat", operation="upgrade_seat"))
    with pytest.raises(PlanInvalid) as caught:
        run(airline.prepare(p, "seat", 1))
    assert caught.value.reason == "UNKNOWN_OPERATION"
    assert caught.value.data["operation"] == "upgrade_seat"


def test_tier_other_than_the_operations_is_tier_mismatch_PART_PLAN(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan("txn-1", branch("seat", tier="compensate"))
    with pytest.raises(PlanInvalid) as caught:
        run(airline.prepare(p, "seat", 1))
    assert caught.value.reason == "TIER_MISMATCH"
    assert caught.value.data["declared"] == "hold"
    assert seat(ledgers) == ("free", None)


def test_prepare_under_another_plan_digest_is_refused_and_flagged_PART_PLAN(
    airline: ParticipantServer, ledgers: Store
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    changed = plan("txn-1", branch("seat", args={"seat": "12B"}, amount=None))
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.prepare(changed, "seat", 1))
    assert caught.value.data["rule"] == "PART-PLAN"
    status = run(airline.status("txn-1", "seat"))
    assert len(status.flags) == 1 and "prepare" in status.flags[0]
    assert seat(ledgers, "12B") == ("free", None)


@pytest.mark.parametrize(
    ("amount", "why"),
    [
        ({"value": "400.00", "currency": "USD"}, "only 400.00 USD"),
        ({"value": "420.00", "currency": "EUR"}, "currencies differ"),
        (None, "declares no amount"),
    ],
)
def test_understated_cost_votes_no_and_releases_the_hold_PART_COST(
    airline: ParticipantServer, ledgers: Store, amount: dict[str, str] | None, why: str
) -> None:
    receipt = run(airline.prepare(plan("txn-1", branch("seat", amount=amount)), "seat", 1))
    verify(receipt, keyring())
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("COST_UNDERSTATED: ") and why in receipt["reason"]
    assert receipt["cost"] == {"value": "420.00", "currency": "USD"}
    assert receipt["leaseExpiresAt"] is None
    assert seat(ledgers) == ("free", None)
    assert run(airline.status("txn-1", "seat")).state is BranchState.REFUSED


def test_cost_within_the_amount_votes_yes_PART_COST(airline: ParticipantServer) -> None:
    amount = {"value": "500.00", "currency": "USD"}
    receipt = run(airline.prepare(plan("txn-1", branch("seat", amount=amount)), "seat", 1))
    assert receipt["vote"] == "yes"


def test_refuse_votes_no_and_rolls_back_what_prepare_wrote(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan("txn-1", branch("seat", args={"seat": "12A", "refuse_after_write": True}))
    receipt = run(airline.prepare(p, "seat", 1))
    assert (receipt["vote"], receipt["reason"]) == ("no", "CHANGED_MIND: wrote, then voted no")
    assert seat(ledgers) == ("free", None)


def test_sold_out_seat_votes_no(airline: ParticipantServer) -> None:
    run(airline.prepare(plan("txn-1"), "seat", 1))
    receipt = run(airline.prepare(plan("txn-2"), "seat", 1))
    assert receipt["vote"] == "no" and receipt["reason"].startswith("SOLD_OUT: ")


def test_dry_run_receipt_carries_the_preconditions_it_saw_PART_PRECONDITION(
    airline: ParticipantServer,
) -> None:
    receipt = run(airline.prepare(plan(), "event", 1))
    assert receipt["preconditions"] == {
        "versions": {"calendar/mon-9": "1"},
        "scope": "calendar.write",
    }
    assert receipt["leaseExpiresAt"] is None and receipt["holdHorizon"] is None
