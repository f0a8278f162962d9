"""The trip's participants take their commits back, in an undo transaction of its own.

The airline cancels the seat for a fee by fare class, the hotel cancels the
booking for one night's rate, the calendar's event is removed with its undo
token, and payments refunds the charge less those fees. The coordinator builds
the undo plan from each commit receipt's signed offer; a person approves it; it
commits all or nothing. Each participant's ledger then judges the trip
``undone`` and the undo ``whole``, or, when the undo did not commit, the trip
``whole`` and the undo ``none``.

The decision log runs on the parametrized store; the participants keep their
stores on SQLite files in the test's folder, or in the log's PostgreSQL schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from coordinator.trips import APPROVER, REJECT, ScriptedAnswer, Trip, events, failed_findings
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock, format_time
from hatp.demo import (
    AIRLINE,
    CALENDAR,
    HOTEL,
    PARTICIPANT_IDS,
    PAYMENTS,
    TripWorld,
    _airline,
    _calendar,
    _hotel,
)
from hatp.demo._payments import balance
from hatp.demo.trip import CARD
from hatp.errors import UndoRefused
from hatp.model import ApprovalDecision, OutcomeReceipt, Plan, TxnState, parse_plan
from hatp.store import DecisionLog, Store

#: The approver answers the undo at once (an undo's branches vote after the ask goes out).
APPROVE_UNDO = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_votes=False)
REJECT_UNDO = ScriptedAnswer(REJECT.decision, APPROVER, after_votes=False)
ALL_WHOLE = dict.fromkeys(PARTICIPANT_IDS, "whole")
ALL_NONE = dict.fromkeys(PARTICIPANT_IDS, "none")
ALL_UNDONE = dict.fromkeys(PARTICIPANT_IDS, "undone")
#: What the corporate card has before any trip, and what one trip charges.
LIMIT, TRIP = Decimal("5000.00"), Decimal("730.00")
SEAT_FEE, ROOM_FEE = Decimal("75.00"), Decimal("155.00")
ROOMS = 30


@pytest.fixture
def trip(tmp_path: Path, clock: ManualClock, store_url: str, store: Store) -> Iterator[Trip]:
    """The trip world with rooms to spare, the log on the parametrized store."""
    urls = None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)
    world = TripWorld.open(tmp_path / "trip", clock, rooms=ROOMS, store_urls=urls)
    try:
        yield Trip(world, DecisionLog(store), clock)
    finally:
        world.close()


def _committed(trip: Trip, **plan: Any) -> tuple[str, str]:
    """Commit a fresh trip; return its txn id and seat."""
    wire = trip.plan(**plan)
    outcome = trip.run(wire)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    return outcome.txn_id, str(wire["branches"][0]["args"]["seat"])


def _plan_undo(trip: Trip, txn_id: str, **options: Any) -> Plan:
    return asyncio.run(trip.coordinator().plan_undo(txn_id, **options))


def _by_id(plan: Plan) -> dict[str, Any]:
    return {b["branchId"]: b for b in plan.to_wire()["branches"]}


def _offers(trip: Trip, txn_id: str) -> dict[str, OutcomeReceipt]:
    record = trip.log.record(txn_id)
    receipts = [
        OutcomeReceipt.model_validate(e["body"]["receipt"])
        for e in record["events"]
        if e["type"] == "txn.committed"
    ]
    return {r.branch_id: r for r in receipts}


def _available(trip: Trip) -> Decimal:
    with trip.world.stores[PAYMENTS].transaction() as conn:
        found = balance(conn, CARD)
    assert found is not None
    return found.decimal


def _seat(trip: Trip, seat: str) -> tuple[str, str | None]:
    with trip.world.stores[AIRLINE].transaction() as conn:
        row = conn.execute(
            _airline.seats.select().where(
                _airline.seats.c.flight == _airline.FLIGHT, _airline.seats.c.seat == seat
            )
        ).one()
    return str(row.status), row.txn_id


def _free_rooms(trip: Trip) -> int:
    with trip.world.stores[HOTEL].transaction() as conn:
        return int(
            conn.execute(
                _hotel.rooms.select()
                .with_only_columns(_hotel.rooms.c.free)
                .where(_hotel.rooms.c.night == "2026-12-14")
            ).scalar_one()
        )


def _events_of(trip: Trip, txn_id: str) -> int:
    with trip.world.stores[CALENDAR].transaction() as conn:
        rows = conn.execute(
            _calendar.events.select().where(_calendar.events.c.txn_id == txn_id)
        ).all()
    return len(rows)


def _votes(record: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Each branch's prepare vote in the record, and its reason."""
    out = {}
    for event in events(record, "txn.prepared"):
        receipt = event["body"]["receipt"]
        if receipt is not None:  # None: no answer before the decision
            out[receipt["branchId"]] = (receipt["vote"], receipt.get("reason"))
    return out


def test_each_commit_signs_how_it_is_taken_back_and_at_what_cost_PART_UNDO_OFFER(
    trip: Trip,
) -> None:
    """[PART-UNDO-OFFER] the seat's receipt offers cancel_seat for 75.00 USD within 7 days,
    the room's cancel_room for one night (155.00 USD), the charge a refund of all 730.00
    USD, the event the built-in compensation at no fee and no end."""
    txn_id, _ = _committed(trip)
    committed_at = trip.clock.now()
    offers = {b: r.undo for b, r in _offers(trip, txn_id).items()}
    seat, room, charge, event = (offers[b] for b in ("seat", "room", "charge", "calendar"))
    assert seat is not None and room is not None and charge is not None and event is not None
    assert (seat.kind.value, seat.operation, seat.tier) == ("inverse", "cancel_seat", "hold")
    assert (str(seat.fee), seat.refund) == ("75.00 USD", None)
    assert seat.undo_by == format_time(committed_at + timedelta(days=7))
    assert (room.operation, str(room.fee)) == ("cancel_room", "155.00 USD")
    assert (charge.operation, charge.tier, charge.fee) == ("refund", "final", None)
    assert str(charge.refund) == "730.00 USD"
    assert (event.kind.value, event.operation, event.fee, event.undo_by) == (
        "compensate",
        "hatp.compensate",
        None,
        None,
    )


def test_a_business_seat_costs_more_to_cancel_PART_UNDO_OFFER(trip: Trip) -> None:
    """[PART-UNDO-OFFER] the fee is the fare class's: 200.00 USD for business (row 2), and
    the undo plan refunds the charge less it and the room's night."""
    wire = trip.plan(seat="2C")
    wire["branches"][0]["amount"]["value"] = "2140.00"
    wire["branches"][3]["amount"]["value"] = wire["branches"][3]["args"]["amount"]["value"] = (
        "2450.00"
    )
    # 2450.00 USD is above bob's limit: carol, his delegate, approves it.
    carol = ScriptedAnswer(ApprovalDecision.APPROVE, "human://acme.com/carol")
    assert trip.run(wire, carol).state is TxnState.COMMITTED
    branches = _by_id(_plan_undo(trip, wire["txnId"]))
    assert branches["seat"]["amount"] == {"value": "200.00", "currency": "USD"}
    assert branches["charge"]["args"]["refund"] == {"value": "2095.00", "currency": "USD"}


def test_the_undo_plan_shows_each_fee_and_refunds_the_rest_UNDO_PLAN(trip: Trip) -> None:
    """[UNDO-PLAN] every step of the trip can be taken back: the seat and the room cost
    their cancellation fees, the event is removed for nothing, and the card gets back the
    charge less those fees (730.00 - 75.00 - 155.00 = 500.00 USD); nothing is kept."""
    txn_id, _ = _committed(trip)
    plan = _plan_undo(trip, txn_id)
    branches = _by_id(plan)
    assert {b: (x["operation"], x["tier"]) for b, x in branches.items()} == {
        "seat": ("cancel_seat", "hold"),
        "room": ("cancel_room", "hold"),
        "calendar": ("hatp.compensate", "hold"),
        "charge": ("refund", "final"),
    }
    assert branches["seat"]["amount"] == {"value": "75.00", "currency": "USD"}
    assert branches["room"]["amount"] == {"value": "155.00", "currency": "USD"}
    assert branches["calendar"]["amount"] is None
    refund = Decimal(branches["charge"]["args"]["refund"]["value"])
    assert refund == TRIP - SEAT_FEE - ROOM_FEE == Decimal("500.00")
    assert {b: x["undoes"] for b, x in branches.items()} == {
        b: {"txnId": txn_id, "branchId": b} for b in branches
    }
    assert plan.undoes is not None and plan.undoes.kept == []


def test_an_approved_undo_takes_the_trip_back_and_every_ledger_agrees_UNDO_RUN(
    trip: Trip,
) -> None:
    """[UNDO-RUN] approved, the undo commits: the seat is free again (the next trip books
    it), the nights are back, the event is gone, and the card is charged exactly the fees
    the airline and the hotel kept. Each ledger judges the trip undone and the undo whole."""
    txn_id, seat = _committed(trip)
    assert (_seat(trip, seat), _free_rooms(trip), _available(trip)) == (
        ("ticketed", txn_id),
        ROOMS - 1,
        LIMIT - TRIP,
    )
    plan = _plan_undo(trip, txn_id)
    done = trip.run(plan.to_wire(), APPROVE_UNDO)
    assert done.state is TxnState.COMMITTED, done.reason
    assert failed_findings(done, trip.world) == []
    assert trip.world.effects(txn_id) == ALL_UNDONE
    assert trip.world.effects(done.txn_id) == ALL_WHOLE
    assert (_seat(trip, seat), _free_rooms(trip), _events_of(trip, txn_id)) == (
        ("free", None),
        ROOMS,
        0,
    )
    assert LIMIT - _available(trip) == SEAT_FEE + ROOM_FEE
    assert trip.kinds(AIRLINE, done.txn_id) == ["cancelling", "cancelled"]
    assert trip.kinds(HOTEL, done.txn_id) == ["cancelling", "cancelled"]
    assert trip.kinds(PAYMENTS, done.txn_id) == ["refunded"]
    assert trip.kinds(CALENDAR, txn_id)[-1] == "removed"
    # The seat is really free: another trip tickets it.
    again, same = _committed(trip, seat=seat)
    assert (same, _seat(trip, seat)) == (seat, ("ticketed", again))
    assert trip.world.effects(txn_id) == ALL_UNDONE


def test_a_second_undo_of_the_trip_is_refused_UNDO_CLAIM(trip: Trip) -> None:
    """[UNDO-CLAIM] once undone, a step asked for again is refused ALREADY_UNDONE, and a
    plan built before the first undo ran is refused ALREADY_UNDONE, nothing logged."""
    txn_id, _ = _committed(trip)
    first, second = _plan_undo(trip, txn_id), _plan_undo(trip, txn_id)
    assert trip.run(first.to_wire(), APPROVE_UNDO).state is TxnState.COMMITTED
    with pytest.raises(UndoRefused) as asked:
        _plan_undo(trip, txn_id, steps=["seat"])
    assert (asked.value.reason, asked.value.data["branchId"]) == ("ALREADY_UNDONE", "seat")
    with pytest.raises(UndoRefused) as begun:
        trip.run(second.to_wire(), APPROVE_UNDO)
    assert begun.value.reason == "ALREADY_UNDONE"
    assert trip.world.effects(txn_id) == ALL_UNDONE
    assert trip.world.effects(second.txn_id) == ALL_NONE


def test_each_participant_refuses_to_take_a_step_back_twice_PART_UNDO_ONCE(trip: Trip) -> None:
    """[PART-UNDO-ONCE] sent straight to them, past any coordinator, the second plan's
    branches are voted no ALREADY_UNDONE by the airline, the hotel and payments, and
    nothing is cancelled or refunded twice."""
    txn_id, seat = _committed(trip)
    first, second = _plan_undo(trip, txn_id), _plan_undo(trip, txn_id)
    assert trip.run(first.to_wire(), APPROVE_UNDO).state is TxnState.COMMITTED
    available = _available(trip)

    async def votes() -> dict[str, dict[str, Any]]:
        out = {}
        for branch in second.branches:
            server = trip.world.participants[branch.participant]
            out[branch.branch_id] = await server.prepare(second, branch.branch_id, 1)
        return out

    for branch_id, receipt in asyncio.run(votes()).items():
        assert receipt["vote"] == "no", branch_id
        assert receipt["reason"].startswith("ALREADY_UNDONE"), receipt["reason"]
    assert (_seat(trip, seat), _available(trip)) == (("free", None), available)
    assert trip.world.effects(second.txn_id) == ALL_NONE


def test_a_seat_changed_after_the_trip_makes_the_undo_vote_no_and_do_nothing_UNDO_RUN(
    trip: Trip,
) -> None:
    """[UNDO-RUN] the airline moved alice from her seat to 30F after the trip: the seat's
    undo branch votes no ORIGINAL_CHANGED, the undo aborts, and nothing was taken back:
    the trip is still whole everywhere, the card still charged in full."""
    txn_id, seat = _committed(trip)
    trip.world.move_seat(seat, "30F")
    plan = _plan_undo(trip, txn_id)
    done = trip.run(plan.to_wire(), APPROVE_UNDO)
    assert done.state is TxnState.ABORTED
    vote, reason = _votes(done.record)["seat"]
    assert vote == "no" and reason is not None and reason.startswith("ORIGINAL_CHANGED")
    assert trip.world.effects(txn_id) == ALL_WHOLE
    assert trip.world.effects(done.txn_id) == ALL_NONE
    assert (_seat(trip, seat), _seat(trip, "30F")) == (("free", None), ("ticketed", txn_id))
    assert (_free_rooms(trip), _events_of(trip, txn_id), _available(trip)) == (
        ROOMS - 1,
        1,
        LIMIT - TRIP,
    )
    # Whatever held for cancellation was let go: the hotel's lines pair up, or there are none.
    assert trip.kinds(HOTEL, done.txn_id) in ([], ["cancelling", "restored"])
    assert all(claim.void for claim in trip.log.undo_claims(txn_id).values())


def test_an_undo_the_approver_rejects_leaves_the_trip_and_a_later_one_runs_UNDO_CLAIM(
    trip: Trip,
) -> None:
    """[UNDO-CLAIM] bob rejects the undo: it aborts, the trip stays whole and paid, the
    claims are freed; the next undo, approved, takes it all back."""
    txn_id, seat = _committed(trip)
    rejected = trip.run(_plan_undo(trip, txn_id).to_wire(), REJECT_UNDO)
    assert rejected.state is TxnState.ABORTED
    assert trip.world.effects(txn_id) == ALL_WHOLE
    assert trip.world.effects(rejected.txn_id) == ALL_NONE
    assert (_seat(trip, seat), _available(trip)) == (("ticketed", txn_id), LIMIT - TRIP)
    assert all(claim.void for claim in trip.log.undo_claims(txn_id).values())
    again = trip.run(_plan_undo(trip, txn_id).to_wire(), APPROVE_UNDO)
    assert again.state is TxnState.COMMITTED
    assert trip.world.effects(txn_id) == ALL_UNDONE
    assert trip.world.effects(again.txn_id) == ALL_WHOLE
    assert LIMIT - _available(trip) == SEAT_FEE + ROOM_FEE


def test_a_refund_above_what_was_captured_is_voted_no_UNDO_RUN(trip: Trip) -> None:
    """[UNDO-RUN] an undo plan whose refund was raised past the 730.00 USD captured: the
    coordinator refuses it (REFERENCE_INVALID, [UNDO-CHECK]); past that check (switched
    off) payments votes it no REFUND_ABOVE_CAPTURED, the system of record's own line: the
    undo aborts, nothing is refunded."""
    txn_id, _ = _committed(trip)
    wire = _plan_undo(trip, txn_id).to_wire()
    (charge,) = [b for b in wire["branches"] if b["branchId"] == "charge"]
    charge["args"]["refund"] = charge["amount"] = {"value": "730.01", "currency": "USD"}
    with pytest.raises(UndoRefused) as refused:
        trip.run(parse_plan(wire).to_wire(), APPROVE_UNDO)
    assert refused.value.reason == "REFERENCE_INVALID"
    with unsafe_switched_off("UNDO-OFFER"):
        done = trip.run(parse_plan(wire).to_wire(), APPROVE_UNDO)
    assert done.state is TxnState.ABORTED
    vote, reason = _votes(done.record)["charge"]
    assert vote == "no" and reason is not None and reason.startswith("REFUND_ABOVE_CAPTURED")
    assert trip.world.effects(txn_id) == ALL_WHOLE
    assert trip.world.effects(done.txn_id) == ALL_NONE
    assert _available(trip) == LIMIT - TRIP


def test_an_undo_hold_let_go_leaves_the_ticket_and_the_booking_as_they_were_UNDO_RUN(
    trip: Trip,
) -> None:
    """[UNDO-RUN] the seat and the room held for cancellation, then aborted: the seat is
    ticketed and the room booked again, each ledger pairs cancelling with restored, and
    the trip is whole; an undo after that takes it back."""
    txn_id, seat = _committed(trip)
    plan = _plan_undo(trip, txn_id)

    async def hold_then_let_go() -> list[str]:
        said = []
        for branch_id, participant in (("seat", AIRLINE), ("room", HOTEL)):
            server = trip.world.participants[participant]
            vote = await server.prepare(plan, branch_id, 1)
            said.append(vote["vote"])
            if branch_id == "seat":
                assert _seat(trip, seat) == ("cancelling", txn_id)
                assert trip.world.effects(txn_id)[AIRLINE] == "whole"  # not cancelled yet
            await server.abort(plan.txn_id, branch_id, 1)
        return said

    assert asyncio.run(hold_then_let_go()) == ["yes", "yes"]
    assert _seat(trip, seat) == ("ticketed", txn_id)
    assert trip.kinds(AIRLINE, plan.txn_id) == ["cancelling", "restored"]
    assert trip.kinds(HOTEL, plan.txn_id) == ["cancelling", "restored"]
    assert trip.world.effects(txn_id) == ALL_WHOLE
    assert trip.world.effects(plan.txn_id) == ALL_NONE
    done = trip.run(_plan_undo(trip, txn_id).to_wire(), APPROVE_UNDO)
    assert done.state is TxnState.COMMITTED
    assert trip.world.effects(txn_id) == ALL_UNDONE
