"""The Human Gateway's durable asks: one row per ask, holding its whole state.

An ask is one approval group of one plan, or one question. Its row keeps
what the gateway needs to go on after a restart (the request, whom it asked
and when, the votes, the final result) as canonical JSON in ``doc``, plus
the few columns the gateway searches by. Every update names the version it
read and is refused if the row moved on since ([STORE-ASK-VERSION]), so two
gateway processes on one database never both decide the same ask.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from hatp.errors import AskConflict, AskUnknown
from hatp.store._changes import announce
from hatp.store._driver import DriverSession
from hatp.store._engine import Store, insert_or_ignore
from hatp.store._outbox import Outbox, OutboxRow
from hatp.store._schema import ask, dump_json, from_ms, load_json, to_ms

__all__ = ["AskKind", "AskRow", "AskState", "AskStore"]


class AskKind(StrEnum):
    """What an ask is about."""

    APPROVAL = "approval"
    QUESTION = "question"
    CALL = "call"


class AskState(StrEnum):
    """Where an ask stands: ``open`` until decided (or answered) or withdrawn."""

    OPEN = "open"
    DECIDED = "decided"
    WITHDRAWN = "withdrawn"


@dataclass(frozen=True)
class AskRow:
    """One ask as the store holds it; change it with ``dataclasses.replace``.

    ``txn_id``, ``group_id`` and ``plan_digest`` name what was asked: for a
    question they are the question's id, ``"question"`` and its digest.
    ``next_due`` is when the gateway must next look at the ask (a person's
    SLA or the deadline), ``None`` once it is closed. ``version`` is the
    version read; :meth:`AskStore.update` refuses the row if it moved on.
    """

    ask_id: str
    kind: AskKind
    txn_id: str
    group_id: str
    plan_digest: str
    state: AskState
    decide_by: datetime
    next_due: datetime | None
    doc: dict[str, Any]
    version: int = 1

    @property
    def is_open(self) -> bool:
        """Whether the ask is still waiting for people."""
        return self.state is AskState.OPEN

    @classmethod
    def _from_row(cls, row: Any) -> AskRow:
        return cls(
            ask_id=row.ask_id,
            kind=AskKind(row.kind),
            txn_id=row.txn_id,
            group_id=row.group_id,
            plan_digest=row.plan_digest,
            state=AskState(row.state),
            decide_by=from_ms(row.decide_by),
            next_due=None if row.next_due is None else from_ms(row.next_due),
            doc=load_json(row.doc),
            version=row.version,
        )


class AskStore:
    """The gateway's asks, kept in a :class:`Store`. Each method is one short transaction."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        """The store the asks are kept in."""
        return self._store

    def create(self, row: AskRow, now: datetime, *, notices: Sequence[OutboxRow] = ()) -> AskRow:
        """Store a new ask, or return the one already stored for the same subject.

        The subject is (``kind``, ``txn_id``, ``group_id``, ``plan_digest``):
        asking about the same group of the same plan twice, from any number of
        gateway processes, leaves one ask ([GW-ASK-ONCE]). Compare the
        returned ``ask_id`` with ``row.ask_id`` to tell which happened.
        ``notices`` go into the outbox in the same transaction, if the ask is this one
        ([OUTBOX-ATOMIC]).

        Raises:
            AskConflict: ``row.ask_id`` is taken by an ask about something else.
            StoreUnavailable: the database failed; nothing was written.
        """
        at = to_ms(now)
        values = {**_values(replace(row, version=1)), "created_at": at, "updated_at": at}
        with self._store.driver_session() as session:
            session.execute(insert_or_ignore(session.dialect, ask), values)
            found = session.execute(_BY_SUBJECT, _subject(row)).first()
            if notices and found is not None and found.ask_id == row.ask_id:
                Outbox.add(session, notices, now)
            announce(session, row.ask_id)
        if found is None:
            raise AskConflict(
                f"ask id {row.ask_id} is already used for another ask; choose a new id",
                ask_id=row.ask_id,
            )
        return AskRow._from_row(found)

    def get(self, ask_id: str) -> AskRow:
        """Return the ask.

        Raises:
            AskUnknown: no ask has this id.
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            found = session.execute(_GET, {"ask_id": ask_id}).first()
        if found is None:
            raise AskUnknown(
                f"no ask {ask_id} at this gateway; use the askId its pending vote named",
                ask_id=ask_id,
            )
        return AskRow._from_row(found)

    def find(self, kind: AskKind, txn_id: str, group_id: str, plan_digest: str) -> AskRow | None:
        """Return the ask about this subject, if there is one.

        Raises:
            StoreUnavailable: the database failed.
        """
        params = {"kind": kind.value, "txn_id": txn_id, "group_id": group_id}
        with self._store.read_session() as session:
            found = session.execute(_BY_SUBJECT, {**params, "plan_digest": plan_digest}).first()
        return None if found is None else AskRow._from_row(found)

    def update(
        self,
        row: AskRow,
        now: datetime,
        *,
        also: Callable[[Connection], None] | None = None,
        notices: Sequence[OutboxRow] = (),
    ) -> AskRow:
        """Write ``row``'s state, ``next_due``, ``decide_by`` (a tighten moves it earlier)
        and ``doc`` if the stored ask is still at
        ``row.version``; return the row as stored (its version one higher).

        ``also`` runs in the same transaction once the row is written (the
        passkey bookkeeping of a vote, :class:`~hatp.store.PasskeyBook`): if it
        raises, nothing is written and its error passes through. ``notices`` go into
        the outbox in the same transaction ([OUTBOX-ATOMIC]).

        Raises:
            AskConflict: the ask was updated since ``row`` was read (another
                gateway process got there first); nothing was written. Read it
                again and redo the change on what is there now.
            AskUnknown: no ask has this id.
            StoreUnavailable: the database failed; nothing was written.
        """
        params = {
            "k_ask_id": row.ask_id,
            "k_version": row.version,
            "state": row.state.value,
            "next_due": None if row.next_due is None else to_ms(row.next_due),
            "decide_by": to_ms(row.decide_by),
            "doc": dump_json(row.doc),
            "version": row.version + 1,
            "updated_at": to_ms(now),
        }
        with self._session(also) as (session, conn):
            won = session.execute(_UPDATE, params).first()
            if won is None:
                current = session.execute(_GET, {"ask_id": row.ask_id}).first()
            else:
                if also is not None and conn is not None:
                    also(conn)
                if notices:
                    Outbox.add(session, notices, now)
                announce(session, row.ask_id)  # other processes' waiters wake at the commit
        if won is not None:
            return replace(row, version=row.version + 1)
        if current is None:
            return self.get(row.ask_id)  # raises AskUnknown
        raise AskConflict(
            f"ask {row.ask_id} moved from version {row.version} to {current.version} "
            "while this change was made; read it again and redo the change",
            ask_id=row.ask_id,
            expected=row.version,
            current=current.version,
        )

    @contextmanager
    def _session(
        self, also: Callable[[Connection], None] | None
    ) -> Iterator[tuple[DriverSession, Connection | None]]:
        """A transaction for the ask's own statements, on the driver; a Core one when
        ``also`` (Core code) runs in it too."""
        if also is None:
            with self._store.driver_session() as session:
                yield session, None
            return
        with self._store.transaction() as conn:
            yield DriverSession.of(conn), conn

    def open_asks(self) -> builtins.list[AskRow]:
        """Return every open ask, oldest first.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            rows = session.execute(_OPEN).all()
        return [AskRow._from_row(row) for row in rows]

    def open_for(self, kind: AskKind, txn_id: str) -> builtins.list[str]:
        """Return the ids of the open asks of ``kind`` about ``txn_id``, oldest first.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            return session.execute(_OPEN_FOR, {"kind": kind.value, "txn_id": txn_id}).scalars()

    def due(self, now: datetime) -> builtins.list[AskRow]:
        """Return the open asks whose ``next_due`` is at or before ``now``, soonest first.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            rows = session.execute(_DUE, {"now": to_ms(now)}).all()
        return [AskRow._from_row(row) for row in rows]

    def next_due(self) -> datetime | None:
        """Return the earliest ``next_due`` of any open ask (``None``: nothing to wait for).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            earliest = session.execute(_NEXT_DUE).scalar()
        return None if earliest is None else from_ms(int(earliest))


def _values(row: AskRow) -> dict[str, Any]:
    return {
        "ask_id": row.ask_id,
        "kind": row.kind.value,
        "txn_id": row.txn_id,
        "group_id": row.group_id,
        "plan_digest": row.plan_digest,
        "state": row.state.value,
        "decide_by": to_ms(row.decide_by),
        "next_due": None if row.next_due is None else to_ms(row.next_due),
        "doc": dump_json(row.doc),
        "version": row.version,
    }


def _subject(row: AskRow) -> dict[str, str]:
    return {
        "kind": row.kind.value,
        "txn_id": row.txn_id,
        "group_id": row.group_id,
        "plan_digest": row.plan_digest,
    }


# Built once and executed with parameters (see _log.py); the hot ones run on the
# driver. An UPDATE without .values() sets the columns its parameters name; the
# key's are named k_*.
_GET = sa.select(ask).where(ask.c.ask_id == sa.bindparam("ask_id"))
_BY_SUBJECT = sa.select(ask).where(
    ask.c.kind == sa.bindparam("kind"),
    ask.c.txn_id == sa.bindparam("txn_id"),
    ask.c.group_id == sa.bindparam("group_id"),
    ask.c.plan_digest == sa.bindparam("plan_digest"),
)
_UPDATE = (
    sa.update(ask)
    .where(ask.c.ask_id == sa.bindparam("k_ask_id"), ask.c.version == sa.bindparam("k_version"))
    .returning(ask.c.version)
)
_IS_OPEN = ask.c.state == AskState.OPEN.value
_OPEN = sa.select(ask).where(_IS_OPEN).order_by(ask.c.created_at, ask.c.ask_id)
_OPEN_FOR = (
    sa.select(ask.c.ask_id)
    .where(_IS_OPEN, ask.c.kind == sa.bindparam("kind"), ask.c.txn_id == sa.bindparam("txn_id"))
    .order_by(ask.c.created_at, ask.c.ask_id)
)
_DUE = (
    sa.select(ask)
    .where(_IS_OPEN, ask.c.next_due <= sa.bindparam("now"))
    .order_by(ask.c.next_due, ask.c.ask_id)
)
_NEXT_DUE = sa.select(sa.func.min(ask.c.next_due)).where(_IS_OPEN)
