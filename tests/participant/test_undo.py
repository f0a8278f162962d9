"""Taking a committed step back at the participant: the offer a commit signs, and the undo
branch that uses it once [PART-UNDO-OFFER] [PART-UNDO-ONCE].

An undo plan's branch names the step it takes back; the SDK checks that step in the
participant's own store (committed here, offered exactly this undo, not lapsed, not
taken back by another undo), claims it in the prepare's transaction, marks it
compensated when the undo commits, and frees it when the undo ends otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import OutcomeConflict, PlanInvalid
from hatp.evidence import digest, verify
from hatp.model import COMPENSATION, Amount, BranchState, Plan, parse_plan
from hatp.participant import (
    Committed,
    NotUndoable,
    Operation,
    ParticipantServer,
    Prepared,
    Quoted,
    Refuse,
    Undo,
    Work,
)
from hatp.store import Store
from participant.ops import (
    AIRLINE,
    AddEvent,
    Charge,
    HoldSeat,
    branch,
    keyring,
    plan,
    run,
    seat,
    seats,
    seen,
    server,
    slot,
)

FEE = Amount(value="75.00", currency="USD")
#: A week, on the test clock.
UNDO_SECONDS = 7 * 24 * 3600.0


class BookSeat(HoldSeat):
    """The seat hold, taken back by ``free_seat`` for a fee, within a week."""

    inverse = "free_seat"

    def undo_terms(self, work: Work, committed: Committed) -> Undo:
        return Undo(fee=FEE, undo_seconds=UNDO_SECONDS, args={"seat": work.branch.args["seat"]})


class FreeSeat(Operation):
    """Hold tier: prepare marks the ticketed seat as being cancelled, commit frees it."""

    name = "free_seat"
    tier = BookSeat.tier
    #: What prepare charges (the offer signed 75.00 USD): more is FEE_ABOVE_OFFER.
    charge = FEE

    def prepare(self, work: Work) -> Prepared:
        assert work.undoing is not None
        ticketed = str(work.undoing.effect["ticketed"])
        row = work.conn.execute(sa.select(seats).where(seats.c.seat == ticketed)).one()
        if row.status != "ticketed":
            raise Refuse("ORIGINAL_CHANGED", f"seat {ticketed} is {row.status} now")
        work.conn.execute(
            seats.update().where(seats.c.seat == ticketed).values(status="cancelling")
        )
        return Prepared(cost=self.charge, data={"seat": ticketed})

    def quote(self, work: Work) -> Quoted:
        assert work.undoing is not None
        return Quoted(cost=work.undoing.offer.fee)

    def commit(self, work: Work) -> Committed:
        assert work.prepared is not None
        freed = work.prepared.data["seat"]
        work.conn.execute(
            seats.update().where(seats.c.seat == freed).values(status="free", holder=None)
        )
        return Committed(effect={"freed": freed})

    def abort(self, work: Work) -> None:
        assert work.prepared is not None
        work.conn.execute(
            seats.update()
            .where(seats.c.seat == work.prepared.data["seat"])
            .values(status="ticketed")
        )


class FinalCharge(Charge):
    """The card charge, which says why it cannot be taken back."""

    def undo_terms(self, work: Work, committed: Committed) -> NotUndoable:
        return NotUndoable("the card network settles captures at once")


def _airline(store: Store, clock: ManualClock) -> ParticipantServer:
    return server(store, clock, BookSeat(), FreeSeat(), AddEvent(), FinalCharge())


@pytest.fixture
def airline(ledgers: Store, clock: ManualClock) -> ParticipantServer:
    return _airline(ledgers, clock)


def _commit(airline: ParticipantServer, branch_id: str, txn_id: str = "txn-1") -> dict[str, Any]:
    p = plan(txn_id, branch(branch_id))
    voted = run(airline.prepare(p, branch_id, 1))
    assert voted["vote"] == "yes", voted
    return run(airline.commit(txn_id, branch_id, 1, digest(p.to_wire()), seen(voted)))


def _undo_plan(
    undo_txn_id: str,
    step: str,
    *,
    operation: str = "free_seat",
    tier: str = "hold",
    amount: dict[str, str] | None = None,
    original: str = "txn-1",
) -> Plan:
    """An undo plan of one branch taking back ``step`` of ``original``. The participant
    checks the step in its own store, not the coordinator's reference (the coordinator
    does that), so the reference's signature here is only well formed."""
    return parse_plan(
        {
            "hatpVersion": "0.1",
            "txnId": undo_txn_id,
            "initiator": "agent://acme.com/travel-bot",
            "onBehalfOf": "human://acme.com/alice",
            "branches": [
                {
                    "branchId": step,
                    "participant": AIRLINE,
                    "operation": operation,
                    "tier": tier,
                    "amount": FEE.to_wire() if amount is None else amount,
                    "undoes": {"txnId": original, "branchId": step},
                }
            ],
            "approvals": [
                {
                    "groupId": "finance",
                    "address": "human://acme.com/role/finance-approver",
                    "requirement": {"action": "approve.spend"},
                }
            ],
            "deadlines": {"decideBy": "2026-12-02T10:00:00.000Z"},
            "undoes": {
                "hatpVersion": "0.1",
                "kind": "undo-reference",
                "txnId": original,
                "head": "sha256:" + "A" * 43,
                "coordinator": "hatp://acme.com/coordinator",
                "kept": [],
                "time": "2026-12-02T09:00:00.000Z",
                "signature": {"alg": "Ed25519", "kid": "k", "sig": "A" * 86},
            },
        }
    )


def _undo(
    airline: ParticipantServer, undo_plan: Plan, step: str = "seat"
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Prepare the undo branch; commit it if it voted yes. Returns both receipts."""
    voted = run(airline.prepare(undo_plan, step, 1))
    if voted["vote"] != "yes":
        return voted, None
    done = run(airline.commit(undo_plan.txn_id, step, 1, digest(undo_plan.to_wire()), seen(voted)))
    return voted, done


def _reason(receipt: dict[str, Any]) -> str:
    return str(receipt["reason"]).split(":")[0]


# --- the offer a commit signs ---------------------------------------------------------------


def test_a_commit_signs_how_it_can_be_taken_back_PART_UNDO_OFFER(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    """[PART-UNDO-OFFER] a hold with an inverse offers it with its fee and end; a compensate
    step offers its compensation; a final step without a refund says why not; all signed."""
    held = _commit(airline, "seat")
    verify(held, keyring())
    assert held["undo"] == {
        "kind": "inverse",
        "operation": "free_seat",
        "tier": "hold",
        "args": {"seat": "12A"},
        "fee": FEE.to_wire(),
        "refund": None,
        "undoBy": "2026-12-09T09:00:00.000Z",
        "reason": None,
    }
    event = _commit(airline, "event", "txn-2")
    assert (event["undo"]["kind"], event["undo"]["operation"], event["undo"]["tier"]) == (
        "compensate",
        COMPENSATION,
        "hold",
    )
    charge = _commit(airline, "charge", "txn-3")
    assert charge["undo"]["kind"] == "not-undoable"
    assert charge["undo"]["reason"] == "the card network settles captures at once"
    assert charge["undo"]["operation"] is None


def test_only_commit_receipts_carry_an_offer_PART_UNDO_OFFER(airline: ParticipantServer) -> None:
    """[PART-UNDO-OFFER] a prepare or abort receipt has no ``undo`` member at all."""
    voted = run(airline.prepare(plan("txn-1", branch("seat")), "seat", 1))
    aborted = run(airline.abort("txn-1", "seat", 1))
    assert "undo" not in voted and "undo" not in aborted


def test_a_server_refuses_a_reserved_name_or_a_missing_inverse_PART_UNDO_OFFER(
    ledgers: Store, clock: ManualClock
) -> None:
    """[PART-UNDO-OFFER] ``hatp.compensate`` is reserved; an inverse must be offered too."""

    class Squatter(FreeSeat):
        name = COMPENSATION

    with pytest.raises(ValueError, match="reserved"):
        server(ledgers, clock, Squatter())
    with pytest.raises(ValueError, match="free_seat"):
        server(ledgers, clock, BookSeat())


# --- the undo branch ------------------------------------------------------------------------


def test_an_undo_branch_takes_the_step_back_once_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    """[PART-UNDO-ONCE] the undo frees the ticketed seat and marks the step compensated; a
    repeat commit returns the same receipt; a second undo votes no ALREADY_UNDONE."""
    _commit(airline, "seat")
    assert seat(ledgers) == ("ticketed", "txn-1/seat")
    first = _undo_plan("undo-1", "seat")
    voted, done = _undo(airline, first)
    assert voted["vote"] == "yes" and voted["cost"] == FEE.to_wire()
    assert done is not None and done["outcome"] == "committed"
    assert seat(ledgers) == ("free", None)
    assert run(airline.status("txn-1", "seat")).state is BranchState.COMPENSATED
    again = run(airline.commit("undo-1", "seat", 1, digest(first.to_wire()), None))
    assert again == done
    second, _ = _undo(airline, _undo_plan("undo-2", "seat"))
    assert (second["vote"], _reason(second)) == ("no", "ALREADY_UNDONE")


def test_a_step_being_taken_back_is_not_claimed_twice_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    """[PART-UNDO-ONCE] while one undo holds the step, another votes no UNDO_PENDING; once
    the first aborts (the seat ticketed again), a later undo can claim it."""
    _commit(airline, "seat")
    assert run(airline.prepare(_undo_plan("undo-1", "seat"), "seat", 1))["vote"] == "yes"
    assert seat(ledgers)[0] == "cancelling"
    pending, _ = _undo(airline, _undo_plan("undo-2", "seat"))
    assert (pending["vote"], _reason(pending)) == ("no", "UNDO_PENDING")
    run(airline.abort("undo-1", "seat", 1))
    assert seat(ledgers)[0] == "ticketed"
    voted, done = _undo(airline, _undo_plan("undo-3", "seat"))
    assert voted["vote"] == "yes" and done is not None
    assert seat(ledgers) == ("free", None)


def test_an_undo_whose_hold_lapses_frees_the_claim_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store, clock: ManualClock
) -> None:
    """[PART-UNDO-ONCE] the undo branch is a hold: swept at its lease's end, its claim goes
    with it and the seat is ticketed again."""
    _commit(airline, "seat")
    run(airline.prepare(_undo_plan("undo-1", "seat"), "seat", 1))
    clock.advance(1300)
    assert run(airline.sweep()) == [("undo-1", "seat")]
    assert seat(ledgers)[0] == "ticketed"
    voted, _ = _undo(airline, _undo_plan("undo-2", "seat"))
    assert voted["vote"] == "yes"


@pytest.mark.parametrize(
    ("setup", "undo_plan", "reason"),
    [
        ("prepared", _undo_plan("undo-1", "seat"), "NOT_COMMITTED"),
        ("nothing", _undo_plan("undo-1", "seat"), "NOT_COMMITTED"),
        ("committed", _undo_plan("undo-1", "seat", operation=COMPENSATION), "UNDO_MISMATCH"),
        (
            "charged",
            _undo_plan("undo-1", "charge", operation="free_seat", amount=FEE.to_wire()),
            "NOT_UNDOABLE",
        ),
    ],
)
def test_an_undo_of_a_step_that_cannot_be_taken_back_votes_no_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store, setup: str, undo_plan: Plan, reason: str
) -> None:
    """[PART-UNDO-ONCE] not committed here, another way back than the signed offer, or not
    undoable: the undo votes no with the reason, claims nothing and changes nothing."""
    if setup == "prepared":
        run(airline.prepare(plan("txn-1", branch("seat")), "seat", 1))
    elif setup == "committed":
        _commit(airline, "seat")
    elif setup == "charged":
        _commit(airline, "charge")
    before = seat(ledgers)
    step = undo_plan.branches[0].branch_id
    voted = run(airline.prepare(undo_plan, step, 1))
    assert (voted["vote"], _reason(voted)) == ("no", reason)
    assert seat(ledgers) == before
    original = run(airline.status("txn-1", step))
    expected = {
        "prepared": BranchState.PREPARED,
        "nothing": BranchState.UNKNOWN,
        "committed": BranchState.COMMITTED,
        "charged": BranchState.COMMITTED,
    }[setup]
    assert original.state is expected  # an unknown step gets no row from the check


def test_an_undo_after_its_offer_lapsed_votes_no_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store, clock: ManualClock
) -> None:
    """[PART-UNDO-ONCE] past the offer's ``undoBy`` the step is no longer taken back."""
    _commit(airline, "seat")
    clock.advance(UNDO_SECONDS + 1)
    voted, _ = _undo(airline, _undo_plan("undo-1", "seat"))
    assert (voted["vote"], _reason(voted)) == ("no", "UNDO_LAPSED")
    assert seat(ledgers) == ("ticketed", "txn-1/seat")


def test_the_undo_operation_sees_a_later_change_and_votes_no_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    """[PART-UNDO-ONCE] a later change on the same resource: the inverse refuses, nothing
    is claimed, and the refusal's writes are rolled back."""
    _commit(airline, "seat")
    with ledgers.transaction() as conn:
        conn.execute(seats.update().where(seats.c.seat == "12A").values(status="rebooked"))
    voted, _ = _undo(airline, _undo_plan("undo-1", "seat"))
    assert (voted["vote"], _reason(voted)) == ("no", "ORIGINAL_CHANGED")
    assert seat(ledgers)[0] == "rebooked"
    assert run(airline.status("txn-1", "seat")).state is BranchState.COMMITTED


def test_an_undo_charging_more_than_its_offer_votes_no_PART_UNDO_OFFER(
    ledgers: Store, clock: ManualClock
) -> None:
    """[PART-UNDO-OFFER] the fee signed at commit is a promise: an inverse charging more
    votes no FEE_ABOVE_OFFER (the branch's amount covers it), and releases what it placed."""
    greedy = FreeSeat()
    greedy.charge = Amount(value="90.00", currency="USD")
    airline = server(ledgers, clock, BookSeat(), greedy, AddEvent(), FinalCharge())
    _commit(airline, "seat")
    high = {"value": "100.00", "currency": "USD"}
    voted, _ = _undo(airline, _undo_plan("undo-1", "seat", amount=high))
    assert (voted["vote"], _reason(voted)) == ("no", "FEE_ABOVE_OFFER")
    assert seat(ledgers) == ("ticketed", "txn-1/seat")


def test_with_the_fee_check_off_the_higher_fee_is_charged_PART_UNDO_OFFER(
    ledgers: Store, clock: ManualClock
) -> None:
    """[PART-UNDO-OFFER] switched off, the participant takes the step back at 90.00 where it
    promised 75.00: the harm the check prevents."""
    greedy = FreeSeat()
    greedy.charge = Amount(value="90.00", currency="USD")
    airline = server(ledgers, clock, BookSeat(), greedy, AddEvent(), FinalCharge())
    _commit(airline, "seat")
    high = {"value": "100.00", "currency": "USD"}
    with unsafe_switched_off("PART-UNDO-OFFER"):
        voted, done = _undo(airline, _undo_plan("undo-1", "seat", amount=high))
    assert voted["vote"] == "yes" and voted["cost"]["value"] == "90.00"
    assert done is not None and seat(ledgers) == ("free", None)


def test_with_the_once_check_off_a_step_is_taken_back_twice_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    """[PART-UNDO-ONCE] switched off, a second undo of the same step runs: the harm."""
    _commit(airline, "event")
    undo_event = _undo_plan(
        "undo-1", "event", operation=COMPENSATION, amount={"value": "0", "currency": "USD"}
    )
    _undo(airline, undo_event, "event")
    assert slot(ledgers) == (3, None)
    again = _undo_plan(
        "undo-2", "event", operation=COMPENSATION, amount={"value": "0", "currency": "USD"}
    )
    with unsafe_switched_off("PART-UNDO-ONCE"):
        voted, done = _undo(airline, again, "event")
    assert voted["vote"] == "yes" and done is not None
    assert slot(ledgers) == (4, None)  # compensated a second time


def test_a_compensate_step_is_taken_back_with_its_token_PART_UNDO_ONCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    """[PART-UNDO-ONCE] ``hatp.compensate`` runs the step's own compensate with its token;
    the token can then not compensate it again (refused and flagged)."""
    committed = _commit(airline, "event")
    assert slot(ledgers) == (2, "Flight to Berlin")
    undo_event = _undo_plan(
        "undo-1", "event", operation=COMPENSATION, amount={"value": "0", "currency": "USD"}
    )
    voted, done = _undo(airline, undo_event, "event")
    assert voted["vote"] == "yes" and done is not None
    assert done["effect"]["compensated"] == {"txnId": "txn-1", "branchId": "event"}
    assert done["undo"]["kind"] == "not-undoable"
    assert slot(ledgers) == (3, None)
    with pytest.raises(OutcomeConflict):
        run(airline.compensate("txn-1", "event", 1, committed["undoToken"]))
    assert slot(ledgers) == (3, None)


def test_undo_operations_run_only_in_undo_plans_PART_PLAN(airline: ParticipantServer) -> None:
    """[PART-PLAN] an inverse, or ``hatp.compensate``, in an ordinary plan: UNDO_ONLY."""
    for operation, tier in (("free_seat", "hold"), (COMPENSATION, "hold")):
        ordinary = plan("txn-9", branch("seat", operation=operation, tier=tier))
        with pytest.raises(PlanInvalid) as refused:
            run(airline.prepare(ordinary, "seat", 1))
        assert refused.value.reason == "UNDO_ONLY"


def test_a_quote_of_an_undo_branch_says_the_offered_fee_PART_QUOTE(
    airline: ParticipantServer,
) -> None:
    """[PART-QUOTE] the inverse's quote sees the step it would take back; a step that cannot
    be taken back quotes nothing (its prepare will vote no)."""
    _commit(airline, "seat")
    quoted = run(airline.quote(_undo_plan("undo-1", "seat"), "seat", 1))
    assert quoted["cost"] == FEE.to_wire()
    _undo(airline, _undo_plan("undo-2", "seat"))
    assert run(airline.quote(_undo_plan("undo-3", "seat"), "seat", 1))["cost"] is None


#: The checks these tests switch off, and the tests that show the harm.
SWITCH_OFF_TESTS = {
    "PART-UNDO-ONCE": ("test_with_the_once_check_off_a_step_is_taken_back_twice_PART_UNDO_ONCE",),
    "PART-UNDO-OFFER": ("test_with_the_fee_check_off_the_higher_fee_is_charged_PART_UNDO_OFFER",),
}
