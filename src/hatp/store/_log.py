"""The coordinator's decision log: one row per transaction, and its record events.

Ownership of a transaction is a lease with a fencing token. Whoever holds
the lease drives the transaction and writes with its fence; taking over
moves the fence up, so every write of the previous holder is refused from
then on ([STORE-LEASE], [STORE-FENCE]). Each method is one short database
transaction ([STORE-ATOMIC]).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hatp.clock import parse_time
from hatp.errors import OutcomeConflict, RecordInvalid, StaleFence, TransactionUnknown
from hatp.evidence import WrittenEvent, digest_bytes
from hatp.model.txn import Decision, TxnState
from hatp.store._driver import INTEGRITY_ERRORS, DriverSession
from hatp.store._engine import Store, insert_or_ignore
from hatp.store._journal import UndoClaim, claim_steps, claims_of
from hatp.store._schema import (
    dump_json,
    from_ms,
    lease_end,
    load_json,
    record_event,
    to_ms,
    txn,
)
from hatp.version import PROTOCOL_VERSION

# Spelled out rather than NOT IN (...): an IN list cannot be compiled once (_driver.py).
_IS_OPEN = sa.and_(*(txn.c.state != state.value for state in TxnState if state.finished))
_OPEN_BY_STATE = sa.select(txn.c.state, sa.func.count()).where(_IS_OPEN).group_by(txn.c.state)
_OPEN_IDS = sa.select(txn.c.txn_id).where(_IS_OPEN).order_by(txn.c.created_at, txn.c.txn_id)
_CLAIMABLE = _OPEN_IDS.where(
    sa.or_(
        txn.c.owner.is_(None),
        txn.c.lease_until.is_(None),
        txn.c.lease_until <= sa.bindparam("at"),
    )
)


@dataclass(frozen=True)
class TxnRow:
    """One transaction as the log holds it."""

    txn_id: str
    plan: dict[str, Any]
    plan_digest: str
    state: TxnState
    decision: Decision | None
    owner: str | None
    fence: int
    lease_until: datetime | None
    head: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def _from_row(cls, row: Any) -> TxnRow:
        return cls(
            txn_id=row.txn_id,
            plan=load_json(row.plan),
            plan_digest=row.plan_digest,
            state=TxnState(row.state),
            decision=None if row.decision is None else Decision(row.decision),
            owner=row.owner,
            fence=row.fence,
            lease_until=None if row.lease_until is None else from_ms(row.lease_until),
            head=row.head,
            created_at=from_ms(row.created_at),
            updated_at=from_ms(row.updated_at),
        )


class DecisionLog:
    """The coordinator's durable log of transactions and their record events."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        """The store the log is kept in (async code calls the log through its
        :meth:`~Store.call`)."""
        return self._store

    def create(
        self,
        txn_id: str,
        plan: Mapping[str, Any] | bytes,
        plan_digest: str,
        owner: str,
        now: datetime,
        lease_seconds: float,
        events: Sequence[Mapping[str, Any] | WrittenEvent],
        claims: tuple[str, Sequence[str]] | None = None,
    ) -> int:
        """Log a new transaction, leased to ``owner``, with its first record events.

        ``plan`` is the plan's wire form or, when the caller made them already (for
        its digest), its canonical bytes; ``events`` are events as dicts or as their
        writer signed them (:class:`~hatp.evidence.WrittenEvent`), which are stored
        as they are, without canonicalizing them again.

        The row starts in state ``active`` with no decision and fence 1. An undo
        transaction passes ``claims``, ``(originalTxnId, stepIds)``: the steps it
        takes back are claimed for it in the same database transaction [UNDO-CLAIM].

        Returns:
            The fence of the new lease (always 1).

        Raises:
            OutcomeConflict: ``txn_id`` is already in the log; nothing was written.
            UndoRefused: ``ALREADY_UNDONE`` or ``UNDO_PENDING``: another undo holds a
                step's claim; nothing was written.
            RecordInvalid: an event has no integer ``seq``.
            StoreUnavailable: the database failed; nothing was written.
        """
        rows = _event_rows(txn_id, events)
        at = to_ms(now)
        values = {
            "txn_id": txn_id,
            "plan": plan.decode() if isinstance(plan, bytes) else dump_json(plan),
            "plan_digest": plan_digest,
            "state": TxnState.ACTIVE.value,
            "decision": None,
            "owner": owner,
            "fence": 1,
            "lease_until": lease_end(now, lease_seconds),
            "head": digest_bytes(rows[-1]["event"].encode()) if rows else None,
            "created_at": at,
            "updated_at": at,
        }
        with self._store.driver_session() as session:
            stmt = _create_statement(session.dialect)
            if session.execute(stmt, values).first() is None:
                raise OutcomeConflict(
                    f"transaction {txn_id} is already in the log; choose another id",
                    txn_id=txn_id,
                )
            session.executemany(_INSERT_EVENT, rows)
            if claims is not None:
                claim_steps(session, txn_id, claims[0], claims[1], at)
        return 1

    def undo_claims(self, txn_id: str) -> dict[str, UndoClaim]:
        """Return the undo journal's claims on the steps of ``txn_id``, by step id.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            return claims_of(session, txn_id)

    def append(
        self,
        txn_id: str,
        fence: int,
        events: Sequence[Mapping[str, Any] | WrittenEvent],
        *,
        state: TxnState | None = None,
        decision: Decision | None = None,
        release: bool = False,
    ) -> None:
        """Append record events, and set the state and decision if given, in one step.

        With ``release`` the holder also gives the lease up in the same step
        (what :meth:`release` does, without a second durable write).

        The head becomes the digest of the last event, and ``updated_at``
        that event's time (the store reads no clock of its own).

        Raises:
            StaleFence: ``fence`` is not the transaction's current fence (a
                takeover happened), or an event's ``seq`` is already logged;
                nothing was written [STORE-FENCE].
            TransactionUnknown: no such transaction.
            RecordInvalid: an event has no integer ``seq``.
            StoreUnavailable: the database failed; nothing was written.
        """
        rows = _event_rows(txn_id, events)
        changes: dict[str, Any] = {}
        if rows:
            changes["head"] = digest_bytes(rows[-1]["event"].encode())
            moment = _event_time(events[-1])
            if moment is not None:
                changes["updated_at"] = moment
        if state is not None:
            changes["state"] = state.value
        if decision is not None:
            changes["decision"] = decision.value
        if release:
            changes.update(owner=None, lease_until=None)
        # The UPDATE locks the row (PostgreSQL; SQLite holds the whole database
        # since BEGIN IMMEDIATE), so no takeover can slip between the fence
        # check and the inserts. _APPEND sets the columns ``changes`` names.
        stmt = _APPEND if changes else _CHECK_FENCE
        params = {**changes, "k_txn_id": txn_id, "k_fence": fence}
        with self._store.driver_session() as session:
            if session.execute(stmt, params).first() is None:
                raise _refusal(session, txn_id, fence)
            if rows:
                try:
                    session.executemany(_INSERT_EVENT, rows)
                except INTEGRITY_ERRORS as error:
                    seqs = [row["seq"] for row in rows]
                    raise StaleFence(
                        f"transaction {txn_id} already has an event at one of seq {seqs}: "
                        "another writer appended first; reload the record",
                        txn_id=txn_id,
                        fence=fence,
                        current=fence,
                        seq=seqs,
                    ) from error

    def acquire(self, txn_id: str, owner: str, now: datetime, lease_seconds: float) -> int | None:
        """Take the lease on a transaction that no one holds, or whose lease has run out.

        Taking it moves the fence up by one, which fences out every earlier
        holder. A live lease is never taken, not even by its own owner: a
        restarted coordinator cannot tell that its earlier incarnation is
        gone, so it waits for the lease to run out (the holder renews instead).

        Returns:
            The new fence, or ``None`` if the lease is held and live [STORE-LEASE].

        Raises:
            TransactionUnknown: no such transaction.
            StoreUnavailable: the database failed.
        """
        at = to_ms(now)
        # One conditional UPDATE: the database decides the race, not a read
        # followed by a write.
        params = {
            "k_txn_id": txn_id,
            "k_at": at,
            "owner": owner,
            "lease_until": lease_end(now, lease_seconds),
            "updated_at": at,
        }
        with self._store.driver_session() as session:
            won = session.execute(_ACQUIRE, params).first()
            if won is not None:
                return int(won.fence)
            if _current(session, txn_id) is None:
                raise _unknown(txn_id)
            return None

    def renew(
        self, txn_id: str, owner: str, fence: int, now: datetime, lease_seconds: float
    ) -> None:
        """Extend the lease held by ``owner`` under ``fence`` to ``now + lease_seconds``.

        Raises:
            StaleFence: the fence moved or ``owner`` no longer holds the lease [STORE-FENCE].
            TransactionUnknown: no such transaction.
            StoreUnavailable: the database failed.
        """
        params = {
            "k_txn_id": txn_id,
            "k_fence": fence,
            "k_owner": owner,
            "lease_until": lease_end(now, lease_seconds),
        }
        with self._store.driver_session() as session:
            if session.execute(_HOLDER_UPDATE, params).first() is None:
                raise _refusal(session, txn_id, fence)

    def release(self, txn_id: str, owner: str, fence: int) -> None:
        """Give the lease up, so another coordinator may acquire it at once.

        Releasing twice is harmless.

        Raises:
            StaleFence: the fence moved or ``owner`` does not hold the lease [STORE-FENCE].
            TransactionUnknown: no such transaction.
            StoreUnavailable: the database failed.
        """
        params = {
            "k_txn_id": txn_id,
            "k_fence": fence,
            "k_owner": owner,
            "owner": None,
            "lease_until": None,
        }
        with self._store.driver_session() as session:
            if session.execute(_HOLDER_UPDATE, params).first() is not None:
                return
            current = _current(session, txn_id)
            if current is not None and current.fence == fence and current.owner is None:
                return
            raise _refusal(session, txn_id, fence)

    def get(self, txn_id: str) -> TxnRow:
        """Return the transaction's row.

        Raises:
            TransactionUnknown: no such transaction.
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            row = session.execute(_GET, {"txn_id": txn_id}).first()
        if row is None:
            raise _unknown(txn_id)
        return TxnRow._from_row(row)

    def events(self, txn_id: str) -> builtins.list[dict[str, Any]]:
        """Return the transaction's record events, ordered by ``seq``.

        Raises:
            TransactionUnknown: no such transaction.
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            texts = session.execute(_EVENTS, {"txn_id": txn_id}).scalars()
            if not texts and _current(session, txn_id) is None:
                raise _unknown(txn_id)
        return [load_json(text) for text in texts]

    def record(self, txn_id: str) -> dict[str, Any]:
        """Return the transaction's record document as logged so far.

        Returns:
            ``{"hatpVersion", "recordId", "events", "head"}``, read in one transaction.

        Raises:
            TransactionUnknown: no such transaction.
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            head = session.execute(_HEAD, {"txn_id": txn_id}).first()
            if head is None:
                raise _unknown(txn_id)
            texts = session.execute(_EVENTS, {"txn_id": txn_id}).scalars()
        return {
            "hatpVersion": PROTOCOL_VERSION,
            "recordId": txn_id,
            "events": [load_json(text) for text in texts],
            "head": head.head,
        }

    def open_transactions(self) -> builtins.list[str]:
        """Return the ids of transactions not yet committed or aborted, oldest first."""
        with self._store.read_session() as session:
            return session.execute(_OPEN_IDS).scalars()

    def open_by_state(self) -> dict[TxnState, int]:
        """Return how many transactions are open, by state (states with none left out).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            rows = session.execute(_OPEN_BY_STATE).all()
        return {TxnState(state): int(count) for state, count in rows}

    def claimable(self, now: datetime) -> builtins.list[str]:
        """Return the open transactions no one holds a live lease on, oldest first."""
        with self._store.read_session() as session:
            return session.execute(_CLAIMABLE, {"at": to_ms(now)}).scalars()

    def list(
        self, *, limit: int = 50, state: TxnState | None = None, initiator: str | None = None
    ) -> builtins.list[TxnRow]:
        """Return up to ``limit`` transactions, newest first, in ``state`` and with a plan
        whose ``initiator`` is ``initiator``, each if given.

        Raises:
            ValueError: ``limit`` is below 1.
            StoreUnavailable: the database failed.
        """
        if limit < 1:
            raise ValueError(f"limit is at least 1, not {limit}")
        stmt = sa.select(txn).order_by(txn.c.created_at.desc(), txn.c.txn_id.desc()).limit(limit)
        if state is not None:
            stmt = stmt.where(txn.c.state == state.value)
        if initiator is not None:
            # The plan is kept as canonical JSON: its initiator member reads exactly so.
            # The same text nested deeper is told apart below, page by page.
            named = f'"initiator":{dump_json(initiator)}'
            stmt = stmt.where(txn.c.plan.contains(named, autoescape=True))
        found: builtins.list[TxnRow] = []
        page = stmt
        with self._store.read_session() as session:
            while True:
                rows = session.execute(page).all()
                found += [
                    row
                    for row in map(TxnRow._from_row, rows)
                    if initiator is None or row.plan.get("initiator") == initiator
                ]
                if len(rows) < limit or len(found) >= limit:
                    return found[:limit]
                last = rows[-1]
                page = stmt.where(
                    sa.or_(
                        txn.c.created_at < last.created_at,
                        sa.and_(txn.c.created_at == last.created_at, txn.c.txn_id < last.txn_id),
                    )
                )


# Statements are built once and executed with parameters; those the methods
# above run on the driver are compiled once per dialect (hatp.store._driver).
# An UPDATE without .values() sets the columns its parameters name; the WHERE
# clause's parameters are named k_* to keep them apart from those.
_EVENTS = (
    sa.select(record_event.c.event)
    .where(record_event.c.txn_id == sa.bindparam("txn_id"))
    .order_by(record_event.c.seq)
)
_INSERT_EVENT = record_event.insert()
_GET = sa.select(txn).where(txn.c.txn_id == sa.bindparam("txn_id"))
_HEAD = sa.select(txn.c.head).where(txn.c.txn_id == sa.bindparam("txn_id"))
_CURRENT = sa.select(txn.c.fence, txn.c.owner).where(txn.c.txn_id == sa.bindparam("txn_id"))
_FENCED = sa.and_(txn.c.txn_id == sa.bindparam("k_txn_id"), txn.c.fence == sa.bindparam("k_fence"))
_APPEND = sa.update(txn).where(_FENCED).returning(txn.c.fence)
# An append of nothing still checks (and, on PostgreSQL, locks under) the fence.
_CHECK_FENCE = sa.update(txn).where(_FENCED).values(fence=txn.c.fence).returning(txn.c.fence)
_HOLDER_UPDATE = (
    sa.update(txn).where(_FENCED, txn.c.owner == sa.bindparam("k_owner")).returning(txn.c.fence)
)
_ACQUIRE = (
    sa.update(txn)
    .where(
        txn.c.txn_id == sa.bindparam("k_txn_id"),
        sa.or_(
            txn.c.owner.is_(None),
            txn.c.lease_until.is_(None),
            txn.c.lease_until <= sa.bindparam("k_at"),
        ),
    )
    .values(fence=txn.c.fence + 1)
    .returning(txn.c.fence)
)


@functools.cache
def _create_statement(dialect: str) -> sa.Insert:
    return insert_or_ignore(dialect, txn).returning(txn.c.fence)


def _event_rows(
    txn_id: str, events: Sequence[Mapping[str, Any] | WrittenEvent]
) -> builtins.list[dict[str, Any]]:
    rows = []
    for index, event in enumerate(events):
        if isinstance(event, WrittenEvent):  # canonical already: signed so
            rows.append({"txn_id": txn_id, "seq": event.seq, "event": event.canonical.decode()})
            continue
        seq = event.get("seq")
        if type(seq) is not int:
            raise RecordInvalid(
                f"event {index} for transaction {txn_id} has no integer seq",
                txn_id=txn_id,
                where=f"/{index}/seq",
            )
        rows.append({"txn_id": txn_id, "seq": seq, "event": dump_json(event)})
    return rows


def _event_time(event: Mapping[str, Any] | WrittenEvent) -> int | None:
    try:
        time = event.time if isinstance(event, WrittenEvent) else event["time"]
        return to_ms(parse_time(str(time)))
    except (KeyError, ValueError):
        return None


def _current(session: DriverSession, txn_id: str) -> Any:
    return session.execute(_CURRENT, {"txn_id": txn_id}).first()


def _unknown(txn_id: str) -> TransactionUnknown:
    return TransactionUnknown(f"transaction {txn_id} is not in the log", txn_id=txn_id)


def _refusal(session: DriverSession, txn_id: str, fence: int) -> Exception:
    """Why a fenced write matched no row: an unknown transaction or a stale fence."""
    current = _current(session, txn_id)
    if current is None:
        return _unknown(txn_id)
    if current.fence != fence:
        why = f"it is at fence {current.fence}: another coordinator has taken it over"
    else:
        holder = "no one" if current.owner is None else current.owner
        why = f"its lease under that fence is held by {holder}"
    return StaleFence(
        f"fence {fence} for transaction {txn_id} is stale, {why}; stop driving it",
        txn_id=txn_id,
        fence=fence,
        current=current.fence,
    )
