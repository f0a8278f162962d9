"""The airline: ``book_seat`` holds a seat, then tickets or frees it (tier hold)."""

from __future__ import annotations

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

from hatp.demo._ledger import Seed, Service, held_cost, kinds, ledger_table, log, text_arg
from hatp.errors import OutcomeConflict
from hatp.model import Amount, Certainty, Change, EffectPreview, Tier
from hatp.participant import (
    Committed,
    Operation,
    Prepared,
    Quoted,
    Refuse,
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
    Column("status", String(16), nullable=False),  # free | held | ticketed
    Column("txn_id", String(128), nullable=True, index=True),
    Column("branch_id", String(64), nullable=True),
)
ledger = ledger_table(metadata, "airline")


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


class BookSeat(Operation):
    """Hold the seat named by ``args.flight`` and ``args.seat``; commit tickets it."""

    name = "book_seat"
    tier = Tier.HOLD
    max_lease_seconds = 1200.0
    max_hold_seconds = 1800.0

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
    return {"k_txn_id": work.txn_id, "k_branch_id": work.branch.branch_id}


def _not_held(work: Work, what: str) -> OutcomeConflict:
    row = work.conn.execute(_HELD, _mine(work)).one_or_none()
    return OutcomeConflict(
        f"cannot {what}: no seat is held for {work.txn_id}/{work.branch.branch_id}",
        state=None if row is None else row.status,
        requested="commit",
    )


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
    """Judge what ``txn_id`` left at the airline: ``whole``, ``none`` or ``broken: <why>``."""
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
        if [r.status for r in rows] != ["ticketed"]:
            return f"broken: the ledger says ticketed but the seats show {statuses or 'none'}"
        return "whole"
    if rows:
        return f"broken: {', '.join(statuses)} with nothing ticketed in the ledger"
    if seen["held"] != seen["released"]:
        return f"broken: held {seen['held']} times, released {seen['released']}"
    return "none"


SERVICE = Service(PARTICIPANT, "airline", metadata, ledger, BookSeat, seed, effect)
