"""Wire types of an organisation's key set, ``/.well-known/hatp-keys.json``
(docs/spec.md [KEYSET-DOC]): the keys its parties sign with, signed by its root key.

The model checks the form only; :func:`hatp.evidence.verify_key_set` checks the
pin, the signature, the time and the version.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hatp.model._base import MAX_SAFE_INTEGER, WireModel, WireTime
from hatp.model.keys import KeyRole, PublicJwk
from hatp.model.signature import Signature

#: Where an organisation publishes its key set.
KEYSET_PATH = "/.well-known/hatp-keys.json"
#: A key set's ``type``.
KEYSET_TYPE = "hatp.keyset"

#: A key's state in its set: ``active`` signs; ``retired`` no longer signs, and what it
#: signed inside its period still verifies; ``revoked`` verifies nothing signed at or
#: after ``revokedAt``.
KeyStatus = Literal["active", "retired", "revoked"]


def _unset(value: object) -> bool:
    return value is None


class KeySetKey(PublicJwk):
    """One key of a key set: the public JWK, what it speaks for, and its period."""

    role: KeyRole
    issuer: str = Field(min_length=1, max_length=512, description="the party id the key speaks for")
    not_before: WireTime = Field(description="the key verifies nothing signed before")
    not_after: WireTime | None = Field(
        default=None,
        exclude_if=_unset,
        description="the key verifies nothing signed after; absent or null: open-ended",
    )
    status: KeyStatus
    revoked_at: WireTime | None = Field(
        default=None,
        exclude_if=_unset,
        description="required iff status is revoked: nothing signed at or after verifies",
    )

    @model_validator(mode="after")
    def _period(self) -> KeySetKey:
        # Wire times are fixed-width UTC, so text order is time order.
        if self.not_after is not None and self.not_after <= self.not_before:
            raise ValueError(f"key {self.kid!r}: notAfter is not after notBefore")
        if self.status == "revoked" and self.revoked_at is None:
            raise ValueError(f"key {self.kid!r} is revoked: say since when in revokedAt")
        if self.status != "revoked" and self.revoked_at is not None:
            raise ValueError(
                f"key {self.kid!r} has revokedAt but status {self.status!r}: "
                "a revoked key has status revoked"
            )
        return self


class KeySetBody(WireModel):
    """A key set before its root signs it."""

    hatp_version: str
    type: Literal["hatp.keyset"]
    organisation: str = Field(min_length=1, max_length=512, description='e.g. "https://acme.com"')
    version: int = Field(
        ge=1, le=MAX_SAFE_INTEGER, description="grows with every set the organisation publishes"
    )
    issued_at: WireTime
    expires_at: WireTime = Field(description="fetch the set again after this")
    root: PublicJwk = Field(description="the root public key; its thumbprint is what is pinned")
    keys: list[KeySetKey] = Field(max_length=1024)

    @model_validator(mode="after")
    def _set(self) -> KeySetBody:
        if self.expires_at <= self.issued_at:
            raise ValueError("expiresAt is not after issuedAt")
        seen: set[str] = set()
        for key in self.keys:
            if key.kid == self.root.kid:
                raise ValueError(
                    f"key {key.kid!r} has the root's kid: the root signs key sets only; "
                    "give each key its own kid"
                )
            if key.kid in seen:
                raise ValueError(f"kid {key.kid!r} is listed twice: each key once")
            seen.add(key.kid)
        return self


class KeySet(KeySetBody):
    """A key set as its root signed it: the body plus ``signature`` (§5)."""

    signature: Signature
