"""What every demo participant shares: its ledger, and how the world drives it.

Each participant keeps a ledger table of its own: one line per change it
makes to its inventory, written in the same database transaction as the
change (the ``conn`` the participant SDK hands the operation), so a line
exists exactly when its change does.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Insert,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    insert,
    select,
)

from hatp.errors import OutcomeConflict
from hatp.model import Amount
from hatp.participant import Operation, Refuse, Work
from hatp.store import from_ms, to_ms

CENT = Decimal("0.01")


@dataclass(frozen=True)
class LedgerLine:
    """One change a participant made.

    ``txn_id`` and ``branch_id`` are ``None`` for a change made outside any
    transaction (an owner editing their calendar, a card limit changed).
    ``kind`` says what happened: ``held``, ``ticketed``, ``booked``,
    ``released``, ``added``, ``removed``, ``authorized``, ``captured``,
    ``voided`` or ``edited``.
    """

    participant: str
    txn_id: str | None
    branch_id: str | None
    kind: str
    detail: str
    time: datetime


@dataclass(frozen=True)
class Seed:
    """How the inventory is stocked on a world's first open."""

    rooms: int
    seats_free: bool


@dataclass(frozen=True)
class Service:
    """One demo participant: its tables, its operation, its seed and its effect check."""

    participant_id: str
    name: str  # the key file's and the SQLite file's stem, and the tables' prefix
    metadata: MetaData
    ledger: Table
    operation: Callable[[], Operation]
    seed: Callable[[Connection, Seed], None]
    effect: Callable[[Connection, str], str]  # "whole", "none" or "broken: <why>"


def ledger_table(metadata: MetaData, prefix: str) -> Table:
    """Return the ledger table ``<prefix>_ledger`` on ``metadata``."""
    return Table(
        f"{prefix}_ledger",
        metadata,
        Column("line", Integer, primary_key=True, autoincrement=True),
        Column("participant", String(200), nullable=False),
        Column("txn_id", String(128), nullable=True, index=True),
        Column("branch_id", String(64), nullable=True),
        Column("kind", String(32), nullable=False),
        Column("detail", Text, nullable=False),
        Column("time_ms", BigInteger, nullable=False),
    )


def write_line(
    conn: Connection,
    ledger: Table,
    participant: str,
    txn_id: str | None,
    branch_id: str | None,
    kind: str,
    detail: str,
    now: datetime,
) -> None:
    """Append one ledger line inside the caller's transaction."""
    values = {
        "participant": participant,
        "txn_id": txn_id,
        "branch_id": branch_id,
        "kind": kind,
        "detail": detail,
        "time_ms": to_ms(now),
    }
    conn.execute(_insert_line(ledger), values)


@functools.cache
def _insert_line(ledger: Table) -> Insert:
    # Built once per ledger and run with parameters: SQLAlchemy's compiled cache does the rest.
    return insert(ledger)


def log(work: Work, ledger: Table, kind: str, detail: str) -> None:
    """Append the ledger line for a change ``work`` made, in ``work.conn``."""
    write_line(
        work.conn,
        ledger,
        work.participant_id,
        work.txn_id,
        work.branch.branch_id,
        kind,
        detail,
        work.now,
    )


def read_lines(conn: Connection, ledger: Table, txn_id: str | None = None) -> list[LedgerLine]:
    """Return the ledger lines in the order they were written (one transaction's, if named)."""
    query = select(ledger).order_by(ledger.c.line)
    if txn_id is not None:
        query = query.where(ledger.c.txn_id == txn_id)
    return [
        LedgerLine(
            participant=row.participant,
            txn_id=row.txn_id,
            branch_id=row.branch_id,
            kind=row.kind,
            detail=row.detail,
            time=from_ms(row.time_ms),
        )
        for row in conn.execute(query)
    ]


def kinds(conn: Connection, ledger: Table, txn_id: str) -> Counter[str]:
    """Count one transaction's ledger lines by kind."""
    return Counter(line.kind for line in read_lines(conn, ledger, txn_id))


def money(value: Decimal) -> str:
    """Return a decimal as a plain two-place string, e.g. ``'310.00'``."""
    return format(value.quantize(CENT), "f")


def held_cost(work: Work) -> Amount:
    """The cost the branch's prepare reported: what a hold placed at that price commits at.

    Raises:
        OutcomeConflict: the branch was not prepared with a cost (nothing was held).
    """
    cost = None if work.prepared is None else work.prepared.cost
    if cost is None:
        raise OutcomeConflict(
            f"{work.branch.operation} of {work.txn_id}/{work.branch.branch_id} holds no cost "
            "from its prepare; nothing to commit",
            state=None,
            requested="commit",
        )
    return cost


def text_arg(work: Work, name: str) -> str:
    """Return the branch's string argument ``name``.

    Raises:
        Refuse: ``BAD_ARGS`` when it is missing, empty or not a string.
    """
    value = work.branch.args.get(name)
    if not isinstance(value, str) or not value:
        raise Refuse(
            "BAD_ARGS", f"{work.branch.operation} needs a non-empty string argument {name!r}"
        )
    return value
