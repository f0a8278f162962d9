"""The Human Gateway's passkey bookkeeping: used nonces and each passkey's sign count.

The gateway issues a nonce to each person it asks with a passkey on their
card (kept in the ask's own state, :class:`~hatp.store.AskStore`); a vote's
passkey assertion signs over it. When the gateway records such a vote it
spends the nonce here, in the same transaction as the ask's update
([STORE-PASSKEY-NONCE]): ``hatp_passkey_nonce`` holds one row per nonce
ever used, its primary key the nonce, so a nonce is spent once, by one vote,
whatever the number of gateway processes. ``hatp_passkey_count`` keeps the
highest sign count each passkey reported, moved only upward in that same
transaction ([STORE-PASSKEY-COUNT]), so a cloned authenticator's assertion
with a count already seen is refused.

Methods named ``*_txn`` run inside the caller's transaction; the others are
a short transaction of their own.
"""

from __future__ import annotations

import functools
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from hatp.errors import PasskeyInvalid
from hatp.store._engine import Store, dialect_insert, insert_or_ignore
from hatp.store._schema import metadata, to_ms

__all__ = ["PasskeyBook"]

#: Every passkey nonce a vote spent, and the vote (its digest) that spent it.
passkey_nonce = sa.Table(
    "hatp_passkey_nonce",
    metadata,
    sa.Column("nonce", sa.Text, primary_key=True),
    sa.Column("ask_id", sa.Text, nullable=False),
    sa.Column("human", sa.Text, nullable=False),
    sa.Column("vote_digest", sa.Text, nullable=False),
    sa.Column("used_at", sa.BigInteger, nullable=False),  # ms
)

#: The highest sign count each passkey (a person's credential) reported.
passkey_count = sa.Table(
    "hatp_passkey_count",
    metadata,
    sa.Column("human", sa.Text, primary_key=True),
    sa.Column("credential_id", sa.Text, primary_key=True),
    sa.Column("sign_count", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),  # ms
)


class PasskeyBook:
    """The gateway's used nonces and sign counts, kept in a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        """The store the book is kept in (the asks' store, so both change in one transaction)."""
        return self._store

    def is_used(self, nonce: str) -> bool:
        """Whether a vote has spent ``nonce``.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            return conn.execute(_NONCE, {"nonce": nonce}).first() is not None

    def sign_count(self, human: str, credential_id: str) -> int:
        """The highest sign count ``human``'s passkey ``credential_id`` reported (0: none yet).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            return _count(conn, human, credential_id)

    def use_nonce_txn(
        self,
        conn: Connection,
        nonce: str,
        *,
        ask_id: str,
        human: str,
        vote_digest: str,
        now: datetime,
    ) -> None:
        """Spend ``nonce`` for ``human``'s vote (digest ``vote_digest``) on ``ask_id``, inside
        the caller's transaction. Spending it again for the very same vote is a no-op (a
        retried write); for anything else it is refused.

        Raises:
            PasskeyInvalid: reason ``NONCE_USED``; roll the transaction back.
        """
        values = {
            "nonce": nonce,
            "ask_id": ask_id,
            "human": human,
            "vote_digest": vote_digest,
            "used_at": to_ms(now),
        }
        conn.execute(insert_or_ignore(conn.dialect.name, passkey_nonce), values)
        row = conn.execute(_NONCE, {"nonce": nonce}).first()
        if row is None or (row.ask_id, row.human, row.vote_digest) != (
            ask_id,
            human,
            vote_digest,
        ):
            raise PasskeyInvalid(
                f"nonce {nonce} was spent already by another vote; a passkey assertion counts once",
                reason="NONCE_USED",
                nonce=nonce,
            )

    def advance_count_txn(
        self, conn: Connection, human: str, credential_id: str, count: int, now: datetime
    ) -> None:
        """Record that ``human``'s passkey reported sign count ``count``, inside the
        caller's transaction. A count of 0 (a passkey that does not count) is taken
        while none above 0 was seen.

        Raises:
            PasskeyInvalid: reason ``SIGN_COUNT``: a count at least as high was
                recorded meanwhile; roll the transaction back.
        """
        if count == 0:
            seen = _count(conn, human, credential_id)
            if seen == 0:
                return
            raise _count_refused(human, count, seen)
        params = {"k_human": human, "k_credential_id": credential_id, "new": count}
        if conn.execute(_ADVANCE, {**params, "at": to_ms(now)}).first() is not None:
            return
        values = {
            "human": human,
            "credential_id": credential_id,
            "sign_count": count,
            "updated_at": to_ms(now),
        }
        # RETURNING, not rowcount: psycopg reports no count for ON CONFLICT DO NOTHING.
        if conn.execute(_first_count(conn.dialect.name), values).first() is not None:
            return
        raise _count_refused(human, count, _count(conn, human, credential_id))


def _count(conn: Connection, human: str, credential_id: str) -> int:
    found = conn.execute(_COUNT, {"human": human, "credential_id": credential_id}).scalar()
    return 0 if found is None else int(found)


def _count_refused(human: str, count: int, seen: int) -> PasskeyInvalid:
    return PasskeyInvalid(
        f"{human}'s passkey reported sign count {count}, but {seen} was seen already: "
        "the assertion is replayed, or the authenticator was cloned",
        reason="SIGN_COUNT",
        human=human,
    )


_NONCE = sa.select(passkey_nonce).where(passkey_nonce.c.nonce == sa.bindparam("nonce"))
_COUNT = sa.select(passkey_count.c.sign_count).where(
    passkey_count.c.human == sa.bindparam("human"),
    passkey_count.c.credential_id == sa.bindparam("credential_id"),
)
_ADVANCE = (
    sa.update(passkey_count)
    .where(
        passkey_count.c.human == sa.bindparam("k_human"),
        passkey_count.c.credential_id == sa.bindparam("k_credential_id"),
        passkey_count.c.sign_count < sa.bindparam("new"),
    )
    .values(sign_count=sa.bindparam("new"), updated_at=sa.bindparam("at"))
    .returning(passkey_count.c.sign_count)
)


@functools.cache
def _first_count(dialect: str) -> sa.Insert:
    """The first sign count of a passkey, unless another was stored meanwhile."""
    return (
        dialect_insert(dialect, passkey_count)
        .on_conflict_do_nothing()
        .returning(passkey_count.c.sign_count)
    )
