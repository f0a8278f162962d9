"""The hotel: ``hold_room`` holds a room for some nights, then books or releases it (tier hold).

A booking can be cancelled within 3 days of booking (:data:`CANCEL_SECONDS`);
the hotel keeps one night's rate as its fee. ``cancel_room``, the inverse of
``hold_room``, runs only in an undo plan: its prepare holds the booking for
cancellation (refused ``ORIGINAL_CHANGED`` when it is no longer booked as that
step booked it), its commit gives the nights back and keeps the fee, its abort
leaves the booking as it was (tier hold).
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from sqlalchemy import (
    Column,
    Connection,
    Integer,
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
    money,
    offer_seconds,
    restore_cancellation,
    settle_cancellation,
    take_cancellation,
    text_arg,
    undoing,
)
from hatp.errors import OutcomeConflict
from hatp.model import Amount, Certainty, Change, Tier
from hatp.participant import (
    Committed,
    NotUndoable,
    Operation,
    Prepared,
    Quoted,
    Refuse,
    Undo,
    Work,
    change,
    observed,
    preview,
)

PARTICIPANT = "mcp://hotel.example"
HOTEL = "midtown-lodge"
RATE = ("155.00", "USD")
#: Nights on sale: this many, from OPENS.
OPENS, SEASON_NIGHTS = date(2026, 12, 1), 120
MAX_NIGHTS = 30
#: How long a quoted rate holds.
RATE_VALID_SECONDS = 3600.0
#: How long after booking a booking can still be cancelled (for one night's rate): 3 days.
CANCEL_SECONDS = 3 * 24 * 3600.0

metadata = MetaData()
rates = Table(
    "hotel_rates",
    metadata,
    Column("hotel", String(64), primary_key=True),
    Column("rate", String(32), nullable=False),
    Column("currency", String(3), nullable=False),
)
rooms = Table(
    "hotel_rooms",
    metadata,
    Column("hotel", String(64), primary_key=True),
    Column("night", String(10), primary_key=True),  # YYYY-MM-DD
    Column("free", Integer, nullable=False),
)
reservations = Table(
    "hotel_reservations",
    metadata,
    Column("reservation", Integer, primary_key=True, autoincrement=True),
    Column("txn_id", String(128), nullable=False, index=True),
    Column("branch_id", String(64), nullable=False),
    Column("hotel", String(64), nullable=False),
    Column("check_in", String(10), nullable=False),
    Column("nights", Integer, nullable=False),
    # held | booked | released | cancelling (held for cancellation by an undo) | cancelled
    Column("status", String(16), nullable=False),
)
ledger = ledger_table(metadata, "hotel")
cancellations = cancellations_table(metadata, "hotel")


# Statements built once and run with parameters (SQLAlchemy's compiled cache
# serves every call). ``k_*`` parameters are the WHERE clause's; an INSERT or
# UPDATE also writes the columns its other parameters name.
_RATE = select(rates).where(rates.c.hotel == bindparam("hotel"))
_NIGHTS = and_(
    rooms.c.hotel == bindparam("k_hotel"), rooms.c.night.in_(bindparam("k_nights", expanding=True))
)
# Decrement only nights still free, in the UPDATE itself, so a racing
# transaction that took the last room cannot take it twice; the nights it
# returns are the ones taken, so the others are full (or not on sale).
_TAKE = (
    update(rooms)
    .where(_NIGHTS, rooms.c.free >= 1)
    .values(free=rooms.c.free - 1)
    .returning(rooms.c.night)
)
_GIVE_BACK = update(rooms).where(_NIGHTS).values(free=rooms.c.free + 1)
_RESERVE = insert(reservations)
# Only a live hold (status held) is this branch's to book or release.
_MINE = and_(
    reservations.c.txn_id == bindparam("k_txn_id"),
    reservations.c.branch_id == bindparam("k_branch_id"),
    reservations.c.status == "held",
)
_HELD = select(reservations).where(_MINE)
_BOOK = (
    update(reservations)
    .where(_MINE)
    .values(status="booked")
    .returning(reservations.c.hotel, reservations.c.check_in, reservations.c.nights)
)
_RELEASE = update(reservations).where(_MINE).values(status="released")
# The reservation a committed step booked, whatever its status now (an undo's own
# branch is not the step's: ``k_*`` name the step it takes back).
_STEP = and_(
    reservations.c.txn_id == bindparam("k_txn_id"),
    reservations.c.branch_id == bindparam("k_branch_id"),
)
_BOOKED_AS = (reservations.c.hotel, reservations.c.check_in, reservations.c.nights)
_BOOKED_NOW = select(*_BOOKED_AS).where(_STEP, reservations.c.status == "booked")
_CANCELLING = (
    update(reservations)
    .where(_STEP, reservations.c.status == "booked")
    .values(status="cancelling")
    .returning(*_BOOKED_AS)
)
_RESTORE = (
    update(reservations).where(_STEP, reservations.c.status == "cancelling").values(status="booked")
)
_CANCEL = (
    update(reservations)
    .where(_STEP, reservations.c.status == "cancelling")
    .values(status="cancelled")
    .returning(*_BOOKED_AS)
)


class HoldRoom(Operation):
    """Hold a room at ``args.hotel`` for ``args.nights`` from ``args.checkIn``; commit books it."""

    name = "hold_room"
    tier = Tier.HOLD
    inverse = "cancel_room"

    def prepare(self, work: Work) -> Prepared:
        hotel, check_in, nights = _args(work)
        rate = work.conn.execute(_RATE, {"hotel": hotel}).one_or_none()
        if rate is None:
            raise Refuse("NO_SUCH_HOTEL", f"no hotel {hotel!r} here")
        dates = [(check_in + timedelta(days=n)).isoformat() for n in range(nights)]
        taken = set(work.conn.execute(_TAKE, {"k_hotel": hotel, "k_nights": dates}).scalars())
        full = [night for night in dates if night not in taken]
        if full:
            # Refusing rolls back the nights this UPDATE did take.
            raise Refuse("SOLD_OUT", f"{hotel} has no room free on {', '.join(full)}")
        work.conn.execute(
            _RESERVE,
            {
                "txn_id": work.txn_id,
                "branch_id": work.branch.branch_id,
                "hotel": hotel,
                "check_in": check_in.isoformat(),
                "nights": nights,
                "status": "held",
            },
        )
        log(work, ledger, "held", f"1 room at {hotel}, {nights} nights from {check_in}")
        cost = _cost(rate.rate, rate.currency, nights)
        # Exact: the hold keeps the room on each night for this branch alone, and
        # commit books exactly it, at the rate, for the plan's traveller.
        booking = _booking(work, hotel, check_in.isoformat(), nights, cost)
        return Prepared(cost=cost, preview=preview(Certainty.EXACT, booking))

    def quote(self, work: Work) -> Quoted:
        """The rate times the nights, good for an hour; a quote holds no room."""
        hotel, check_in, nights = _args(work)
        rate = work.conn.execute(_RATE, {"hotel": hotel}).one_or_none()
        if rate is None:
            raise Refuse("NO_SUCH_HOTEL", f"no hotel {hotel!r} here")
        cost = _cost(rate.rate, rate.currency, nights)
        booking = _booking(work, hotel, check_in.isoformat(), nights, cost)
        return Quoted(
            cost=cost,
            valid_seconds=RATE_VALID_SECONDS,
            preview=preview(Certainty.EXACT, booking),
        )

    def commit(self, work: Work) -> Committed:
        row = work.conn.execute(_BOOK, _mine(work)).one_or_none()
        if row is None:
            raise OutcomeConflict(
                f"cannot book: no room is held for {work.txn_id}/{work.branch.branch_id}",
                state=None,
                requested="commit",
            )
        log(
            work,
            ledger,
            "booked",
            f"1 room at {row.hotel}, {row.nights} nights from {row.check_in}",
        )
        cost = held_cost(work)  # booked at the rate the room was held at
        return Committed(
            effect={"hotel": row.hotel, "checkIn": row.check_in, "nights": row.nights},
            observed=observed(_booking(work, row.hotel, row.check_in, row.nights, cost)),
        )

    def abort(self, work: Work) -> None:
        # Tolerant: nothing held means nothing to release.
        row = work.conn.execute(_HELD, _mine(work)).one_or_none()
        if row is None:
            return
        start = date.fromisoformat(row.check_in)
        dates = [(start + timedelta(days=n)).isoformat() for n in range(row.nights)]
        work.conn.execute(_GIVE_BACK, {"k_hotel": row.hotel, "k_nights": dates})
        work.conn.execute(_RELEASE, _mine(work))
        log(work, ledger, "released", f"1 room at {row.hotel}, {row.nights} nights from {start}")

    def undo_terms(self, work: Work, committed: Committed) -> Undo:
        """A booking is cancelled within :data:`CANCEL_SECONDS`; the hotel keeps one
        night's rate (the cost it was booked at, over its nights)."""
        cost, nights = held_cost(work), int(committed.effect["nights"])
        fee = Amount(value=money(cost.decimal / nights), currency=cost.currency)
        return Undo(fee=fee, undo_seconds=CANCEL_SECONDS)


class CancelRoom(Operation):
    """Cancel the booking a ``hold_room`` step made (its inverse; undo plans only).

    Prepare holds the booking for cancellation if it is still booked as that step
    booked it and reports the fee as its cost; commit gives the nights back; abort
    (or the hold's lease ending) leaves the booking as it was.
    """

    name = "cancel_room"
    tier = Tier.HOLD

    def prepare(self, work: Work) -> Prepared:
        step = undoing(work)
        original = step.original
        row = work.conn.execute(_CANCELLING, _mine(original)).one_or_none()
        if row is None:
            raise _changed(original)
        fee = step.offer.fee
        stay = f"1 room at {row.hotel}, {row.nights} nights from {row.check_in}"
        hold_cancellation(work, cancellations, stay, fee)
        log(work, ledger, "cancelling", f"{stay} of {original.txn_id}")
        # Exact: the booking is held for this branch alone, and commit cancels exactly it.
        cancel = _cancel(original, row.hotel, row.check_in, row.nights, fee)
        return Prepared(
            cost=fee,
            lease_seconds=self.max_lease_seconds,
            preview=preview(Certainty.EXACT, cancel),
        )

    def quote(self, work: Work) -> Quoted:
        """The fee the step's offer signed, good while the offer stands; holds nothing."""
        step = undoing(work)
        original = step.original
        row = work.conn.execute(_BOOKED_NOW, _mine(original)).one_or_none()
        if row is None:
            raise _changed(original)
        fee = step.offer.fee
        cancel = _cancel(original, row.hotel, row.check_in, row.nights, fee)
        return Quoted(
            cost=fee,
            valid_seconds=offer_seconds(step, work.now),
            preview=preview(Certainty.EXACT, cancel),
        )

    def commit(self, work: Work) -> Committed:
        row, stay = take_cancellation(work, cancellations, _CANCEL, "booking")
        start = date.fromisoformat(stay.check_in)
        dates = [(start + timedelta(days=n)).isoformat() for n in range(stay.nights)]
        work.conn.execute(_GIVE_BACK, {"k_hotel": stay.hotel, "k_nights": dates})
        settle_cancellation(work, cancellations, "cancelled")
        fee, kept = cancellation_fee(work)
        log(work, ledger, "cancelled", f"{row.what} of {row.original_txn_id}, {kept}")
        original = undoing(work).original
        return Committed(
            effect={
                "hotel": stay.hotel,
                "checkIn": stay.check_in,
                "nights": stay.nights,
                "status": "cancelled",
                "fee": None if fee is None else str(fee),
            },
            observed=observed(_cancel(original, stay.hotel, stay.check_in, stay.nights, fee)),
        )

    def abort(self, work: Work) -> None:
        restore_cancellation(work, cancellations, _RESTORE, ledger, "booked for")

    def undo_terms(self, work: Work, committed: Committed) -> NotUndoable:
        return NotUndoable("a cancelled booking is not restored: book the room again")


def _changed(original: Work) -> Refuse:
    return Refuse(
        "ORIGINAL_CHANGED",
        f"the room {original.txn_id}/{original.branch.branch_id} booked is no longer booked "
        "as it was: it changed after that commit, so there is nothing to cancel",
    )


def _cancel(
    original: Work, hotel: str, check_in: str, nights: int, fee: Amount | None
) -> list[Change]:
    """The one change a cancellation makes: the guest off the booking, the fee kept."""
    return [
        change(
            f"hotel {hotel}, 1 room, {nights} nights from {check_in}",
            "cancel",
            field="guest",
            before=original.plan.on_behalf_of,
            after=None,
            amount=fee,
        )
    ]


def _cost(rate: str, currency: str, nights: int) -> Amount:
    return Amount(value=money(Decimal(rate) * nights), currency=currency)


def _booking(work: Work, hotel: str, check_in: str, nights: int, cost: Amount) -> list[Change]:
    """The one change a commit makes: the room booked for the traveller, for the nights."""
    return [
        change(
            f"hotel {hotel}, 1 room, {nights} nights from {check_in}",
            "book",
            field="guest",
            before=None,
            after=work.plan.on_behalf_of,
            amount=cost,
        )
    ]


def _mine(work: Work) -> dict[str, str]:
    return {"k_txn_id": work.txn_id, "k_branch_id": work.branch.branch_id}


def _args(work: Work) -> tuple[str, date, int]:
    hotel, check_in = text_arg(work, "hotel"), text_arg(work, "checkIn")
    nights = work.branch.args.get("nights")
    if not isinstance(nights, int) or isinstance(nights, bool) or not 1 <= nights <= MAX_NIGHTS:
        raise Refuse("BAD_ARGS", f"hold_room needs nights, a whole number from 1 to {MAX_NIGHTS}")
    try:
        start = date.fromisoformat(check_in)
    except ValueError:
        raise Refuse("BAD_ARGS", f"checkIn {check_in!r} is not a date like 2026-12-14") from None
    if start.isoformat() != check_in:
        raise Refuse("BAD_ARGS", f"checkIn {check_in!r} is not a date like 2026-12-14")
    return hotel, start, nights


def seed(conn: Connection, stock: Seed) -> None:
    """Stock the hotel (once): ``stock.rooms`` rooms a night for the season."""
    if conn.execute(select(func.count()).select_from(rates)).scalar_one():
        return
    conn.execute(insert(rates).values(hotel=HOTEL, rate=RATE[0], currency=RATE[1]))
    conn.execute(
        insert(rooms),
        [
            {"hotel": HOTEL, "night": (OPENS + timedelta(days=n)).isoformat(), "free": stock.rooms}
            for n in range(SEASON_NIGHTS)
        ],
    )


def effect(conn: Connection, txn_id: str) -> str:
    """Judge what ``txn_id`` left at the hotel: ``whole``, ``none``, ``undone`` (booked,
    then cancelled by an undo transaction) or ``broken: <why>``; for an undo transaction,
    ``whole`` once its cancellation committed, ``none`` if it was restored."""
    undo = cancellation_effect(conn, ledger, cancellations, txn_id)
    if undo is not None:
        return undo
    seen = kinds(conn, ledger, txn_id)
    rows = conn.execute(select(reservations).where(reservations.c.txn_id == txn_id)).all()
    live = sorted(r.status for r in rows if r.status != "released")
    if seen["booked"] > 1:
        return f"broken: booked {seen['booked']} times"
    if seen["booked"] == 1:
        # A hold lost at its lease's end and placed again [PART-REPLACE] is held
        # once more than it is released; booked, the last hold must be live.
        if seen["released"] >= seen["held"]:
            return "broken: booked and also released"
        if cancelled_step(conn, cancellations, txn_id):
            if live != ["cancelled"]:
                return f"broken: cancelled by an undo but the reservations show {live or 'none'}"
            return "undone"
        # Held for cancellation by an undo still open, the room is still booked.
        if live not in (["booked"], ["cancelling"]):
            return f"broken: the ledger says booked but the reservations show {live or 'none'}"
        return "whole"
    if live:
        return f"broken: reservation {', '.join(live)} with nothing booked in the ledger"
    if seen["held"] != seen["released"]:
        return f"broken: held {seen['held']} times, released {seen['released']}"
    return "none"


SERVICE = Service(
    PARTICIPANT, "hotel", metadata, ledger, lambda: (HoldRoom(), CancelRoom()), seed, effect
)
