"""Compensate-tier commits return an undo token that undoes them once [PART-UNDO]."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock
from hatp.errors import NotPrepared, OutcomeConflict, UndoInvalid
from hatp.evidence import digest, verify
from hatp.model import BranchState
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import AddEvent, Charge, HoldSeat, keyring, plan, run, seen, server, slot


def _committed(airline: ParticipantServer, branch_id: str = "event") -> dict[str, object]:
    p = plan()
    voted = run(airline.prepare(p, branch_id, 1))
    return run(airline.commit("txn-1", branch_id, 1, digest(p.to_wire()), seen(voted)))


def _event_committed(airline: ParticipantServer) -> str:
    p = plan()
    voted = run(airline.prepare(p, "event", 1))
    commit = run(airline.commit("txn-1", "event", 1, digest(p.to_wire()), seen(voted)))
    token = commit["undoToken"]
    assert isinstance(token, str)
    return token


def test_compensate_commit_returns_a_random_undo_token_PART_UNDO(
    airline: ParticipantServer,
) -> None:
    token = _event_committed(airline)
    assert len(token) >= 40


def test_operation_may_choose_its_own_undo_token_PART_UNDO(
    ledgers: Store, clock: ManualClock
) -> None:
    airline = server(ledgers, clock, HoldSeat(), AddEvent(undo_token="cal-undo-17"), Charge())
    assert _event_committed(airline) == "cal-undo-17"


def test_compensate_with_the_token_undoes_once_PART_UNDO(
    airline: ParticipantServer, ledgers: Store
) -> None:
    token = _event_committed(airline)
    assert slot(ledgers) == (2, "Flight to Berlin")
    receipt = run(airline.compensate("txn-1", "event", 1, token))
    verify(receipt, keyring())
    assert (receipt["kind"], receipt["outcome"]) == ("compensate", "compensated")
    assert slot(ledgers) == (3, None)
    assert run(airline.compensate("txn-1", "event", 1, token)) == receipt  # [PART-IDEMPOTENT]
    assert slot(ledgers) == (3, None)
    assert run(airline.status("txn-1", "event")).state is BranchState.COMPENSATED


def test_wrong_undo_token_is_refused_and_undoes_nothing_PART_UNDO(
    airline: ParticipantServer, ledgers: Store
) -> None:
    token = _event_committed(airline)
    with pytest.raises(UndoInvalid):
        run(airline.compensate("txn-1", "event", 1, token + "x"))
    assert slot(ledgers) == (2, "Flight to Berlin")
    run(airline.compensate("txn-1", "event", 1, token))
    with pytest.raises(UndoInvalid):
        run(airline.compensate("txn-1", "event", 1, "guess"))


def test_final_or_hold_commit_cannot_be_compensated_PART_UNDO(
    airline: ParticipantServer,
) -> None:
    receipt = _committed(airline, "seat")
    assert receipt["undoToken"] is None
    with pytest.raises(UndoInvalid) as caught:
        run(airline.compensate("txn-1", "seat", 1, "anything"))
    assert caught.value.data["tier"] == "hold"


def test_compensate_of_a_never_prepared_branch_is_not_prepared_PART_UNDO(
    airline: ParticipantServer,
) -> None:
    with pytest.raises(NotPrepared):
        run(airline.compensate("txn-1", "event", 1, "token"))
    assert run(airline.status("txn-1", "event")).state is BranchState.UNKNOWN


def test_compensate_of_an_uncommitted_branch_is_an_outcome_conflict_PART_UNDO(
    airline: ParticipantServer,
) -> None:
    run(airline.prepare(plan(), "event", 1))
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.compensate("txn-1", "event", 1, "token"))
    assert (caught.value.data["state"], caught.value.data["rule"]) == ("prepared", "PART-UNDO")
    assert len(run(airline.status("txn-1", "event")).flags) == 1


def test_abort_after_compensate_returns_the_compensate_receipt_PART_ORDER(
    airline: ParticipantServer, ledgers: Store
) -> None:
    token = _event_committed(airline)
    compensated = run(airline.compensate("txn-1", "event", 1, token))
    assert run(airline.abort("txn-1", "event", 1)) == compensated
    assert slot(ledgers) == (3, None)
    assert run(airline.status("txn-1", "event")).flags == []
