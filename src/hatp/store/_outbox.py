"""The Human Gateway's outbox: notices to people over push channels, kept until sent.

A notice (an ask, an escalation, a withdrawal, a deadline moved, an outcome) to
a person over a push channel (a webhook, an e-mail) is a row written in the
same transaction as the change to the ask that causes it ([OUTBOX-ATOMIC]):
a change stored is a notice stored, and a change not stored sends nothing. A
sender claims due rows for a while ([OUTBOX-CLAIM], so two gateway processes
on one database do not both send one notice at once), sends each, and records
what happened: delivered, try again at a later time, failed for good (the
gateway moves on to the person's next channel), or superseded (the person no
longer needs it). The row's ``notice_id`` is the idempotency key receivers see,
the same on every attempt.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from hatp.store._driver import DriverSession
from hatp.store._engine import Store
from hatp.store._schema import dump_json, from_ms, load_json, outbox, to_ms

__all__ = ["Outbox", "OutboxRow", "OutboxState"]


class OutboxState(StrEnum):
    """Where a notice stands: ``pending`` until it is settled one of the other ways."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # the channel failed for good (or ran out of tries)
    SUPERSEDED = "superseded"  # the person no longer needed it when it was due


@dataclass(frozen=True)
class OutboxRow:
    """One notice in the outbox. ``doc`` is the notice document (docs/spec.md
    [NOTICE-DOC]); ``next_at`` is when it is next due (``None`` once settled)."""

    notice_id: str
    ask_id: str
    human: str
    channel: str
    event: str
    doc: dict[str, Any]
    state: OutboxState = OutboxState.PENDING
    attempts: int = 0
    next_at: datetime | None = None
    last_error: str | None = None
    created_at: datetime | None = None
    settled_at: datetime | None = None
    link_used_at: datetime | None = None

    @classmethod
    def _from_row(cls, row: Any) -> OutboxRow:
        return cls(
            notice_id=row.notice_id,
            ask_id=row.ask_id,
            human=row.human,
            channel=row.channel,
            event=row.event,
            doc=load_json(row.doc),
            state=OutboxState(row.state),
            attempts=row.attempts,
            next_at=_time(row.next_at),
            last_error=row.last_error,
            created_at=_time(row.created_at),
            settled_at=_time(row.settled_at),
            link_used_at=_time(row.link_used_at),
        )


class Outbox:
    """The outbox's rows in a :class:`Store`. Each method is one short transaction,
    except :meth:`add`, which writes into the caller's."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        """The store the outbox is kept in."""
        return self._store

    @staticmethod
    def add(session: DriverSession, rows: Sequence[OutboxRow], now: datetime) -> None:
        """Write ``rows`` as pending, due at once, in the transaction ``session`` has open
        (the ask change's: [OUTBOX-ATOMIC])."""
        at = to_ms(now)
        session.executemany(
            sa.insert(outbox),
            [
                {
                    "notice_id": row.notice_id,
                    "ask_id": row.ask_id,
                    "human": row.human,
                    "channel": row.channel,
                    "event": row.event,
                    "doc": dump_json(row.doc),
                    "state": OutboxState.PENDING.value,
                    "attempts": 0,
                    "next_at": at,
                    "created_at": at,
                }
                for row in rows
            ],
        )

    def claim(self, now: datetime, until: datetime, limit: int) -> builtins.list[OutboxRow]:
        """Claim up to ``limit`` pending notices due by ``now`` that nobody holds a claim on,
        until ``until`` ([OUTBOX-CLAIM]); oldest due first. The attempt is counted now, so a
        sender that dies mid-send still used it.

        Raises:
            StoreUnavailable: the database failed; nothing was claimed.
        """
        at, held = to_ms(now), to_ms(until)
        with self._store.driver_session() as session:
            due = session.execute(_DUE, {"now": at, "limit": limit}).all()
            claimed = []
            for row in due:
                won = session.execute(
                    _CLAIM,
                    {"k_notice_id": row.notice_id, "k_now": at, "held": held},
                ).first()
                if won is not None:
                    claimed.append(OutboxRow._from_row(won))
        return claimed

    def delivered(self, notice_id: str, now: datetime) -> None:
        """Record the notice sent.

        Raises:
            StoreUnavailable: the database failed.
        """
        self._settle(notice_id, OutboxState.DELIVERED, now, None)

    def failed(self, notice_id: str, now: datetime, error: str) -> None:
        """Record the notice failed for good on its channel (``error``: what the channel said).

        Raises:
            StoreUnavailable: the database failed.
        """
        self._settle(notice_id, OutboxState.FAILED, now, error)

    def superseded(self, notice_id: str, now: datetime) -> None:
        """Record the notice no longer needed (its person is no longer waiting on it).

        Raises:
            StoreUnavailable: the database failed.
        """
        self._settle(notice_id, OutboxState.SUPERSEDED, now, None)

    def retry(self, notice_id: str, now: datetime, at: datetime, error: str) -> None:
        """Record a failed attempt, to be tried again at ``at``; the claim is let go.

        Raises:
            StoreUnavailable: the database failed.
        """
        values = {
            "k_notice_id": notice_id,
            "next_at": to_ms(at),
            "claimed_until": None,
            "last_error": error[:1000],
        }
        with self._store.driver_session() as session:
            session.execute(_PENDING_UPDATE, values)
        del now  # the attempt was counted when claimed

    def use_link(self, notice_id: str, now: datetime) -> bool:
        """Spend the notice's single-use link: ``True`` the first time, ``False`` after.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.driver_session() as session:
            won = session.execute(_USE_LINK, {"k_notice_id": notice_id, "used": to_ms(now)}).first()
        return won is not None

    def get(self, notice_id: str) -> OutboxRow | None:
        """The notice, if the outbox has it.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            found = session.execute(_GET, {"notice_id": notice_id}).first()
        return None if found is None else OutboxRow._from_row(found)

    def for_ask(self, ask_id: str) -> builtins.list[OutboxRow]:
        """Every notice about ``ask_id``, in the order written.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            rows = session.execute(_FOR_ASK, {"ask_id": ask_id}).all()
        return [OutboxRow._from_row(row) for row in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        """How many notices there are, by (channel, state).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            rows = session.execute(_COUNTS).all()
        return {(row.channel, row.state): int(row.n) for row in rows}

    def next_due(self) -> datetime | None:
        """When the earliest pending notice is due (``None``: none is pending).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            earliest = session.execute(_NEXT_DUE).scalar()
        return None if earliest is None else from_ms(int(earliest))

    def _settle(self, notice_id: str, state: OutboxState, now: datetime, error: str | None) -> None:
        values: dict[str, Any] = {
            "k_notice_id": notice_id,
            "state": state.value,
            "next_at": None,
            "claimed_until": None,
            "settled_at": to_ms(now),
        }
        if error is not None:
            values["last_error"] = error[:1000]
        with self._store.driver_session() as session:
            session.execute(_PENDING_UPDATE, values)


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(int(ms))


# Built once and executed with parameters; an UPDATE without .values() sets the columns
# its parameters name, the key's named k_*.
_PENDING = outbox.c.state == OutboxState.PENDING.value
_GET = sa.select(outbox).where(outbox.c.notice_id == sa.bindparam("notice_id"))
_FOR_ASK = (
    sa.select(outbox)
    .where(outbox.c.ask_id == sa.bindparam("ask_id"))
    .order_by(outbox.c.created_at, outbox.c.notice_id)
)
_DUE = (
    sa.select(outbox.c.notice_id)
    .where(
        _PENDING,
        outbox.c.next_at <= sa.bindparam("now"),
        sa.or_(outbox.c.claimed_until.is_(None), outbox.c.claimed_until <= sa.bindparam("now")),
    )
    .order_by(outbox.c.next_at, outbox.c.notice_id)
    .limit(sa.bindparam("limit"))
)
# A claim is won only on a row still pending and unclaimed (another process may have
# taken it between the search and here); it counts the attempt.
_CLAIM = (
    sa.update(outbox)
    .where(
        outbox.c.notice_id == sa.bindparam("k_notice_id"),
        _PENDING,
        sa.or_(outbox.c.claimed_until.is_(None), outbox.c.claimed_until <= sa.bindparam("k_now")),
    )
    .values(attempts=outbox.c.attempts + 1, claimed_until=sa.bindparam("held"))
    .returning(*outbox.c)
)
_PENDING_UPDATE = sa.update(outbox).where(
    outbox.c.notice_id == sa.bindparam("k_notice_id"), _PENDING
)
_USE_LINK = (
    sa.update(outbox)
    .where(outbox.c.notice_id == sa.bindparam("k_notice_id"), outbox.c.link_used_at.is_(None))
    .values(link_used_at=sa.bindparam("used"))
    .returning(outbox.c.notice_id)
)
_COUNTS = sa.select(outbox.c.channel, outbox.c.state, sa.func.count().label("n")).group_by(
    outbox.c.channel, outbox.c.state
)
_NEXT_DUE = sa.select(sa.func.min(outbox.c.next_at)).where(_PENDING)
