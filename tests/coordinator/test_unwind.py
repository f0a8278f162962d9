"""A commit refused after the decision: undo what ran, release the rest, ABORTED."""

from __future__ import annotations

from coordinator.trips import ALL_NONE, Late, Trip, committed_order, events, failed_findings
from hatp.demo import AIRLINE, CALENDAR, HOTEL, PAYMENTS
from hatp.demo.trip import CARD
from hatp.model import Decision, TxnState


def test_a_calendar_edited_while_the_human_decides_unwinds_COORD_UNWIND(trip: Trip) -> None:
    """[COORD-UNWIND] the calendar commit is refused (PRECONDITION_CHANGED): ABORTED."""
    outcome = trip.run(meanwhile=trip.world.edit_calendar)
    assert outcome.state is TxnState.ABORTED
    assert trip.log.get(outcome.txn_id).decision is Decision.COMMIT  # decided, then unwound
    (unwinding,) = events(outcome.record, "txn.unwinding")
    assert unwinding["body"]["branchId"] == "calendar"
    assert unwinding["body"]["error"]["code"] == "PRECONDITION_CHANGED"
    assert committed_order(outcome.record) == []
    assert [e["body"]["branchId"] for e in events(outcome.record, "txn.aborted")] == [
        "room",
        "seat",
        "charge",
        "calendar",
    ]
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert trip.kinds(CALENDAR, outcome.txn_id) == []
    assert trip.kinds(AIRLINE, outcome.txn_id) == ["held", "released"]
    assert trip.kinds(PAYMENTS, outcome.txn_id) == ["authorized", "voided"]
    assert failed_findings(outcome, trip.world) == []


def test_a_card_edited_before_the_capture_compensates_the_calendar_COORD_UNWIND(
    trip: Trip,
) -> None:
    """[COORD-UNWIND] the final step is refused: the calendar event already made is undone."""
    outcome = trip.run(meanwhile=lambda: trip.world.edit_card(CARD, "9000.00"))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith("charge: ")
    assert committed_order(outcome.record) == ["calendar"]
    (unwinding,) = events(outcome.record, "txn.unwinding")
    assert (unwinding["body"]["branchId"], unwinding["body"]["error"]["code"]) == (
        "charge",
        "PRECONDITION_CHANGED",
    )
    (undone,) = events(outcome.record, "txn.compensated")
    assert undone["body"]["branchId"] == "calendar"
    kinds = [e["type"] for e in events(outcome.record)]
    assert kinds.index("txn.unwinding") < kinds.index("txn.compensated")
    assert trip.kinds(CALENDAR, outcome.txn_id) == ["added", "removed"]
    assert trip.kinds(HOTEL, outcome.txn_id) == ["held", "released"]
    assert trip.kinds(PAYMENTS, outcome.txn_id) == ["authorized", "voided"]
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_a_hold_lapsing_before_the_final_step_unwinds_before_it_COORD_LEASE(trip: Trip) -> None:
    """[COORD-LEASE] [COORD-UNWIND] the seat's lease ends after the calendar commit: no capture."""
    late = Late(trip.links[CALENDAR], trip.clock, 21 * 60)
    outcome = trip.run(links={CALENDAR: late})
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith("charge: HOLD_EXPIRED: the hold on seat ended at ")
    (unwinding,) = events(outcome.record, "txn.unwinding")
    assert unwinding["body"]["error"]["code"] == "HOLD_EXPIRED"
    assert committed_order(outcome.record) == ["calendar"]
    assert trip.kinds(PAYMENTS, outcome.txn_id) == ["authorized", "voided"]
    assert trip.kinds(CALENDAR, outcome.txn_id) == ["added", "removed"]
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []
