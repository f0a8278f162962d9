"""Approver sessions: a person signs in to the approver page with their passkey.

Who answers an ask on the web comes from authentication, never from a field
the page or the agent fills (invariant 2). A person signs in with a passkey
on their Human Card: the gateway issues a random challenge
(:meth:`ApproverSessions.sign_in_options`), the browser's authenticator signs
it with user verification, and :meth:`~ApproverSessions.sign_in` checks the
assertion against the card that holds the credential
(:func:`hatp.evidence.verify_assertion`: client data, origin, rpId, UP, UV,
sign count, ES256) — [GW-SIGN-IN] — then, in one database transaction,
spends the challenge ([GW-SIGN-IN-CHALLENGE]: issued here, unexpired, never
used), keeps the passkey's sign count and opens a session. The session's
token (the cookie) is returned once; the store keeps only its digest.
:meth:`~ApproverSessions.session` names the person behind a token until the
session expires or they sign out.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from webauthn import generate_authentication_options, options_to_json
from webauthn.helpers.structs import UserVerificationRequirement

from hatp import _checks
from hatp.clock import Clock
from hatp.directory import CardSource
from hatp.errors import PasskeyInvalid, SignInRefused, Unauthenticated
from hatp.evidence import client_challenge, page_origins, verify_assertion
from hatp.evidence._b64 import b64url_encode
from hatp.store import ChallengePurpose, PasskeyBook, WebBook, WebSession, token_digest

__all__ = ["ApproverSessions", "SignedIn"]

#: How long a session lasts by default.
SESSION_LIFETIME = timedelta(hours=8)
#: How long a sign-in challenge is good for.
CHALLENGE_LIFETIME = timedelta(minutes=5)
#: Random bytes in a challenge and in a session's token.
TOKEN_BYTES = 32


@dataclass(frozen=True)
class SignedIn:
    """A session just opened: its token (hand it to the browser, once) and what it is."""

    token: str
    session: WebSession


class ApproverSessions:
    """Passkey sign-in and sessions for the people of ``directory``.

    ``book`` keeps challenges and sessions, ``passkeys`` each passkey's sign
    count (the gateway's own, so a vote and a sign-in count on one counter):
    both on the gateway's store. ``rp_id`` is the relying party of the
    passkeys; ``origins`` the pages a sign-in may come from.
    """

    def __init__(
        self,
        directory: CardSource,
        book: WebBook,
        passkeys: PasskeyBook,
        clock: Clock,
        *,
        rp_id: str,
        origins: Sequence[str],
        lifetime: timedelta = SESSION_LIFETIME,
    ) -> None:
        """Raises:
        ValueError: no origins, one that cannot use passkeys of ``rp_id``, the books
            on two stores, or a lifetime that is not positive.
        """
        checked = page_origins(rp_id, origins)
        if book.store is not passkeys.store:
            raise ValueError("sessions and sign counts are kept in one store: the gateway's")
        if lifetime <= timedelta(0):
            raise ValueError("a session lasts some time: give a positive lifetime")
        self._directory = directory
        self._book = book
        self._passkeys = passkeys
        self._clock = clock
        self._rp_id = rp_id
        self._origins = checked
        self._lifetime = lifetime

    @property
    def rp_id(self) -> str:
        """The relying party of the passkeys people sign in with."""
        return self._rp_id

    @property
    def origins(self) -> tuple[str, ...]:
        """The origins the approver pages are served on."""
        return self._origins

    def sign_in_options(self) -> dict[str, Any]:
        """Return WebAuthn request options for a sign-in
        (``PublicKeyCredentialRequestOptionsJSON``): a fresh challenge, kept for five
        minutes; any passkey of this rpId (the credential names its person); user
        verification required. Challenges and sessions that ended are deleted first
        (:meth:`~hatp.store.WebBook.prune`), so neither table grows without end.

        Raises:
            StoreUnavailable: the store failed.
        """
        now = self._clock.now()
        self._book.prune(now)
        challenge = secrets.token_bytes(TOKEN_BYTES)
        options = generate_authentication_options(
            rp_id=self._rp_id,
            challenge=challenge,
            user_verification=UserVerificationRequirement.REQUIRED,
        )
        self._book.issue_challenge(
            b64url_encode(challenge),
            ChallengePurpose.SIGN_IN,
            "",
            now + CHALLENGE_LIFETIME,
        )
        doc: dict[str, Any] = json.loads(options_to_json(options))
        return doc

    def sign_in(self, credential: Mapping[str, Any]) -> SignedIn:
        """Check the browser's assertion over a sign-in challenge and open a session for
        the person whose card holds the passkey.

        Raises:
            SignInRefused: ``data.reason``: ``SHAPE``, ``KEY_UNKNOWN`` (no card holds
                the credential), ``KEY_AMBIGUOUS`` (several people's cards do), ``TYPE``,
                ``ORIGIN``, ``RP_ID``, ``USER_PRESENCE``,
                ``USER_VERIFICATION``, ``SIGN_COUNT``, ``SIGNATURE`` ([GW-SIGN-IN]), or
                ``CHALLENGE`` (not one issued here, expired, or used:
                [GW-SIGN-IN-CHALLENGE]); no session was opened.
            StoreUnavailable: the store failed; no session was opened.
        """
        try:
            challenge = client_challenge(credential)
            if _checks.is_on("GW-SIGN-IN"):
                card, verified = verify_assertion(
                    credential,
                    self._directory.cards(),
                    challenge=challenge,
                    origins=self._origins,
                    sign_count=self._passkeys.sign_count,
                )
                human, credential_id, count = card.id, verified.credential_id, verified.sign_count
            else:
                human, credential_id, count = _claimed(credential, self._directory)
        except PasskeyInvalid as exc:
            raise _refused(exc.reason, exc.message) from None
        now = self._clock.now()
        token = secrets.token_urlsafe(TOKEN_BYTES)
        session = WebSession(human, credential_id, now, now + self._lifetime)
        with self._book.store.transaction() as conn:
            spent = self._book.spend_challenge_txn(
                conn, b64url_encode(challenge), ChallengePurpose.SIGN_IN, now
            )
            if spent is None and _checks.is_on("GW-SIGN-IN-CHALLENGE"):
                raise _refused(
                    "CHALLENGE",
                    "the passkey signed a challenge this gateway did not issue for a sign-in, "
                    "or one already used or expired: sign in again from the page",
                )
            try:
                self._passkeys.advance_count_txn(conn, human, credential_id, count, now)
            except PasskeyInvalid as exc:
                raise _refused(exc.reason, exc.message) from None
            self._book.open_session_txn(conn, token_digest(token), session)
        return SignedIn(token, session)

    def session(self, token: str | None) -> WebSession:
        """Return the live session ``token`` opened.

        Raises:
            Unauthenticated: no token, or its session expired or was signed out
                (``data.reason``: ``NO_SESSION`` or ``ENDED``): sign in again.
            StoreUnavailable: the store failed.
        """
        if not token:
            raise Unauthenticated(
                "sign in with your passkey first: this needs to know who you are",
                reason="NO_SESSION",
            )
        found = self._book.session(token_digest(token), self._clock.now())
        if found is None:
            raise Unauthenticated(
                "your session has expired or was signed out: sign in again with your passkey",
                reason="ENDED",
            )
        return found

    def sign_out(self, token: str | None) -> bool:
        """End the session ``token`` opened; return whether a live one was ended.

        Raises:
            StoreUnavailable: the store failed.
        """
        if not token:
            return False
        return self._book.end_session(token_digest(token), self._clock.now())


def _claimed(credential: Mapping[str, Any], directory: CardSource) -> tuple[str, str, int]:
    """With [GW-SIGN-IN] switched off (planted-violation tests only): whoever's card holds
    the credential the response names, unverified."""
    credential_id = credential.get("id")
    for card in directory.cards():
        for key in card.keys:
            if getattr(key, "credential_id", None) == credential_id:
                return card.id, str(credential_id), 0
    raise PasskeyInvalid("no card holds this credential", reason="KEY_UNKNOWN")


def _refused(reason: str, message: str) -> SignInRefused:
    return SignInRefused(f"sign-in refused: {message}", reason=reason)
