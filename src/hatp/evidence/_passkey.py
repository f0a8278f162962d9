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
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from hatp.errors import PasskeyInvalid
from hatp.evidence._b64 import b64url_decode
from hatp.evidence._digest import DIGEST_PREFIX, digest
from hatp.model import HumanCard, PasskeyAssertion, WebAuthnKey, first_error

__all__ = [
    "CHALLENGE_MEMBERS",
    "PasskeyVerified",
    "client_challenge",
    "cose_public_key",
    "origin_fits",
    "page_origins",
    "passkey_challenge",
    "verify_assertion",
    "verify_passkey",
    "vote_challenge",
]

#: What a vote's passkey challenge binds (and ``termsDigest`` when the vote names one).
CHALLENGE_MEMBERS = ("txnId", "groupId", "planDigest", "decision", "nonce", "human")
#: Unpadded base64url, as a browser's WebAuthn JSON writes bytes.
_B64URL = re.compile(r"^[A-Za-z0-9_-]{1,16384}\Z")
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
    # py_webauthn loads when a passkey is checked, so that verifying a record without
    # passkeys (``hatp verify``) needs only the evidence layer's own dependencies.
    from webauthn.helpers.cose import COSECRV, COSEKTY, COSEAlgorithmIdentifier, COSEKey
    from webauthn.helpers.encode_cbor import encode_cbor

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


def page_origins(rp_id: str, origins: Iterable[str]) -> tuple[str, ...]:
    """Return ``origins``, the pages passkeys of ``rp_id`` are used on, once there is at
    least one and each fits the rpId (:func:`origin_fits`).

    Raises:
        ValueError: no origin, or one a browser would not let use passkeys of ``rp_id``.
    """
    found = tuple(origins)
    if not found:
        raise ValueError("name the origins the approver pages are served on")
    if bad := [o for o in found if not origin_fits(o, rp_id)]:
        raise ValueError(f"origins {bad} cannot use passkeys of rpId {rp_id!r}")
    return found


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
    # 3. and 4., as for any assertion, over this vote's challenge.
    return _verified(
        key,
        _Response(assertion.authenticator_data, assertion.client_data_json, assertion.signature),
        vote_challenge(vote, assertion.nonce),
        _VOTE_CHALLENGE,
        origins,
        sign_count,
    )


def verify_assertion(
    credential: Mapping[str, Any],
    cards: Iterable[HumanCard],
    *,
    challenge: bytes,
    origins: Sequence[str] | None = None,
    sign_count: Callable[[str, str], int] | None = None,
) -> tuple[HumanCard, PasskeyVerified]:
    """Check a browser's assertion (``PublicKeyCredential.toJSON()`` of a
    ``navigator.credentials.get``) made over ``challenge`` by a passkey on one of
    ``cards``; return that card and what verified, only after every step passed.

    This is how a person signs in with their passkey: the credential names
    itself by its id, and the card that holds it says who they are.
    ``sign_count(human, credential_id)`` gives the last count seen (default: 0).

    Raises:
        PasskeyInvalid: with ``data.reason``: ``SHAPE`` (1), ``KEY_UNKNOWN`` (2: no card
            holds the credential), ``KEY_AMBIGUOUS`` (2: the cards of several people
            hold it), ``TYPE`` / ``CHALLENGE`` / ``ORIGIN`` (3), ``RP_ID`` /
            ``USER_PRESENCE`` / ``USER_VERIFICATION`` / ``SIGN_COUNT`` / ``SIGNATURE`` (4).
    """
    # 1. The browser's answer has the form of an assertion response.
    credential_id, response = _response(credential)
    # 2. Exactly one person's card holds the passkey it names (the credential id, as
    # registered): the card says who signs in, so a credential on two cards names nobody.
    found = [
        (card, key)
        for card in cards
        for key in card.keys
        if isinstance(key, WebAuthnKey) and key.credential_id == credential_id
    ]
    if not found:
        raise _invalid(
            "KEY_UNKNOWN",
            f"no card of this directory holds passkey {credential_id}: register it first",
            None,
        )
    holders = sorted({card.id for card, _ in found})
    if len(holders) > 1:
        raise _invalid(
            "KEY_AMBIGUOUS",
            f"passkey {credential_id} is on the cards of {', '.join(holders)}: a passkey "
            "names one person; the directory must keep it on its owner's card only",
            None,
        )
    card, key = found[0]
    # 3. and 4., as for any assertion.
    count = 0 if sign_count is None else sign_count(card.id, credential_id)
    return card, _verified(key, response, challenge, "this sign-in's", origins, count)


@dataclass(frozen=True, slots=True)
class _Response:
    """The authenticator's answer as the browser hands it over, base64url each."""

    authenticator_data: str
    client_data_json: str
    signature: str


#: What a vote's challenge is, for the refusal that names it.
_VOTE_CHALLENGE = (
    "this vote's (the digest of its txnId, groupId, planDigest, decision, nonce and human): "
    "it was made for another decision, plan, person or nonce"
)


def _verified(
    key: WebAuthnKey,
    response: _Response,
    challenge: bytes,
    what: str,
    origins: Sequence[str] | None,
    sign_count: int,
) -> PasskeyVerified:
    """Steps 3 and 4 of every assertion check: the client data, then py_webauthn's."""
    # 3. The browser's client data: a get, of this challenge, from an origin we accept.
    origin = _client_origin(response.client_data_json, key, challenge, what, origins)
    from webauthn import verify_authentication_response  # see cose_public_key
    from webauthn.helpers.exceptions import WebAuthnException

    # 4. The authenticator data and the ES256 signature (py_webauthn), user verified.
    try:
        verified = verify_authentication_response(
            credential={
                "id": key.credential_id,
                "rawId": key.credential_id,
                "type": "public-key",
                "response": {
                    "authenticatorData": response.authenticator_data,
                    "clientDataJSON": response.client_data_json,
                    "signature": response.signature,
                },
                "clientExtensionResults": {},
            },
            expected_challenge=challenge,
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


def client_challenge(credential: Mapping[str, Any]) -> bytes:
    """Return the challenge a browser's WebAuthn response (of a ``create`` or a ``get``)
    says it signed, read from its ``clientDataJSON``: the server then checks that it
    issued that challenge, and spends it.

    Raises:
        PasskeyInvalid: reason ``SHAPE``: there is no readable challenge.
    """
    response = credential.get("response") if isinstance(credential, Mapping) else None
    text = response.get("clientDataJSON") if isinstance(response, Mapping) else None
    try:
        client = json.loads(b64url_decode(text)) if isinstance(text, str) else None
        challenge = client.get("challenge") if isinstance(client, dict) else None
        if isinstance(challenge, str) and _B64URL.match(challenge):
            return b64url_decode(challenge)
    except (ValueError, RecursionError):  # deep nesting exhausts json's recursive reader
        pass
    raise _invalid(
        "SHAPE",
        "response.clientDataJSON is not base64url of a JSON object with a base64url challenge",
        None,
    )


def _response(credential: Any) -> tuple[str, _Response]:
    """The credential id and the response members of a browser's assertion JSON."""
    response = credential.get("response") if isinstance(credential, Mapping) else None
    members: list[str] = []
    if isinstance(response, Mapping):
        found = [credential.get("id")] + [
            response.get(m) for m in ("authenticatorData", "clientDataJSON", "signature")
        ]
        members = [m for m in found if isinstance(m, str) and _B64URL.match(m)]
    if len(members) != 4:
        raise _invalid(
            "SHAPE",
            "an assertion is the browser's PublicKeyCredential JSON: id, and response with "
            "authenticatorData, clientDataJSON and signature, each base64url",
            None,
        )
    credential_id, authenticator_data, client_data_json, signature = members
    return credential_id, _Response(authenticator_data, client_data_json, signature)


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
    client_data_json: str,
    key: WebAuthnKey,
    challenge: bytes,
    what: str,
    origins: Sequence[str] | None,
) -> str:
    """Read clientDataJSON; check its type, challenge and origin; return the origin."""
    try:
        client = json.loads(b64url_decode(client_data_json))
    except (ValueError, RecursionError):  # deep nesting exhausts json's recursive reader
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
            f"the passkey signed another challenge than {what}",
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
