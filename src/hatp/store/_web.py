"""The approver page's bookkeeping: WebAuthn challenges, sessions and invitations.

A person signs in to the approver page with their passkey: the gateway
issues a random challenge, kept here until it is spent once, within its
lifetime ([STORE-WEB-CHALLENGE]); a verified assertion over it opens a
session, of which only the digest of its token is kept, so reading the
database does not let anyone sign in ([STORE-WEB-SESSION]). An invitation
lets one person register one passkey onto their card; it is kept the same
way, by the digest of its token, and used once ([STORE-WEB-INVITE]).

Every table is keyed so that two gateway processes on one database spend a
challenge once and use an invitation once. Methods named ``*_txn`` run
inside the caller's transaction; the others are a short transaction of
their own.
"""

from __future__ import annotations

import builtins
import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy import Connection

from hatp.store._engine import Store
from hatp.store._schema import AnyRow, from_ms, metadata, to_ms

__all__ = ["ChallengePurpose", "WebBook", "WebInvite", "WebSession", "token_digest"]


def token_digest(token: str) -> str:
    """The digest a session's or an invitation's token is kept under (hex SHA-256)."""
    return hashlib.sha256(token.encode()).hexdigest()


class ChallengePurpose(StrEnum):
    """What a WebAuthn challenge was issued for: a sign-in, or a passkey's registration."""

    SIGN_IN = "sign-in"
    ENROL = "enrol"


#: Every challenge issued and not yet pruned; ``used_at`` is set when it is spent.
web_challenge = sa.Table(
    "hatp_web_challenge",
    metadata,
    sa.Column("challenge", sa.Text, primary_key=True),  # base64url of the random bytes
    sa.Column("purpose", sa.Text, nullable=False),  # a ChallengePurpose value
    sa.Column("subject", sa.Text, nullable=False),  # the invitation's digest; "" to sign in
    sa.Column("expires_at", sa.BigInteger, nullable=False),  # ms
    sa.Column("used_at", sa.BigInteger, nullable=True),  # ms
)

#: Approver sessions, by the digest of their token (the cookie's value).
web_session = sa.Table(
    "hatp_web_session",
    metadata,
    sa.Column("token_digest", sa.Text, primary_key=True),
    sa.Column("human", sa.Text, nullable=False),
    sa.Column("credential_id", sa.Text, nullable=False),  # the passkey that signed in
    sa.Column("created_at", sa.BigInteger, nullable=False),  # ms
    sa.Column("expires_at", sa.BigInteger, nullable=False),  # ms
    sa.Column("ended_at", sa.BigInteger, nullable=True),  # ms: signed out
)

#: Invitations to register a passkey onto a card, by the digest of their token.
web_invite = sa.Table(
    "hatp_web_invite",
    metadata,
    sa.Column("token_digest", sa.Text, primary_key=True),
    sa.Column("human", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),  # ms
    sa.Column("expires_at", sa.BigInteger, nullable=False),  # ms
    sa.Column("used_at", sa.BigInteger, nullable=True),  # ms
    sa.Column("kid", sa.Text, nullable=True),  # the passkey it registered
)


@dataclass(frozen=True)
class WebSession:
    """A live approver session: who signed in, with which passkey, until when."""

    human: str
    credential_id: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class WebInvite:
    """An invitation as stored: whom it is for, until when, and whether it was used."""

    human: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    kid: str | None

    @classmethod
    def _from_row(cls, row: AnyRow) -> WebInvite:
        return cls(
            human=row.human,
            created_at=from_ms(row.created_at),
            expires_at=from_ms(row.expires_at),
            used_at=None if row.used_at is None else from_ms(row.used_at),
            kid=row.kid,
        )


class WebBook:
    """The approver page's challenges, sessions and invitations, kept in a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        """The store the book is kept in (the asks' store)."""
        return self._store

    # -- challenges ------------------------------------------------------

    def issue_challenge(
        self, challenge: str, purpose: ChallengePurpose, subject: str, expires_at: datetime
    ) -> None:
        """Keep ``challenge`` (base64url) for ``purpose`` until ``expires_at``.

        Raises:
            StoreUnavailable: the database failed.
        """
        values = {
            "challenge": challenge,
            "purpose": purpose.value,
            "subject": subject,
            "expires_at": to_ms(expires_at),
            "used_at": None,
        }
        with self._store.transaction() as conn:
            conn.execute(sa.insert(web_challenge), values)

    def spend_challenge_txn(
        self, conn: Connection, challenge: str, purpose: ChallengePurpose, now: datetime
    ) -> str | None:
        """Spend ``challenge`` inside the caller's transaction; return the subject it was
        issued for, or ``None`` if it is unknown, of another purpose, expired or spent
        already (a challenge is spent once). [STORE-WEB-CHALLENGE]"""
        params = {"k_challenge": challenge, "k_purpose": purpose.value, "now": to_ms(now)}
        subject = conn.execute(_SPEND, params).scalar()
        return None if subject is None else str(subject)

    # -- sessions --------------------------------------------------------

    def open_session_txn(
        self,
        conn: Connection,
        token_digest: str,
        session: WebSession,
    ) -> None:
        """Store a new session under the digest of its token, in the caller's transaction.
        [STORE-WEB-SESSION]"""
        values = {
            "token_digest": token_digest,
            "human": session.human,
            "credential_id": session.credential_id,
            "created_at": to_ms(session.created_at),
            "expires_at": to_ms(session.expires_at),
            "ended_at": None,
        }
        conn.execute(sa.insert(web_session), values)

    def session(self, token_digest: str, now: datetime) -> WebSession | None:
        """Return the session with this token digest if it is live at ``now`` (not
        expired, not ended), else ``None``.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            row = conn.execute(_LIVE_SESSION, {"token_digest": token_digest, "now": to_ms(now)})
            found = row.first()
        if found is None:
            return None
        return WebSession(
            found.human,
            found.credential_id,
            from_ms(found.created_at),
            from_ms(found.expires_at),
        )

    def end_session(self, token_digest: str, now: datetime) -> bool:
        """End the session with this token digest; return whether a live one was ended.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            params = {"k_token_digest": token_digest, "now": to_ms(now)}
            ended = conn.execute(_END_SESSION, params)
            return ended.first() is not None

    # -- invitations -----------------------------------------------------

    def invite(self, token_digest: str, human: str, *, expires_at: datetime, now: datetime) -> None:
        """Keep an invitation for ``human`` under the digest of its token.

        Raises:
            StoreUnavailable: the database failed.
        """
        values = {
            "token_digest": token_digest,
            "human": human,
            "created_at": to_ms(now),
            "expires_at": to_ms(expires_at),
            "used_at": None,
            "kid": None,
        }
        with self._store.transaction() as conn:
            conn.execute(sa.insert(web_invite), values)

    def invite_of(self, token_digest: str) -> WebInvite | None:
        """Return the invitation with this token digest, used or not (``None``: unknown).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            found = conn.execute(_INVITE, {"token_digest": token_digest}).first()
        return None if found is None else WebInvite._from_row(found)

    def use_invite_txn(self, conn: Connection, token_digest: str, kid: str, now: datetime) -> bool:
        """Mark the invitation used for passkey ``kid``, inside the caller's transaction;
        return ``False`` if it was used (or expired) meanwhile. [STORE-WEB-INVITE]"""
        params = {"k_token_digest": token_digest, "v_kid": kid, "now": to_ms(now)}
        return conn.execute(_USE_INVITE, params).first() is not None

    def invites(self, human: str) -> builtins.list[WebInvite]:
        """Return every invitation issued for ``human``, oldest first.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            rows = conn.execute(_INVITES, {"human": human}).all()
        return [WebInvite._from_row(row) for row in rows]

    # -- housekeeping ----------------------------------------------------

    def prune(self, now: datetime) -> int:
        """Delete challenges and sessions that ended before ``now``; return how many.

        Raises:
            StoreUnavailable: the database failed.
        """
        at = {"now": to_ms(now)}
        with self._store.transaction() as conn:
            gone = conn.execute(_PRUNE_CHALLENGES, at).rowcount or 0
            gone += conn.execute(_PRUNE_SESSIONS, at).rowcount or 0
        return int(gone)


# Built once and executed with parameters (see _log.py).
_SPEND = (
    sa.update(web_challenge)
    .where(
        web_challenge.c.challenge == sa.bindparam("k_challenge"),
        web_challenge.c.purpose == sa.bindparam("k_purpose"),
        web_challenge.c.used_at.is_(None),
        web_challenge.c.expires_at > sa.bindparam("now"),
    )
    .values(used_at=sa.bindparam("now"))
    .returning(web_challenge.c.subject)
)
_LIVE_SESSION = sa.select(web_session).where(
    web_session.c.token_digest == sa.bindparam("token_digest"),
    web_session.c.ended_at.is_(None),
    web_session.c.expires_at > sa.bindparam("now"),
)
_END_SESSION = (
    sa.update(web_session)
    .where(
        web_session.c.token_digest == sa.bindparam("k_token_digest"),
        web_session.c.ended_at.is_(None),
        web_session.c.expires_at > sa.bindparam("now"),
    )
    .values(ended_at=sa.bindparam("now"))
    .returning(web_session.c.human)
)
_INVITE = sa.select(web_invite).where(web_invite.c.token_digest == sa.bindparam("token_digest"))
_INVITES = (
    sa.select(web_invite)
    .where(web_invite.c.human == sa.bindparam("human"))
    .order_by(web_invite.c.created_at)
)
_USE_INVITE = (
    sa.update(web_invite)
    .where(
        web_invite.c.token_digest == sa.bindparam("k_token_digest"),
        web_invite.c.used_at.is_(None),
        web_invite.c.expires_at > sa.bindparam("now"),
    )
    .values(used_at=sa.bindparam("now"), kid=sa.bindparam("v_kid"))
    .returning(web_invite.c.human)
)
_PRUNE_CHALLENGES = sa.delete(web_challenge).where(
    web_challenge.c.expires_at <= sa.bindparam("now")
)
_PRUNE_SESSIONS = sa.delete(web_session).where(
    sa.or_(
        web_session.c.expires_at <= sa.bindparam("now"),
        web_session.c.ended_at.is_not(None),
    )
)
