"""Invitations to register a passkey, and registering one onto its person's card.

Someone who runs the directory invites a person (:meth:`PasskeyEnrolment.invite`):
the invitation is a random token, handed to that person alone (a link), of
which only the digest is stored ([STORE-WEB-INVITE]). With it, the person's
browser asks for creation options (:meth:`~PasskeyEnrolment.options`, a fresh
challenge kept for this invitation) and creates a passkey; the response is
verified by :func:`~hatp.directory.register_passkey` (challenge, origin,
rpId, user presence and verification, ES256 on P-256), the passkey is put on
the card and the card signed again by the directory's key
(:func:`~hatp.directory.add_passkey`); then, in one database transaction,
the challenge is spent and the invitation used. Only after that does the
directory hold the new card ([DIR-ENROL]).

Nobody signs in to register: the invitation is the authority, it names the
person, and it works once, so a passkey never lands on a card other than the
one it was issued for.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from webauthn import generate_registration_options, options_to_json
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from hatp import _checks
from hatp.clock import Clock
from hatp.directory._directory import Directory
from hatp.directory._passkeys import add_passkey, register_passkey
from hatp.errors import CardInvalid, CardUnknown, InviteInvalid, PasskeyInvalid
from hatp.evidence import Keyring, SigningKey, client_challenge, page_origins
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.model import HumanCard, WebAuthnKey
from hatp.store import ChallengePurpose, WebBook, WebInvite, token_digest

__all__ = ["PasskeyEnrolment", "user_handle"]

#: How long an invitation is good for by default.
INVITE_LIFETIME = timedelta(days=1)
#: How long a registration challenge is good for.
CHALLENGE_LIFETIME = timedelta(minutes=5)
#: Random bytes in an invitation's token and in a challenge.
TOKEN_BYTES = 32


class PasskeyEnrolment:
    """Registering people's passkeys onto their cards in ``directory``.

    ``directory_key`` signs the cards again (a key ``keyring`` vouches for as
    the directory's); ``book`` keeps the invitations and challenges;
    ``rp_id`` is the relying party the passkeys are made for and ``origins``
    the pages that may register them. A directory loaded from its file
    (:meth:`Directory.load`) writes each registration there itself, under the
    file's lock (:meth:`Directory.editing`); for one built in memory,
    ``saved(directory)`` is called after each registration to keep it (it may
    raise: the card is registered, and the error says it was not kept).
    """

    def __init__(
        self,
        directory: Directory,
        directory_key: SigningKey,
        keyring: Keyring,
        book: WebBook,
        clock: Clock,
        *,
        rp_id: str,
        origins: Sequence[str],
        rp_name: str = "hatp approvals",
        saved: Callable[[Directory], None] | None = None,
    ) -> None:
        """Raises:
        ValueError: an origin cannot use passkeys of ``rp_id``, or there is none.
        """
        checked = page_origins(rp_id, origins)
        self._directory = directory
        self._key = directory_key
        self._keyring = keyring
        self._book = book
        self._clock = clock
        self._rp_id = rp_id
        self._origins = checked
        self._rp_name = rp_name
        self._saved = saved

    @property
    def rp_id(self) -> str:
        """The relying party the passkeys are made for."""
        return self._rp_id

    def invite(self, human: str, *, valid_for: timedelta = INVITE_LIFETIME) -> str:
        """Invite ``human`` to register a passkey; return the invitation's token (hand it
        to them alone: whoever holds it registers a passkey onto their card).

        Raises:
            CardUnknown: the directory holds no card for ``human``.
            ValueError: ``valid_for`` is not positive.
            StoreUnavailable: the store failed; nobody was invited.
        """
        self._card(human)
        if valid_for <= timedelta(0):
            raise ValueError("an invitation is valid for some time: give a positive valid_for")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        now = self._clock.now()
        self._book.invite(token_digest(token), human, expires_at=now + valid_for, now=now)
        return token

    def invitation(self, token: str) -> WebInvite:
        """Return the invitation ``token`` stands for, if it can still be used.

        Raises:
            InviteInvalid: ``UNKNOWN``, ``EXPIRED``, ``USED``, or ``CARD`` (its person
                has no card any more).
            StoreUnavailable: the store failed.
        """
        invite = self._book.invite_of(token_digest(token)) if isinstance(token, str) else None
        if invite is None:
            raise _invite("UNKNOWN", "this invitation was not issued here; ask for a new one")
        if invite.used_at is not None:
            raise _invite(
                "USED",
                f"this invitation registered passkey {invite.kid} already; an invitation "
                "registers one passkey: ask for a new one",
            )
        if self._clock.now() >= invite.expires_at:
            raise _invite("EXPIRED", "this invitation has expired; ask for a new one")
        try:
            self._card(invite.human)
        except CardUnknown:
            raise _invite("CARD", f"{invite.human} has no card in the directory now") from None
        return invite

    def options(self, token: str) -> dict[str, Any]:
        """Return the WebAuthn creation options for the invitation's person
        (``PublicKeyCredentialCreationOptionsJSON``): a fresh challenge, kept for this
        invitation; a discoverable ES256 passkey with user verification.

        Raises:
            InviteInvalid: as :meth:`invitation`.
            StoreUnavailable: the store failed.
        """
        invite = self.invitation(token)
        card = self._card(invite.human)
        challenge = secrets.token_bytes(TOKEN_BYTES)
        options = generate_registration_options(
            rp_id=self._rp_id,
            rp_name=self._rp_name,
            user_id=user_handle(card.id),
            user_name=card.id,
            user_display_name=card.display_name,
            challenge=challenge,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            ),
            supported_pub_key_algs=[COSEAlgorithmIdentifier.ECDSA_SHA_256],
            exclude_credentials=[
                PublicKeyCredentialDescriptor(id=b64url_decode(key.credential_id))
                for key in _passkeys(card)
            ],
        )
        self._book.issue_challenge(
            b64url_encode(challenge),
            ChallengePurpose.ENROL,
            token_digest(token),
            self._clock.now() + CHALLENGE_LIFETIME,
        )
        doc: dict[str, Any] = json.loads(options_to_json(options))
        return doc

    def register(self, token: str, credential: Mapping[str, Any]) -> HumanCard:
        """Register the passkey the browser created (its registration response JSON)
        onto the invitation's person's card; return the card as the directory now holds it.

        Raises:
            InviteInvalid: as :meth:`invitation`, or ``USED`` when another registration
                used it meanwhile; nothing was registered.
            PasskeyInvalid: the registration is refused (``data.reason``: ``SHAPE``,
                ``CHALLENGE`` — not a challenge issued for this invitation, or spent or
                expired —, ``TYPE``, ``ORIGIN``, ``RP_ID``, ``USER_PRESENCE``,
                ``USER_VERIFICATION``, ``ALGORITHM``); nothing was registered.
            CardInvalid: reason ``SHAPE``: a card holds a passkey with this credential id
                already; nothing was registered.
            StoreUnavailable: the store failed; nothing was registered.
        """
        # One registration at a time, in this process and (for a directory that follows
        # its file) in every process: each reads the card it signs anew.
        with self._directory.editing():
            return self._register(token, credential)

    def _register(self, token: str, credential: Mapping[str, Any]) -> HumanCard:
        invite = self.invitation(token)
        card = self._card(invite.human)
        kid = _next_kid(card)
        challenge = client_challenge(credential)
        entry = register_passkey(
            credential, challenge=challenge, rp_id=self._rp_id, origins=self._origins, kid=kid
        )
        # A credential id names one passkey of one person: sign-in finds the card by it,
        # so the same id on a second card would lock its first holder out (WebAuthn §7.1).
        if any(
            key.credential_id == entry["credentialId"]
            for held in self._directory.cards()
            for key in _passkeys(held)
        ):
            raise CardInvalid(
                "this passkey's credential is registered on a card already: register "
                "another passkey",
                reason="SHAPE",
                card=card.id,
                where="/keys",
            )
        signed = add_passkey(self._directory.signed(card.id), entry, self._key)
        digest_of_token = token_digest(token)
        now = self._clock.now()
        with self._book.store.transaction() as conn:
            # [DIR-ENROL] the challenge was issued for this invitation, once, in time.
            issued_for = self._book.spend_challenge_txn(
                conn, b64url_encode(challenge), ChallengePurpose.ENROL, now
            )
            if _checks.is_on("DIR-ENROL") and issued_for != digest_of_token:
                raise PasskeyInvalid(
                    "the passkey was created over a challenge this invitation was not given, "
                    "or one already used or expired: start the registration again",
                    reason="CHALLENGE",
                    kid=kid,
                )
            if not self._book.use_invite_txn(conn, digest_of_token, kid, now):
                raise _invite("USED", "this invitation was used meanwhile; ask for a new one")
        registered = self._directory.replace_card(signed, self._keyring)
        if self._saved is not None:
            self._saved(self._directory)
        return registered

    def _card(self, human: str) -> HumanCard:
        try:
            return self._directory.card(human)
        except KeyError:
            raise CardUnknown(f"the directory holds no card {human}", card=human) from None


def user_handle(human: str) -> bytes:
    """The WebAuthn user handle of a person: 16 bytes of the SHA-256 of their id (no
    personal data in the authenticator, and the same on every registration)."""
    return hashlib.sha256(human.encode()).digest()[:16]


def _passkeys(card: HumanCard) -> list[WebAuthnKey]:
    return [key for key in card.keys if isinstance(key, WebAuthnKey)]


def _next_kid(card: HumanCard) -> str:
    taken = {key.kid for key in card.keys}
    number = len(_passkeys(card)) + 1
    while f"{card.id}#passkey-{number}" in taken:
        number += 1
    return f"{card.id}#passkey-{number}"


def _invite(reason: str, message: str) -> InviteInvalid:
    return InviteInvalid(message, reason=reason)
