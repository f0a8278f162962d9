"""Human Cards of acme.com for the directory tests, signed by the acme directory key."""

from __future__ import annotations

import copy
import functools
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, derive_private_key

from hatp.directory import Directory, sign_card
from hatp.evidence import Keyring, SigningKey
from hatp.evidence._b64 import b64url_encode
from hatp.gateway import SoftwareAuthenticator

ISSUER = "https://directory.acme.com"
#: The post's $25,000 request: who the finance-approver role matched, and why none was asked.
PASSED_OVER_AT_25000 = [
    {
        "id": "human://acme.com/alice",
        "result": "excluded",
        "rule": "authority",
        "detail": "limit 10000 USD < 25000 USD",
    },
    {
        "id": "human://acme.com/dana",
        "result": "excluded",
        "rule": "separation-of-duties",
        "detail": "the agent acts on their behalf",
    },
    {
        "id": "human://acme.com/erin",
        "result": "excluded",
        "rule": "authority",
        "detail": "limit 500 USD < 25000 USD",
    },
]
DIRECTORY_KEY = SigningKey.from_seed(bytes([7]) * 32, "acme-directory-1")
OTHER_KEY = SigningKey.from_seed(bytes([8]) * 32, "evil-directory-1")


def keyring() -> Keyring:
    """Trusts acme's directory; knows evil's key, vouched for by an issuer nobody trusts."""
    return Keyring(
        [(DIRECTORY_KEY.public, ISSUER), (OTHER_KEY.public, "https://evil.example")],
        trusted_issuers=[ISSUER],
    )


def passkey(name: str) -> dict[str, str]:
    """A WebAuthn public key on P-256 (a real point, derived from the name)."""
    numbers = derive_private_key(len(name) + 1000, SECP256R1()).public_key().public_numbers()
    return {
        "kid": f"human://acme.com/{name}#passkey-1",
        "use": "webauthn",
        "kty": "EC",
        "crv": "P-256",
        "x": b64url_encode(numbers.x.to_bytes(32, "big")),
        "y": b64url_encode(numbers.y.to_bytes(32, "big")),
        "credentialId": "Y3JlZC0x",
        "rpId": "acme.com",
    }


@functools.cache
def authenticator(name: str) -> SoftwareAuthenticator:
    """The software passkey whose public key :func:`passkey` puts on ``name``'s card
    (one per name, so its sign count only goes up)."""
    key = derive_private_key(len(name) + 1000, SECP256R1())
    return SoftwareAuthenticator(
        "acme.com", f"human://acme.com/{name}#passkey-1", private_key=key, credential_id=b"cred-1"
    )


def card(name: str, limit: str | None = "10000", **changes: Any) -> dict[str, Any]:
    """An unsigned card for ``human://acme.com/<name>``: a finance approver, available."""
    body: dict[str, Any] = {
        "hatpVersion": "0.1",
        "id": f"human://acme.com/{name}",
        "displayName": name.title(),
        "roles": ["finance-approver"],
        "pools": ["security-leads"],
        "skills": ["travel-policy", "sox"],
        "authority": []
        if limit is None
        else [{"action": "approve.spend", "maxAmount": {"value": limit, "currency": "USD"}}],
        "channels": ["slack", "sms"],
        "availability": {"timezone": "America/New_York", "status": "available"},
        "sla": {"decideSeconds": 900},
        "capacity": {"maxOpen": 10, "open": 2},
        "delegates": [],
        "keys": [passkey(name)],
        "issuer": ISSUER,
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = copy.deepcopy(value)
    return body


def signed(name: str, limit: str | None = "10000", **changes: Any) -> dict[str, Any]:
    """The card, signed by acme's directory."""
    return sign_card(card(name, limit, **changes), DIRECTORY_KEY)


def directory(*cards: dict[str, Any]) -> Directory:
    """A directory of these signed cards."""
    return Directory(ISSUER, cards, keyring())
