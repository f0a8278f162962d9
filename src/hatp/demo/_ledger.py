"""What every demo participant shares: its ledger, and how the world drives it.

Each participant keeps a ledger table of its own: one line per change it
makes to its inventory, written in the same database transaction as the
change (the ``conn`` the participant SDK hands the operation), so a line
exists exactly when its change does.

A participant whose commits can be cancelled later (the airline's seat, the
hotel's room) also keeps a cancellations table (:func:`cancellations_table`):
one row per undo branch that takes a commit back, naming the undo transaction
and the step it takes back, so the effect judges can tell a commit that was
taken back (``undone``) from one that is still in place (``whole``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Executable,
    Insert,
    Integer,
    MetaData,
    Row,
    Select,
    String,
    Table,
    Text,
    Update,
    and_,
    bindparam,
    insert,
    select,
    update,
)

from hatp.clock import parse_time
from hatp.errors import OutcomeConflict
from hatp.model import Amount
from hatp.participant import Operation, Refuse, Undoing, Work
from hatp.store import from_ms, to_ms

CENT = Decimal("0.01")


@dataclass(frozen=True)
class LedgerLine:
    """One change a participant made.

    ``txn_id`` and ``branch_id`` are ``None`` for a change made outside any
    transaction (an owner editing their calendar, a card limit changed).
    ``kind`` says what happened: ``held``, ``ticketed``, ``booked``,
    ``released``, ``added``, ``removed``, ``authorized``, ``captured``,
    ``voided`` or ``edited``; and for an undo: ``cancelling`` (a commit held for
    cancellation), ``cancelled`` (taken back, the fee kept), ``restored`` (the
    cancellation let go, the commit as it was) and ``refunded``.
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
    """One demo participant: its tables, its operations, its seed and its effect check.

    ``operations`` makes the operations it offers: the one a trip plan names
    first, then the inverses that take its commits back. ``effect`` judges what a
    transaction left there: ``whole``, ``none``, ``undone`` (committed, then taken
    back by an undo transaction) or ``broken: <why>``.
    """

    participant_id: str
    name: str  # the key file's and the SQLite file's stem, and the tables' prefix
    metadata: MetaData
    ledger: Table
    operations: Callable[[], tuple[Operation, ...]]
    seed: Callable[[Connection, Seed], None]
    effect: Callable[[Connection, str], str]


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


def cancellations_table(metadata: MetaData, prefix: str) -> Table:
    """Return the table ``<prefix>_cancellations`` on ``metadata``: one row per undo
    branch that held a commit for cancellation.

    ``txn_id``/``branch_id`` are the undo branch's, ``original_txn_id``/
    ``original_branch_id`` the step it takes back; ``status`` is ``pending``
    (prepared), ``cancelled`` (committed) or ``restored`` (aborted or lapsed).
    """
    return Table(
        f"{prefix}_cancellations",
        metadata,
        Column("cancellation", Integer, primary_key=True, autoincrement=True),
        Column("txn_id", String(128), nullable=False, index=True),
        Column("branch_id", String(64), nullable=False),
        Column("original_txn_id", String(128), nullable=False, index=True),
        Column("original_branch_id", String(64), nullable=False),
        Column("what", Text, nullable=False),
        Column("fee", String(32), nullable=True),
        Column("currency", String(3), nullable=True),
        Column("status", String(16), nullable=False),
    )


def undoing(work: Work) -> Undoing:
    """The committed step an undo branch takes back.

    Raises:
        Refuse: ``NOT_AN_UNDO``, the branch is no undo branch (the SDK runs an
            inverse operation only in undo plans, so this is a guard).
    """
    if work.undoing is None:
        raise Refuse("NOT_AN_UNDO", f"{work.branch.operation} runs only in an undo plan's branch")
    return work.undoing


def offer_seconds(step: Undoing, now: datetime) -> float | None:
    """How long from ``now`` the step's signed undo offer still stands (``None``: no end),
    for a quote of its undo.

    Raises:
        Refuse: ``UNDO_LAPSED``, the offer lapsed (the SDK refuses first; a guard).
    """
    if step.offer.undo_by is None:
        return None
    seconds = (parse_time(step.offer.undo_by) - now).total_seconds()
    if seconds <= 0:
        raise Refuse("UNDO_LAPSED", f"the undo offer lapsed at {step.offer.undo_by}")
    return seconds


def hold_cancellation(work: Work, table: Table, what: str, fee: Amount | None) -> None:
    """Record that the undo branch ``work`` holds its step for cancellation (pending)."""
    step = undoing(work).original
    work.conn.execute(
        insert(table),
        {
            "txn_id": work.txn_id,
            "branch_id": work.branch.branch_id,
            "original_txn_id": step.txn_id,
            "original_branch_id": step.branch.branch_id,
            "what": what,
            "fee": None if fee is None else fee.value,
            "currency": None if fee is None else fee.currency,
            "status": "pending",
        },
    )


def pending_cancellation(work: Work, table: Table) -> Row[Any] | None:
    """The undo branch's pending cancellation row, or ``None`` (never held, or settled)."""
    return work.conn.execute(_pending(table), _branch_key(work)).one_or_none()


def take_cancellation(
    work: Work, table: Table, statement: Executable, what: str
) -> tuple[Row[Any], Row[Any]]:
    """The undo branch's pending cancellation, and the row ``statement`` (keyed by the step
    it cancels: ``k_txn_id``, ``k_branch_id``) returns as it frees what was held.

    Raises:
        OutcomeConflict: no ``what`` is held for cancellation by this undo branch.
    """
    row = pending_cancellation(work, table)
    freed = None
    if row is not None:
        key = {"k_txn_id": row.original_txn_id, "k_branch_id": row.original_branch_id}
        freed = work.conn.execute(statement, key).one_or_none()
    if row is None or freed is None:
        raise OutcomeConflict(
            f"cannot cancel: no {what} is held for cancellation by "
            f"{work.txn_id}/{work.branch.branch_id}",
            state=None,
            requested="commit",
        )
    return row, freed


def cancellation_fee(work: Work) -> tuple[Amount | None, str]:
    """The fee the undo branch's prepare charged, and how the ledger says it:
    ``fee 75.00 USD kept`` or ``no fee``."""
    fee = None if work.prepared is None else work.prepared.cost
    return fee, "no fee" if fee is None else f"fee {fee} kept"


def restore_cancellation(
    work: Work, table: Table, statement: Executable, ledger: Table, as_it_was: str
) -> None:
    """Let the undo branch's pending cancellation go (its abort, or its lease's end):
    ``statement`` (keyed by the step, ``k_txn_id``, ``k_branch_id``) puts the step back,
    and the ledger says ``<what> <as_it_was> <txnId> as it was``. Tolerant: nothing held
    for cancellation means nothing to restore."""
    row = pending_cancellation(work, table)
    if row is None:
        return
    key = {"k_txn_id": row.original_txn_id, "k_branch_id": row.original_branch_id}
    work.conn.execute(statement, key)
    settle_cancellation(work, table, "restored")
    log(work, ledger, "restored", f"{row.what} {as_it_was} {row.original_txn_id} as it was")


def settle_cancellation(work: Work, table: Table, status: str) -> None:
    """Mark the undo branch's pending cancellation ``cancelled`` or ``restored``."""
    work.conn.execute(_settle(table), {**_branch_key(work), "new_status": status})


def cancelled_step(conn: Connection, table: Table, txn_id: str) -> bool:
    """Whether an undo transaction cancelled (committed the cancellation of) a step of
    ``txn_id``."""
    found = conn.execute(
        select(table.c.cancellation).where(
            table.c.original_txn_id == txn_id, table.c.status == "cancelled"
        )
    ).first()
    return found is not None


def cancellation_effect(conn: Connection, ledger: Table, table: Table, txn_id: str) -> str | None:
    """Judge what the undo transaction ``txn_id`` left here: ``whole`` (its step
    cancelled once), ``none`` (every cancellation it held was restored) or ``broken:
    <why>``; ``None`` when ``txn_id`` held nothing here for cancellation (no undo)."""
    seen = kinds(conn, ledger, txn_id)
    statuses = sorted(
        conn.execute(select(table.c.status).where(table.c.txn_id == txn_id)).scalars()
    )
    if not statuses and not any(seen[k] for k in _CANCEL_KINDS):
        return None
    if seen["cancelled"] > 1:
        return f"broken: cancelled {seen['cancelled']} times"
    if "pending" in statuses:
        return "broken: a cancellation is still pending (neither cancelled nor restored)"
    if seen["cancelled"] == 1:
        # A cancellation lost at its lease's end and held again [PART-REPLACE] is held
        # once more than it is restored; cancelled, the last one held must be it.
        if seen["restored"] >= seen["cancelling"]:
            return "broken: cancelled and also restored"
        if statuses.count("cancelled") != 1:
            return f"broken: the ledger says cancelled but the cancellations show {statuses}"
        return "whole"
    if "cancelled" in statuses:
        return "broken: a cancellation is done with no cancellation in the ledger"
    if seen["cancelling"] != seen["restored"]:
        return (
            f"broken: held for cancellation {seen['cancelling']} times, restored {seen['restored']}"
        )
    return "none"


_CANCEL_KINDS = ("cancelling", "cancelled", "restored")


@functools.cache
def _pending(table: Table) -> Select[Any]:
    return select(table).where(_mine(table), table.c.status == "pending")


@functools.cache
def _settle(table: Table) -> Update:
    return (
        update(table)
        .where(_mine(table), table.c.status == "pending")
        .values(status=bindparam("new_status"))
    )


def _mine(table: Table) -> ColumnElement[bool]:
    return and_(
        table.c.txn_id == bindparam("k_txn_id"), table.c.branch_id == bindparam("k_branch_id")
    )


def _branch_key(work: Work) -> dict[str, str]:
    return {"k_txn_id": work.txn_id, "k_branch_id": work.branch.branch_id}
