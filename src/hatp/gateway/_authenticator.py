"""A passkey in software: what a person's authenticator and browser hand over, without either.

:class:`SoftwareAuthenticator` holds one P-256 credential and answers as a
platform authenticator behind a browser would: a registration response with
attestation ``none`` (``navigator.credentials.create``), and assertions
(``navigator.credentials.get``) whose authenticator data carries the rpId
hash, the flags UP and UV and the sign count, whose clientDataJSON is the
browser's ``{"type", "challenge", "origin", "crossOrigin": false}``, and
whose ES256 signature is over ``authenticatorData || SHA-256(clientDataJSON)``.
Both come as the JSON the browser's ``toJSON()`` gives (base64url members),
which is what :func:`webauthn.verify_registration_response` and
:func:`webauthn.verify_authentication_response` take. For tests and the demo:
a real person's passkey never leaves their authenticator.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers.encode_cbor import encode_cbor

from hatp.evidence._b64 import b64url_encode
from hatp.evidence._passkey import cose_public_key
from hatp.model import WebAuthnKey

__all__ = ["SoftwareAuthenticator"]

_UP, _UV, _AT = 0x01, 0x04, 0x40
#: The AAGUID of an authenticator that does not say what it is (attestation "none").
_NO_AAGUID = bytes(16)


class SoftwareAuthenticator:
    """One passkey (a P-256 key and its credential id) for relying party ``rp_id``.

    ``kid`` is the key id its entry on a Human Card gets; ``origin`` the page
    it signs from (``https://<rp_id>`` unless given). ``user_verified`` is
    whether it verifies the user (flag UV); ``counting`` whether its sign
    count goes up with every signature (synced passkeys stay at 0).
    """

    def __init__(
        self,
        rp_id: str,
        kid: str,
        *,
        origin: str | None = None,
        private_key: ec.EllipticCurvePrivateKey | None = None,
        credential_id: bytes | None = None,
        user_verified: bool = True,
        counting: bool = True,
    ) -> None:
        self.rp_id = rp_id
        self.kid = kid
        self.origin = origin or f"https://{rp_id}"
        self._key = private_key or ec.generate_private_key(ec.SECP256R1())
        self._credential = credential_id or hashlib.sha256(self._public_point()).digest()[:16]
        self.user_verified = user_verified
        self.counting = counting
        self.sign_count = 0

    @classmethod
    def from_seed(cls, seed: bytes, rp_id: str, kid: str, **options: Any) -> SoftwareAuthenticator:
        """The authenticator whose key is derived from ``seed``: the same every time
        (for fixtures). ``options`` as for the constructor."""
        scalar = int.from_bytes(hashlib.sha256(b"hatp passkey " + seed).digest(), "big")
        key = ec.derive_private_key(scalar % (_P256_ORDER - 1) + 1, ec.SECP256R1())
        return cls(rp_id, kid, private_key=key, **options)

    @property
    def credential_id(self) -> str:
        """The credential id, base64url."""
        return b64url_encode(self._credential)

    def key_entry(self) -> dict[str, str]:
        """The passkey's entry on a Human Card (``use: webauthn``), as registration makes it."""
        numbers = self._key.public_key().public_numbers()
        entry = {
            "kid": self.kid,
            "use": "webauthn",
            "kty": "EC",
            "crv": "P-256",
            "x": b64url_encode(numbers.x.to_bytes(32, "big")),
            "y": b64url_encode(numbers.y.to_bytes(32, "big")),
            "credentialId": self.credential_id,
            "rpId": self.rp_id,
        }
        return WebAuthnKey.model_validate(entry).to_wire()  # type: ignore[return-value]

    def register(self, challenge: bytes, *, origin: str | None = None) -> dict[str, Any]:
        """Answer ``navigator.credentials.create`` for ``challenge``: the registration
        response JSON (attestation ``none``)."""
        cose = cose_public_key(WebAuthnKey.model_validate(self.key_entry()))
        attested = _NO_AAGUID + len(self._credential).to_bytes(2, "big") + self._credential + cose
        auth_data = self._auth_data(flags=_AT) + attested
        attestation = encode_cbor({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client = _client_data("webauthn.create", challenge, origin or self.origin, False)
        return {
            "id": self.credential_id,
            "rawId": self.credential_id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url_encode(client),
                "attestationObject": b64url_encode(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }

    def assertion(
        self,
        challenge: bytes,
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        cross_origin: bool = False,
    ) -> dict[str, Any]:
        """Answer ``navigator.credentials.get`` for ``challenge``: the authentication
        response JSON, signed. ``rp_id`` and ``cross_origin`` let a test make one a
        browser would not."""
        if self.counting:
            self.sign_count += 1
        auth_data = self._auth_data(rp_id=rp_id)
        client = _client_data("webauthn.get", challenge, origin or self.origin, cross_origin)
        signed = auth_data + hashlib.sha256(client).digest()
        signature = self._key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return {
            "id": self.credential_id,
            "rawId": self.credential_id,
            "type": "public-key",
            "response": {
                "authenticatorData": b64url_encode(auth_data),
                "clientDataJSON": b64url_encode(client),
                "signature": b64url_encode(signature),
                "userHandle": None,
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }

    def _auth_data(self, *, flags: int = 0, rp_id: str | None = None) -> bytes:
        rp_hash = hashlib.sha256((rp_id or self.rp_id).encode()).digest()
        flags |= _UP | (_UV if self.user_verified else 0)
        return rp_hash + bytes([flags]) + self.sign_count.to_bytes(4, "big")

    def _public_point(self) -> bytes:
        numbers = self._key.public_key().public_numbers()
        return numbers.x.to_bytes(32, "big") + numbers.y.to_bytes(32, "big")


#: The order of the P-256 group.
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _client_data(kind: str, challenge: bytes, origin: str, cross_origin: bool) -> bytes:
    # A browser's serialisation: these members in this order, no spaces.
    doc = {
        "type": kind,
        "challenge": b64url_encode(challenge),
        "origin": origin,
        "crossOrigin": cross_origin,
    }
    return json.dumps(doc, separators=(",", ":")).encode()
