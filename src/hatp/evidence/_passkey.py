"""Passkeys on votes: the challenge a vote's passkey signs, and checking an assertion.

A person's vote can carry a WebAuthn assertion made by the passkey on their
Human Card (docs/spec.md §19, [GW-PASSKEY], [TXN-PASSKEY]). The challenge is
the 32 bytes of the digest (§3) of ``{txnId, groupId, planDigest, decision,
nonce, human}`` (and ``termsDigest`` when the vote names one), so an
assertion made to reject never counts as an approval, and one made for
another plan, group, person or nonce never counts at all.

:func:`verify_passkey` checks an assertion against the card, using the
``webauthn`` library (py_webauthn) for the WebAuthn steps, with the card's
``x``/``y`` as the COSE public key. The gateway calls it with the origins it
serves and the sign count it keeps; the offline verifier with neither, so
the origin is held to the rpId alone and the sign count is not checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from webauthn import verify_authentication_response
from webauthn.helpers.cose import COSECRV, COSEKTY, COSEAlgorithmIdentifier, COSEKey
from webauthn.helpers.encode_cbor import encode_cbor
from webauthn.helpers.exceptions import WebAuthnException

from hatp.errors import PasskeyInvalid
from hatp.evidence._b64 import b64url_decode
from hatp.evidence._digest import DIGEST_PREFIX, digest
from hatp.model import HumanCard, PasskeyAssertion, WebAuthnKey, first_error

__all__ = [
    "CHALLENGE_MEMBERS",
    "PasskeyVerified",
    "cose_public_key",
    "origin_fits",
    "passkey_challenge",
    "verify_passkey",
    "vote_challenge",
]

#: What a vote's passkey challenge binds (and ``termsDigest`` when the vote names one).
CHALLENGE_MEMBERS = ("txnId", "groupId", "planDigest", "decision", "nonce", "human")
#: The loopback host a browser lets serve WebAuthn over plain http.
_LOCALHOST = "localhost"
#: What the py_webauthn library's refusals say, and the reason each is.
_LIBRARY_REASONS = (
    ("RP ID", "RP_ID"),
    ("not present", "USER_PRESENCE"),
    ("User verification", "USER_VERIFICATION"),
    ("sign count", "SIGN_COUNT"),
    ("signature", "SIGNATURE"),
)


@dataclass(frozen=True, slots=True)
class PasskeyVerified:
    """A passkey assertion that verified: which card key, from what origin, at what count."""

    kid: str
    credential_id: str
    origin: str
    sign_count: int


def passkey_challenge(
    *,
    txn_id: str,
    group_id: str,
    plan_digest: str,
    decision: str,
    nonce: str,
    human: str,
    terms_digest: str | None = None,
) -> bytes:
    """Return the WebAuthn challenge of a vote: the 32 SHA-256 bytes of the digest of
    ``{txnId, groupId, planDigest, decision, nonce, human}`` (and ``termsDigest``
    when given). Its base64url is the digest text without ``sha256:``."""
    bound = {
        "txnId": txn_id,
        "groupId": group_id,
        "planDigest": plan_digest,
        "decision": decision,
        "nonce": nonce,
        "human": human,
    }
    if terms_digest is not None:
        bound["termsDigest"] = terms_digest
    return b64url_decode(digest(bound).removeprefix(DIGEST_PREFIX))


def vote_challenge(vote: Mapping[str, Any], nonce: str) -> bytes:
    """The challenge of ``vote`` (a HumanVote's wire form) with ``nonce``."""
    terms = vote.get("termsDigest")
    return passkey_challenge(
        txn_id=str(vote.get("txnId")),
        group_id=str(vote.get("groupId")),
        plan_digest=str(vote.get("planDigest")),
        decision=str(vote.get("decision")),
        nonce=nonce,
        human=str(vote.get("human")),
        terms_digest=None if terms is None else str(terms),
    )


def cose_public_key(key: WebAuthnKey) -> bytes:
    """Return the card's passkey as a COSE_Key (EC2, ES256, P-256), as WebAuthn encodes it."""
    return encode_cbor(
        {
            COSEKey.KTY: COSEKTY.EC2,
            COSEKey.ALG: COSEAlgorithmIdentifier.ECDSA_SHA_256,
            COSEKey.CRV: COSECRV.P256,
            COSEKey.X: b64url_decode(key.x),
            COSEKey.Y: b64url_decode(key.y),
        }
    )


def origin_fits(origin: str, rp_id: str) -> bool:
    """Whether a browser would let ``origin`` use passkeys of ``rp_id``: ``https`` on the
    rpId or a subdomain of it (any port), or ``http`` on ``localhost`` for rpId
    ``localhost``; an origin is scheme, host and port, nothing more."""
    try:
        parts = urlsplit(origin)
        port = parts.port  # refuses a port that is no number
    except ValueError:
        return False
    host = parts.hostname
    if host is None or parts.path or parts.query or parts.fragment or parts.username:
        return False
    expected = f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")
    if origin != expected:  # upper case, a trailing dot, credentials: not a browser's origin
        return False
    on_rp = host == rp_id or host.endswith("." + rp_id)
    secure = parts.scheme == "https" or (parts.scheme == "http" and host == _LOCALHOST)
    return on_rp and secure


def verify_passkey(
    vote: Mapping[str, Any],
    card: HumanCard,
    *,
    origins: Sequence[str] | None = None,
    sign_count: int = 0,
) -> PasskeyVerified:
    """Check the passkey assertion on ``vote`` (a HumanVote's wire form) against the
    voter's ``card``; return what verified only after every step passed.

    ``origins``: the origins the checker serves (the gateway's); ``None`` holds the
    origin to the passkey's rpId alone (:func:`origin_fits`), as the offline
    verifier does. ``sign_count``: the last count seen for this passkey (0: none).

    Raises:
        PasskeyInvalid: with ``data.reason``: ``SHAPE`` (1), ``KEY_UNKNOWN`` (2),
            ``TYPE`` / ``CHALLENGE`` / ``ORIGIN`` (3), ``RP_ID`` /
            ``USER_PRESENCE`` / ``USER_VERIFICATION`` / ``SIGN_COUNT`` /
            ``SIGNATURE`` (4).
    """
    # 1. The passkey member has the PasskeyAssertion form.
    assertion = _assertion(vote.get("passkey"))
    # 2. It names a passkey on the voter's own card, by kid and credential id.
    key = _card_key(card, assertion)
    # 3. The browser's client data: a get, of this vote's challenge, from an origin we accept.
    origin = _client_origin(assertion, key, vote_challenge(vote, assertion.nonce), origins)
    # 4. The authenticator data and the ES256 signature (py_webauthn), user verified.
    try:
        verified = verify_authentication_response(
            credential={
                "id": assertion.credential_id,
                "rawId": assertion.credential_id,
                "type": "public-key",
                "response": {
                    "authenticatorData": assertion.authenticator_data,
                    "clientDataJSON": assertion.client_data_json,
                    "signature": assertion.signature,
                },
                "clientExtensionResults": {},
            },
            expected_challenge=vote_challenge(vote, assertion.nonce),
            expected_rp_id=key.rp_id,
            expected_origin=origin,
            credential_public_key=cose_public_key(key),
            credential_current_sign_count=sign_count,
            require_user_verification=True,
        )
    except WebAuthnException as exc:
        text = str(exc)
        reason = next((r for part, r in _LIBRARY_REASONS if part in text), "SHAPE")
        raise _invalid(reason, f"passkey {key.kid}: {text}", key.kid) from None
    return PasskeyVerified(key.kid, key.credential_id, origin, verified.new_sign_count)


def _assertion(doc: Any) -> PasskeyAssertion:
    try:
        return PasskeyAssertion.model_validate(doc)
    except ValidationError as exc:
        where, problem = first_error(exc)
        raise _invalid(
            "SHAPE", f"the vote's passkey member is not a passkey assertion: {where}: "
            f"{problem}", None,
        ) from None  # fmt: skip


def _card_key(card: HumanCard, assertion: PasskeyAssertion) -> WebAuthnKey:
    key = next((k for k in card.keys if k.kid == assertion.kid), None)
    if not isinstance(key, WebAuthnKey):
        what = "no key" if key is None else "an Ed25519 key, not a passkey,"
        raise _invalid(
            "KEY_UNKNOWN",
            f"{card.id}'s card has {what} with kid {assertion.kid!r}; sign with a passkey "
            "registered on the card",
            assertion.kid,
        )
    if key.credential_id != assertion.credential_id:
        raise _invalid(
            "KEY_UNKNOWN",
            f"passkey {key.kid} on {card.id}'s card is credential {key.credential_id}, "
            f"not {assertion.credential_id}",
            key.kid,
        )
    return key


def _client_origin(
    assertion: PasskeyAssertion,
    key: WebAuthnKey,
    challenge: bytes,
    origins: Sequence[str] | None,
) -> str:
    """Read clientDataJSON; check its type, challenge and origin; return the origin."""
    try:
        client = json.loads(b64url_decode(assertion.client_data_json))
    except ValueError:
        client = None
    if not isinstance(client, dict) or not all(
        isinstance(client.get(m), str) for m in ("type", "challenge", "origin")
    ):
        raise _invalid(
            "SHAPE", "clientDataJSON is not a JSON object with type, challenge and origin", key.kid
        )
    if client["type"] != "webauthn.get":
        raise _invalid(
            "TYPE", f"clientDataJSON.type is {client['type']!r}, not 'webauthn.get'", key.kid
        )
    try:
        signed = b64url_decode(client["challenge"])
    except ValueError:
        signed = b""
    if signed != challenge:
        raise _invalid(
            "CHALLENGE",
            "the passkey signed another challenge than this vote's (the digest of its txnId, "
            "groupId, planDigest, decision, nonce and human): it was made for another "
            "decision, plan, person or nonce",
            key.kid,
        )
    origin = str(client["origin"])
    if client.get("crossOrigin") is True:
        raise _invalid("ORIGIN", f"the assertion was made cross-origin from {origin}", key.kid)
    if not origin_fits(origin, key.rp_id):
        raise _invalid(
            "ORIGIN",
            f"origin {origin!r} may not use passkeys of rpId {key.rp_id!r} (https on the "
            "rpId or a subdomain of it; http only on localhost)",
            key.kid,
        )
    if origins is not None and origin not in origins:
        served = ", ".join(origins) or "none"
        raise _invalid(
            "ORIGIN", f"origin {origin!r} is not one this gateway serves ({served})", key.kid
        )
    return origin


def _invalid(reason: str, message: str, kid: str | None) -> PasskeyInvalid:
    return PasskeyInvalid(message, reason=reason, kid=kid)
