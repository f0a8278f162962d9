"""Requests out of order are remembered or refused, never flipped [PART-ORDER]."""

from __future__ import annotations

import pytest

from hatp.errors import NotPrepared, OutcomeConflict
from hatp.evidence import digest, verify
from hatp.model import BranchState, OutcomeReceipt
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import branch, charge_count, keyring, plan, run, seat, seen


def test_abort_before_prepare_is_remembered_with_a_null_digest_PART_ORDER(
    airline: ParticipantServer, ledgers: Store
) -> None:
    receipt = run(airline.abort("txn-1", "seat", 2))
    verify(receipt, keyring())
    model = OutcomeReceipt.model_validate(receipt)
    assert (model.kind, model.outcome, model.plan_digest, model.fence) == (
        "abort",
        "aborted",
        None,
        2,
    )
    assert run(airline.abort("txn-1", "seat", 2)) == receipt  # [PART-IDEMPOTENT]
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.prepare(plan(), "seat", 2))
    assert caught.value.data["state"] == "aborted"
    assert caught.value.data["requested"] == "prepare"
    assert seat(ledgers) == ("free", None)
    status = run(airline.status("txn-1", "seat"))
    assert status.state is BranchState.ABORTED and len(status.flags) == 1


def test_commit_after_abort_is_refused_flagged_and_not_flipped_PART_ORDER(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan()
    run(airline.prepare(p, "seat", 1))
    aborted = run(airline.abort("txn-1", "seat", 1))
    assert seat(ledgers) == ("free", None)
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.commit("txn-1", "seat", 1, digest(p.to_wire()), None))
    assert (caught.value.data["state"], caught.value.data["requested"]) == ("aborted", "commit")
    status = run(airline.status("txn-1", "seat"))
    assert status.state is BranchState.ABORTED and status.receipt == aborted
    assert len(status.flags) == 1 and "commit (fence 1) refused" in status.flags[0]
    assert seat(ledgers) == ("free", None)


def test_commit_after_abort_before_prepare_is_refused_PART_ORDER(
    airline: ParticipantServer,
) -> None:
    run(airline.abort("txn-1", "charge", 1))
    with pytest.raises(OutcomeConflict):
        run(airline.commit("txn-1", "charge", 1, digest(plan().to_wire()), None))


def test_abort_after_commit_is_refused_flagged_and_not_flipped_PART_ORDER(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan()
    voted = run(airline.prepare(p, "charge", 1))
    committed = run(airline.commit("txn-1", "charge", 1, digest(p.to_wire()), seen(voted)))
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.abort("txn-1", "charge", 1))
    assert (caught.value.data["state"], caught.value.data["requested"]) == ("committed", "abort")
    status = run(airline.status("txn-1", "charge"))
    assert status.state is BranchState.COMMITTED and status.receipt == committed
    assert len(status.flags) == 1
    assert charge_count(ledgers) == 1


def test_commit_of_a_never_prepared_branch_is_not_prepared_PART_ORDER(
    airline: ParticipantServer, ledgers: Store
) -> None:
    with pytest.raises(NotPrepared) as caught:
        run(airline.commit("txn-1", "charge", 1, digest(plan().to_wire()), None))
    assert caught.value.data["txnId"] == "txn-1"
    assert run(airline.status("txn-1", "charge")).state is BranchState.UNKNOWN
    assert charge_count(ledgers) == 0


def test_commit_after_a_no_vote_is_an_outcome_conflict_PART_ORDER(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan("txn-1", branch("seat", amount=None))
    assert run(airline.prepare(p, "seat", 1))["vote"] == "no"
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.commit("txn-1", "seat", 1, digest(p.to_wire()), None))
    assert caught.value.data["state"] == "refused"
    assert seat(ledgers) == ("free", None)
    aborted = run(airline.abort("txn-1", "seat", 1))
    assert (aborted["outcome"], aborted["planDigest"]) == ("aborted", digest(p.to_wire()))


def test_commit_under_another_plan_digest_is_refused_PART_PLAN(
    airline: ParticipantServer, ledgers: Store
) -> None:
    voted = run(airline.prepare(plan(), "charge", 1))
    other = digest(plan("txn-1", branch("charge")).to_wire())
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.commit("txn-1", "charge", 1, other, seen(voted)))
    assert caught.value.data["rule"] == "PART-PLAN"
    assert charge_count(ledgers) == 0


def test_abort_releases_a_prepared_hold(airline: ParticipantServer, ledgers: Store) -> None:
    p = plan()
    run(airline.prepare(p, "seat", 1))
    receipt = run(airline.abort("txn-1", "seat", 1))
    assert (receipt["kind"], receipt["planDigest"]) == ("abort", digest(p.to_wire()))
    assert seat(ledgers) == ("free", None)
