"""Small real operations for the participant tests, each keeping its own ledger.

The ledgers are ordinary tables on the participant's own store, written
through the connection the SDK hands over in ``Work``: what the tests count
there is the durable effect, not a mock's call log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import sqlalchemy as sa

from hatp.clock import Clock
from hatp.evidence import Keyring, SigningKey
from hatp.model import Amount, Plan, Preconditions, Tier, parse_plan
from hatp.participant import (
    Committed,
    Operation,
    ParticipantServer,
    Prepared,
    Quoted,
    Refuse,
    Work,
)
from hatp.store import Store

T = TypeVar("T")

AIRLINE = "mcp://airline.example"
KEY = SigningKey.from_seed(bytes([42]) * 32, "mcp://airline.example#key-1")
DECIDE_BY = "2026-12-02T10:00:00.000Z"

metadata = sa.MetaData()
seats = sa.Table(
    "test_seats",
    metadata,
    sa.Column("seat", sa.Text, primary_key=True),
    sa.Column("price", sa.Text, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),  # free | held | ticketed
    sa.Column("holder", sa.Text, nullable=True),  # txn_id/branch_id
)
calendar = sa.Table(
    "test_calendar",
    metadata,
    sa.Column("slot", sa.Text, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("title", sa.Text, nullable=True),
)
charges = sa.Table(
    "test_charges",
    metadata,
    sa.Column("txn_id", sa.Text, nullable=False),
    sa.Column("branch_id", sa.Text, nullable=False),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to the end (no pytest-asyncio here)."""
    return asyncio.run(coro)


def keyring() -> Keyring:
    """A verifier's keyring that trusts the airline's key, issuer = participant id."""
    return Keyring([(KEY.public, AIRLINE)], trusted_issuers=[AIRLINE])


def holder(work: Work) -> str:
    return f"{work.txn_id}/{work.branch.branch_id}"


class HoldSeat(Operation):
    """Hold tier: prepare marks the seat held, commit tickets it, abort frees it."""

    name = "hold_seat"
    tier = Tier.HOLD
    max_lease_seconds = 600.0
    max_hold_seconds = 900.0

    def prepare(self, work: Work) -> Prepared:
        seat = work.branch.args["seat"]
        row = work.conn.execute(sa.select(seats).where(seats.c.seat == seat)).one_or_none()
        if row is None or row.status != "free":
            raise Refuse("SOLD_OUT", f"seat {seat} is not free")
        work.conn.execute(
            seats.update().where(seats.c.seat == seat).values(status="held", holder=holder(work))
        )
        if work.branch.args.get("refuse_after_write"):
            raise Refuse("CHANGED_MIND", "wrote, then voted no")
        return Prepared(
            cost=Amount(value=row.price, currency=row.currency),
            lease_seconds=work.branch.args.get("lease"),
            data={"seat": seat},
        )

    def quote(self, work: Work) -> Quoted:
        """The seat's fare, good for five minutes; free or not (a quote holds nothing)."""
        seat = work.branch.args["seat"]
        row = work.conn.execute(sa.select(seats).where(seats.c.seat == seat)).one_or_none()
        if row is None:
            raise Refuse("NO_SUCH_SEAT", f"there is no seat {seat}")
        if work.branch.args.get("write_in_quote"):  # a careless operation: holds while quoting
            work.conn.execute(
                seats.update()
                .where(seats.c.seat == seat)
                .values(status="held", holder=holder(work))
            )
        return Quoted(cost=Amount(value=row.price, currency=row.currency), valid_seconds=300)

    def commit(self, work: Work) -> Committed:
        seat = self._seat(work)
        work.conn.execute(seats.update().where(seats.c.seat == seat).values(status="ticketed"))
        return Committed(effect={"ticketed": seat})

    def abort(self, work: Work) -> None:
        seat = self._seat(work)
        work.conn.execute(
            seats.update()
            .where(seats.c.seat == seat, seats.c.holder == holder(work))
            .values(status="free", holder=None)
        )

    @staticmethod
    def _seat(work: Work) -> str:
        if work.prepared is None:
            raise RuntimeError("the SDK hands commit and abort what prepare returned")
        return str(work.prepared.data["seat"])


class AddEvent(Operation):
    """Compensate tier: a dry run reads the slot's version; commit writes, compensate removes."""

    name = "add_event"
    tier = Tier.COMPENSATE

    def __init__(self, undo_token: str | None = None) -> None:
        self.undo_token = undo_token

    def prepare(self, work: Work) -> Prepared:
        return Prepared(preconditions=self.preconditions(work))

    def preconditions(self, work: Work) -> Preconditions:
        slot = work.branch.args["slot"]
        version = work.conn.execute(
            sa.select(calendar.c.version).where(calendar.c.slot == slot)
        ).scalar_one()
        return Preconditions(versions={f"calendar/{slot}": str(version)}, scope="calendar.write")

    def commit(self, work: Work) -> Committed:
        slot, title = work.branch.args["slot"], work.branch.args["title"]
        work.conn.execute(
            calendar.update()
            .where(calendar.c.slot == slot)
            .values(title=title, version=calendar.c.version + 1)
        )
        return Committed(effect={"slot": slot, "title": title}, undo_token=self.undo_token)

    def abort(self, work: Work) -> None:
        pass  # a dry run placed nothing

    def compensate(self, work: Work, undo_token: str) -> None:
        slot = work.branch.args["slot"]
        work.conn.execute(
            calendar.update()
            .where(calendar.c.slot == slot)
            .values(title=None, version=calendar.c.version + 1)
        )


class Charge(Operation):
    """Final tier: the dry run reports the cost; commit writes a charge that stays."""

    name = "charge_card"
    tier = Tier.FINAL

    def prepare(self, work: Work) -> Prepared:
        cost = work.branch.args["cost"]
        return Prepared(
            cost=Amount(value=cost["value"], currency=cost["currency"]),
            preconditions=Preconditions(versions={}, scope="card:charge"),
        )

    def quote(self, work: Work) -> Quoted:
        """The cost asked for; it does not expire."""
        cost = work.branch.args["cost"]
        return Quoted(cost=Amount(value=cost["value"], currency=cost["currency"]))

    def commit(self, work: Work) -> Committed:
        cost = work.branch.args["cost"]
        work.conn.execute(
            charges.insert().values(
                txn_id=work.txn_id,
                branch_id=work.branch.branch_id,
                value=cost["value"],
                currency=cost["currency"],
            )
        )
        if work.branch.args.get("fail_after_write"):
            raise RuntimeError("the card network dropped the line after the write")
        return Committed(effect={"charged": f"{cost['value']} {cost['currency']}"})

    def abort(self, work: Work) -> None:
        pass


def setup_ledgers(store: Store) -> None:
    """Create the operations' tables and stock: seats 12A (420 USD), 12B; slot mon-9."""
    with store.transaction() as conn:
        metadata.create_all(conn)
        conn.execute(
            seats.insert(),
            [
                {"seat": "12A", "price": "420.00", "currency": "USD", "status": "free"},
                {"seat": "12B", "price": "380.00", "currency": "USD", "status": "free"},
            ],
        )
        conn.execute(calendar.insert().values(slot="mon-9", version=1, title=None))


def server(
    store: Store, clock: Clock, *operations: Operation, participant_id: str = AIRLINE
) -> ParticipantServer:
    """The airline participant with the three test operations (or the ones given)."""
    ops = operations or (HoldSeat(), AddEvent(), Charge())
    return ParticipantServer(participant_id, KEY, store, ops, clock)


def branch(branch_id: str, **overrides: Any) -> dict[str, Any]:
    """A branch dict; ``seat``/``event``/``charge`` pick the operation by id prefix."""
    base: dict[str, Any]
    if branch_id.startswith("seat"):
        base = {
            "operation": "hold_seat",
            "tier": "hold",
            "args": {"seat": "12A"},
            "amount": {"value": "420.00", "currency": "USD"},
        }
    elif branch_id.startswith("event"):
        base = {
            "operation": "add_event",
            "tier": "compensate",
            "args": {"slot": "mon-9", "title": "Flight to Berlin"},
        }
    else:
        base = {
            "operation": "charge_card",
            "tier": "final",
            "args": {"cost": {"value": "420.00", "currency": "USD"}},
            "amount": {"value": "420.00", "currency": "USD"},
        }
    return {"branchId": branch_id, "participant": AIRLINE, **base, **overrides}


def plan(txn_id: str = "txn-1", *branches: dict[str, Any]) -> Plan:
    """A plan with the given branches (default: one of each tier)."""
    return parse_plan(
        {
            "hatpVersion": "0.1",
            "txnId": txn_id,
            "initiator": "agent://acme.com/travel-bot",
            "onBehalfOf": "human://acme.com/alice",
            "branches": list(branches) or [branch("seat"), branch("event"), branch("charge")],
            "deadlines": {"decideBy": DECIDE_BY},
        }
    )


def seat(store: Store, seat_id: str = "12A") -> tuple[str, str | None]:
    """The seat's (status, holder)."""
    with store.transaction() as conn:
        row = conn.execute(sa.select(seats).where(seats.c.seat == seat_id)).one()
    return row.status, row.holder


def slot(store: Store, slot_id: str = "mon-9") -> tuple[int, str | None]:
    """The calendar slot's (version, title)."""
    with store.transaction() as conn:
        row = conn.execute(sa.select(calendar).where(calendar.c.slot == slot_id)).one()
    return row.version, row.title


def charge_count(store: Store) -> int:
    with store.transaction() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(charges)).scalar_one())


def seen(receipt: dict[str, Any]) -> Preconditions | None:
    """The preconditions a prepare receipt carries, to send back at commit."""
    found = receipt.get("preconditions")
    return None if found is None else Preconditions.model_validate(found)
