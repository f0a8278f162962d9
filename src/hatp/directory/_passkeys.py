"""Registering a passkey onto a Human Card: a verified WebAuthn registration, then a re-signed card.

The directory asks the person's browser to create a passkey for its rpId
(``navigator.credentials.create`` with a random challenge it keeps), and
hands what the browser returns to :func:`register_passkey`, which verifies it
with the ``webauthn`` library (py_webauthn): the challenge, the origin, the
rpId hash, user presence and verification, attestation (``none`` and the
formats the library checks), and that the key is ES256 on P-256. The result
is the card's key entry (``use: webauthn``); :func:`add_passkey` puts it on
the card and signs the card again with the directory's key, so the passkey
is vouched for by the same signature as the rest of the card (docs/spec.md
§17, [CARD-PASSKEY]).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from webauthn import verify_registration_response
from webauthn.helpers import decode_credential_public_key
from webauthn.helpers.cose import COSECRV, COSEAlgorithmIdentifier
from webauthn.helpers.decode_credential_public_key import DecodedEC2PublicKey
from webauthn.helpers.exceptions import WebAuthnException

from hatp.directory._cards import sign_card
from hatp.errors import CardInvalid, PasskeyInvalid
from hatp.evidence import SigningKey, origin_fits
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.model import WebAuthnKey, parse_card_body

__all__ = ["add_passkey", "register_passkey"]

#: What the py_webauthn library's registration refusals say, and the reason each is.
_LIBRARY_REASONS = (
    ("client data type", "TYPE"),
    ("challenge", "CHALLENGE"),
    ("origin", "ORIGIN"),
    ("RP ID", "RP_ID"),
    ("User presence", "USER_PRESENCE"),
    ("User verification", "USER_VERIFICATION"),
    ("alg", "ALGORITHM"),
)


def register_passkey(
    credential: Mapping[str, Any],
    *,
    challenge: bytes,
    rp_id: str,
    origins: Sequence[str],
    kid: str,
) -> dict[str, str]:
    """Verify a WebAuthn registration response; return the passkey's Human Card key entry.

    ``credential`` is the browser's registration response JSON
    (``PublicKeyCredential.toJSON()``); ``challenge`` the one the directory
    issued for it; ``origins`` the pages it may come from. The user must have
    been verified (flag UV), and the key must be ES256 on P-256.

    Raises:
        PasskeyInvalid: with ``data.reason`` ``SHAPE``, ``TYPE``, ``CHALLENGE``,
            ``ORIGIN``, ``RP_ID``, ``USER_PRESENCE``, ``USER_VERIFICATION`` or
            ``ALGORITHM``; nothing is registered.
        ValueError: an origin in ``origins`` cannot use passkeys of ``rp_id``.
    """
    if bad := [o for o in origins if not origin_fits(o, rp_id)]:
        raise ValueError(f"origins {bad} cannot use passkeys of rpId {rp_id!r}")
    if not isinstance(credential, Mapping):
        raise _invalid("SHAPE", "a registration response is a JSON object", kid)
    _refuse_cross_origin(credential, kid)
    try:
        verified = verify_registration_response(
            credential=dict(credential),
            expected_challenge=challenge,
            expected_rp_id=rp_id,
            expected_origin=list(origins),
            require_user_verification=True,
            supported_pub_key_algs=[COSEAlgorithmIdentifier.ECDSA_SHA_256],
        )
        public = decode_credential_public_key(verified.credential_public_key)
    except WebAuthnException as exc:
        text = str(exc)
        reason = next((r for part, r in _LIBRARY_REASONS if part in text), "SHAPE")
        raise _invalid(reason, f"the passkey registration is refused: {text}", kid) from None
    if not isinstance(public, DecodedEC2PublicKey) or public.crv != COSECRV.P256:
        raise _invalid("ALGORITHM", "a card's passkey is ES256 on P-256", kid)
    entry = {
        "kid": kid,
        "use": "webauthn",
        "kty": "EC",
        "crv": "P-256",
        "x": b64url_encode(public.x),
        "y": b64url_encode(public.y),
        "credentialId": b64url_encode(verified.credential_id),
        "rpId": rp_id,
    }
    return WebAuthnKey.model_validate(entry).to_wire()  # type: ignore[return-value]


def add_passkey(
    card: Mapping[str, Any], entry: Mapping[str, Any], directory_key: SigningKey
) -> dict[str, Any]:
    """Return ``card`` (signed or not) with the passkey ``entry`` added to its keys,
    signed again by the directory's key. The old signature, if any, is dropped:
    the directory vouches for the card as it now is.

    Raises:
        CardInvalid: reason ``SHAPE``: the card already has a key with this kid
            or a passkey with this credential id, or the result is not a Human Card.
    """
    body = {k: v for k, v in card.items() if k != "signature"}
    keys = list(body.get("keys") or [])
    taken = [
        k for k in keys
        if k.get("kid") == entry.get("kid")
        or (k.get("use") == "webauthn" and k.get("credentialId") == entry.get("credentialId"))
    ]  # fmt: skip
    if taken:
        raise CardInvalid(
            f"card {body.get('id')} already has key {taken[0].get('kid')!r} (the same kid or "
            "credential); remove it first, or register under another kid",
            reason="SHAPE",
            card=body.get("id"),
            where="/keys",
        )
    parsed = parse_card_body({**body, "keys": [*keys, dict(entry)]})
    return sign_card(parsed.to_wire(), directory_key)


def _refuse_cross_origin(credential: Mapping[str, Any], kid: str) -> None:
    response = credential.get("response")
    text = response.get("clientDataJSON") if isinstance(response, Mapping) else None
    try:
        client = json.loads(b64url_decode(text)) if isinstance(text, str) else None
    except ValueError:
        client = None
    if not isinstance(client, dict):
        raise _invalid("SHAPE", "response.clientDataJSON is not base64url of a JSON object", kid)
    if client.get("crossOrigin") is True:
        raise _invalid("ORIGIN", "the passkey was created cross-origin", kid)


def _invalid(reason: str, message: str, kid: str) -> PasskeyInvalid:
    return PasskeyInvalid(message, reason=reason, kid=kid)
