"""The airline: ``book_seat`` holds a seat, then tickets or frees it (tier hold).

A ticket can be cancelled for a fee by its fare class, within 7 days of
ticketing (:data:`CANCEL_FEES`, :data:`CANCEL_SECONDS`): ``cancel_seat``, the
inverse of ``book_seat``, runs only in an undo plan. Its prepare holds the
ticketed seat for cancellation (refused ``ORIGINAL_CHANGED`` when the seat is no
longer ticketed to that booking), its commit frees the seat and keeps the fee,
its abort leaves the seat ticketed as it was (tier hold).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    func,
    insert,
    select,
    update,
)

from hatp.demo._ledger import (
    Seed,
    Service,
    cancellation_effect,
    cancellation_fee,
    cancellations_table,
    cancelled_step,
    held_cost,
    hold_cancellation,
    kinds,
    ledger_table,
    log,
    offer_seconds,
    restore_cancellation,
    settle_cancellation,
    take_cancellation,
    text_arg,
    undoing,
    write_line,
)
from hatp.errors import OutcomeConflict
from hatp.model import Amount, Certainty, Change, EffectPreview, Tier
from hatp.participant import (
    Committed,
    NotUndoable,
    Operation,
    Prepared,
    Quoted,
    Refuse,
    Undo,
    Undoing,
    Work,
    change,
    observed,
    preview,
)

PARTICIPANT = "mcp://airline.example"
FLIGHT = "LH400"
#: Fare class -> (price, currency); rows 1-3 are business, the rest economy.
FARES = {"J": ("2140.00", "USD"), "Y": ("420.00", "USD")}
ROWS, LETTERS, BUSINESS_ROWS = 30, "ABCDEF", 3
#: How long a quoted fare holds: longer than a seat's 20-minute lease, so people can
#: approve a fare in approval-first mode before any seat is held [COORD-QUOTE].
FARE_VALID_SECONDS = 1800.0
#: Fare class -> the fee the airline keeps when a ticket is cancelled.
CANCEL_FEES = {"J": ("200.00", "USD"), "Y": ("75.00", "USD")}
#: How long after ticketing a ticket can still be cancelled: 7 days.
CANCEL_SECONDS = 7 * 24 * 3600.0

metadata = MetaData()
fares = Table(
    "airline_fares",
    metadata,
    Column("flight", String(16), primary_key=True),
    Column("fare", String(4), primary_key=True),
    Column("price", String(32), nullable=False),
    Column("currency", String(3), nullable=False),
)
seats = Table(
    "airline_seats",
    metadata,
    Column("flight", String(16), primary_key=True),
    Column("seat", String(8), primary_key=True),
    Column("fare", String(4), nullable=False),
    Column("status", String(16), nullable=False),  # free | held | ticketed | cancelling
    Column("txn_id", String(128), nullable=True, index=True),
    Column("branch_id", String(64), nullable=True),
)
ledger = ledger_table(metadata, "airline")
cancellations = cancellations_table(metadata, "airline")


# Statements built once and run with parameters (SQLAlchemy's compiled cache
# serves every call). ``k_*`` parameters are the WHERE clause's; an UPDATE
# also sets the columns its other parameters name.
_SEAT = (
    select(seats, fares.c.price, fares.c.currency)
    .join(fares, (fares.c.flight == seats.c.flight) & (fares.c.fare == seats.c.fare))
    .where(seats.c.flight == bindparam("flight"), seats.c.seat == bindparam("seat"))
)
# Only a free seat is taken, in the UPDATE itself: two transactions racing
# for one seat (PostgreSQL, read committed) cannot both win.
_TAKE = (
    update(seats)
    .where(
        seats.c.flight == bindparam("k_flight"),
        seats.c.seat == bindparam("k_seat"),
        seats.c.status == "free",
    )
    .values(status="held")
)
_MINE = and_(seats.c.txn_id == bindparam("k_txn_id"), seats.c.branch_id == bindparam("k_branch_id"))
_HELD = select(seats).where(_MINE)
_TICKET = (
    update(seats)
    .where(_MINE, seats.c.status == "held")
    .values(status="ticketed")
    .returning(seats.c.flight, seats.c.seat)
)
_FREE = update(seats).where(_MINE).values(status="free", txn_id=None, branch_id=None)
# An undo holds the seat for cancellation only while it is still ticketed to the
# step it takes back: not after the airline moved that passenger elsewhere.
_CANCELLING = (
    update(seats)
    .where(
        _MINE,
        seats.c.flight == bindparam("k_flight"),
        seats.c.seat == bindparam("k_seat"),
        seats.c.status == "ticketed",
    )
    .values(status="cancelling")
)
_TICKETED_TO = select(seats.c.seat).where(
    _MINE,
    seats.c.flight == bindparam("k_flight"),
    seats.c.seat == bindparam("k_seat"),
    seats.c.status == "ticketed",
)
_RESTORE = update(seats).where(_MINE, seats.c.status == "cancelling").values(status="ticketed")
_CANCEL = (
    update(seats)
    .where(_MINE, seats.c.status == "cancelling")
    .values(status="free", txn_id=None, branch_id=None)
    .returning(seats.c.flight, seats.c.seat)
)


class BookSeat(Operation):
    """Hold the seat named by ``args.flight`` and ``args.seat``; commit tickets it."""

    name = "book_seat"
    tier = Tier.HOLD
    max_lease_seconds = 1200.0
    max_hold_seconds = 1800.0
    inverse = "cancel_seat"

    def prepare(self, work: Work) -> Prepared:
        flight, seat = text_arg(work, "flight"), text_arg(work, "seat")
        row = work.conn.execute(_SEAT, {"flight": flight, "seat": seat}).one_or_none()
        if row is None:
            raise Refuse("NO_SUCH_SEAT", f"flight {flight} has no seat {seat}")
        taken = work.conn.execute(
            _TAKE,
            {
                "k_flight": flight,
                "k_seat": seat,
                "txn_id": work.txn_id,
                "branch_id": work.branch.branch_id,
            },
        ).rowcount
        if taken != 1:
            raise Refuse("SOLD_OUT", f"seat {seat} on {flight} is taken; pick another seat")
        log(work, ledger, "held", f"seat {seat} on {flight}, fare {row.fare}")
        fare = Amount(value=row.price, currency=row.currency)
        return Prepared(
            cost=fare,
            lease_seconds=self.max_lease_seconds,
            preview=_preview(work, flight, seat, fare),
            data={"flight": flight, "seat": seat},
        )

    def quote(self, work: Work) -> Quoted:
        """The seat's fare, good for 30 minutes; a quote holds no seat, free or not."""
        flight, seat = text_arg(work, "flight"), text_arg(work, "seat")
        row = work.conn.execute(_SEAT, {"flight": flight, "seat": seat}).one_or_none()
        if row is None:
            raise Refuse("NO_SUCH_SEAT", f"flight {flight} has no seat {seat}")
        fare = Amount(value=row.price, currency=row.currency)
        return Quoted(
            cost=fare,
            valid_seconds=FARE_VALID_SECONDS,
            preview=_preview(work, flight, seat, fare),
        )

    def commit(self, work: Work) -> Committed:
        ticketed = work.conn.execute(_TICKET, _mine(work)).one_or_none()
        if ticketed is None:
            raise _not_held(work, "ticket")
        flight, seat = str(ticketed.flight), str(ticketed.seat)
        log(work, ledger, "ticketed", f"seat {seat} on {flight}")
        fare = held_cost(work)  # ticketed at the fare the seat was held at
        return Committed(
            effect={"flight": flight, "seat": seat, "status": "ticketed"},
            observed=observed(_ticket(work, flight, seat, fare)),
        )

    def abort(self, work: Work) -> None:
        # Tolerant: nothing held means nothing to free (the hold was never placed).
        row = work.conn.execute(_HELD, _mine(work)).one_or_none()
        if row is None or row.status != "held":
            return
        work.conn.execute(_FREE, _mine(work))
        log(work, ledger, "released", f"seat {row.seat} on {row.flight}")

    def undo_terms(self, work: Work, committed: Committed) -> Undo:
        """A ticket is cancelled within :data:`CANCEL_SECONDS` for its fare class's fee."""
        flight, seat = str(committed.effect["flight"]), str(committed.effect["seat"])
        row = work.conn.execute(_SEAT, {"flight": flight, "seat": seat}).one()
        value, currency = CANCEL_FEES[row.fare]
        return Undo(fee=Amount(value=value, currency=currency), undo_seconds=CANCEL_SECONDS)


class CancelSeat(Operation):
    """Cancel the seat a ``book_seat`` step ticketed (its inverse; undo plans only).

    Prepare holds the seat for cancellation if it is still ticketed to that step
    and reports the fee as its cost; commit frees the seat; abort (or the hold's
    lease ending) leaves it ticketed as it was.
    """

    name = "cancel_seat"
    tier = Tier.HOLD
    max_lease_seconds = 1200.0
    max_hold_seconds = 1800.0

    def prepare(self, work: Work) -> Prepared:
        step = undoing(work)
        original = step.original
        flight, seat = _ticketed(step)
        held = work.conn.execute(
            _CANCELLING, {**_mine(original), "k_flight": flight, "k_seat": seat}
        ).rowcount
        if held != 1:
            raise _changed(original, flight, seat)
        fee = step.offer.fee
        hold_cancellation(work, cancellations, f"seat {seat} on {flight}", fee)
        log(work, ledger, "cancelling", f"seat {seat} on {flight} of {original.txn_id}")
        # Exact: the seat is held for this branch alone, and commit frees exactly it.
        cancel = _cancel(original, flight, seat, fee)
        return Prepared(
            cost=fee,
            lease_seconds=self.max_lease_seconds,
            preview=preview(Certainty.EXACT, cancel),
            data={"flight": flight, "seat": seat},
        )

    def quote(self, work: Work) -> Quoted:
        """The fee the step's offer signed, good while the offer stands; holds nothing."""
        step = undoing(work)
        original = step.original
        flight, seat = _ticketed(step)
        key = {**_mine(original), "k_flight": flight, "k_seat": seat}
        if work.conn.execute(_TICKETED_TO, key).first() is None:
            raise _changed(original, flight, seat)
        fee = step.offer.fee
        return Quoted(
            cost=fee,
            valid_seconds=offer_seconds(step, work.now),
            preview=preview(Certainty.EXACT, _cancel(original, flight, seat, fee)),
        )

    def commit(self, work: Work) -> Committed:
        row, freed = take_cancellation(work, cancellations, _CANCEL, "seat")
        settle_cancellation(work, cancellations, "cancelled")
        flight, seat = str(freed.flight), str(freed.seat)
        fee, kept = cancellation_fee(work)
        log(work, ledger, "cancelled", f"seat {seat} on {flight} of {row.original_txn_id}, {kept}")
        return Committed(
            effect={
                "flight": flight,
                "seat": seat,
                "status": "cancelled",
                "fee": None if fee is None else str(fee),
            },
            observed=observed(_cancel(undoing(work).original, flight, seat, fee)),
        )

    def abort(self, work: Work) -> None:
        restore_cancellation(work, cancellations, _RESTORE, ledger, "ticketed to")

    def undo_terms(self, work: Work, committed: Committed) -> NotUndoable:
        return NotUndoable("a cancelled ticket is not reissued: book the seat again")


def _ticketed(step: Undoing) -> tuple[str, str]:
    """The flight and seat the step's commit ticketed (its signed effect says)."""
    flight, seat = step.effect.get("flight"), step.effect.get("seat")
    if not isinstance(flight, str) or not isinstance(seat, str):
        raise Refuse("NOT_UNDOABLE", "the step's commit names no flight and seat to cancel")
    return flight, seat


def _changed(original: Work, flight: str, seat: str) -> Refuse:
    return Refuse(
        "ORIGINAL_CHANGED",
        f"seat {seat} on {flight} is no longer ticketed to "
        f"{original.txn_id}/{original.branch.branch_id}: it changed after that commit, so "
        "there is nothing of it to cancel",
    )


def _cancel(original: Work, flight: str, seat: str, fee: Amount | None) -> list[Change]:
    """The one change a cancellation makes: the traveller off the seat, the fee kept."""
    return [
        change(
            f"flight {flight} seat {seat}",
            "cancel",
            field="traveller",
            before=original.plan.on_behalf_of,
            after=None,
            amount=fee,
        )
    ]


def _preview(work: Work, flight: str, seat: str, fare: Amount) -> EffectPreview:
    # Exact: the hold keeps the seat for this branch alone, and commit tickets
    # exactly it, at its fare, for the plan's traveller.
    return preview(Certainty.EXACT, _ticket(work, flight, seat, fare))


def _ticket(work: Work, flight: str, seat: str, fare: Amount) -> list[Change]:
    """The one change a commit makes: the seat ticketed to the traveller, at its fare."""
    return [
        change(
            f"flight {flight} seat {seat}",
            "ticket",
            field="traveller",
            before=None,
            after=work.plan.on_behalf_of,
            amount=fare,
        )
    ]


def _mine(work: Work) -> dict[str, str]:
    """The WHERE parameters naming the seat ``work``'s branch holds (or ticketed)."""
    return {"k_txn_id": work.txn_id, "k_branch_id": work.branch.branch_id}


def _not_held(work: Work, what: str) -> OutcomeConflict:
    row = work.conn.execute(_HELD, _mine(work)).one_or_none()
    return OutcomeConflict(
        f"cannot {what}: no seat is held for {work.txn_id}/{work.branch.branch_id}",
        state=None if row is None else row.status,
        requested="commit",
    )


def move(conn: Connection, flight: str, seat: str, to: str, now: datetime) -> None:
    """Move the passenger ticketed on ``seat`` to the free seat ``to``, as the airline
    does on its own (an aircraft swap): the booking now holds ``to``, and an undo of it
    finds ``seat`` no longer ticketed to it.

    Raises:
        ValueError: ``seat`` is not ticketed, or ``to`` is not free.
    """
    row = conn.execute(_SEAT, {"flight": flight, "seat": seat}).one_or_none()
    if row is None or row.status != "ticketed":
        raise ValueError(f"seat {seat} on {flight} is not ticketed")
    taken = conn.execute(
        update(seats)
        .where(seats.c.flight == flight, seats.c.seat == to, seats.c.status == "free")
        .values(status="ticketed", txn_id=row.txn_id, branch_id=row.branch_id)
    ).rowcount
    if taken != 1:
        raise ValueError(f"seat {to} on {flight} is not free")
    conn.execute(
        update(seats)
        .where(seats.c.flight == flight, seats.c.seat == seat)
        .values(status="free", txn_id=None, branch_id=None)
    )
    booking = "a passenger" if row.txn_id is None else f"the passenger of {row.txn_id}"
    detail = f"moved {booking} from seat {seat} to {to} on {flight}"
    write_line(conn, ledger, PARTICIPANT, None, None, "edited", detail, now)


def seed(conn: Connection, stock: Seed) -> None:
    """Stock flight LH400 (once): rows 1-3 business, 4-30 economy; all taken unless seats_free."""
    if conn.execute(select(func.count()).select_from(seats)).scalar_one():
        return
    conn.execute(
        insert(fares),
        [{"flight": FLIGHT, "fare": f, "price": p, "currency": c} for f, (p, c) in FARES.items()],
    )
    status = "free" if stock.seats_free else "ticketed"
    conn.execute(
        insert(seats),
        [
            {
                "flight": FLIGHT,
                "seat": f"{row}{letter}",
                "fare": "J" if row <= BUSINESS_ROWS else "Y",
                "status": status,
            }
            for row in range(1, ROWS + 1)
            for letter in LETTERS
        ],
    )


def effect(conn: Connection, txn_id: str) -> str:
    """Judge what ``txn_id`` left at the airline: ``whole``, ``none``, ``undone`` (ticketed,
    then cancelled by an undo transaction) or ``broken: <why>``; for an undo transaction,
    ``whole`` once its cancellation committed, ``none`` if it was restored."""
    undo = cancellation_effect(conn, ledger, cancellations, txn_id)
    if undo is not None:
        return undo
    seen = kinds(conn, ledger, txn_id)
    rows = conn.execute(select(seats).where(seats.c.txn_id == txn_id)).all()
    statuses = sorted(f"{r.seat} {r.status}" for r in rows)
    if seen["ticketed"] > 1:
        return f"broken: ticketed {seen['ticketed']} times"
    if seen["ticketed"] == 1:
        # A hold lost at its lease's end and placed again [PART-REPLACE] is held
        # once more than it is released; ticketed, the last hold must be live.
        if seen["released"] >= seen["held"]:
            return "broken: ticketed and also released"
        if cancelled_step(conn, cancellations, txn_id):
            if rows:
                return f"broken: cancelled by an undo but the seats show {statuses}"
            return "undone"
        # Held for cancellation by an undo still open, the seat is still ticketed.
        if [r.status for r in rows] not in (["ticketed"], ["cancelling"]):
            return f"broken: the ledger says ticketed but the seats show {statuses or 'none'}"
        return "whole"
    if rows:
        return f"broken: {', '.join(statuses)} with nothing ticketed in the ledger"
    if seen["held"] != seen["released"]:
        return f"broken: held {seen['held']} times, released {seen['released']}"
    return "none"


SERVICE = Service(
    PARTICIPANT, "airline", metadata, ledger, lambda: (BookSeat(), CancelSeat()), seed, effect
)
