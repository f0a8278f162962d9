"""Wire types for public keys and keyrings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hatp.clock import parse_time
from hatp.model._base import MAX_SAFE_INTEGER, Kid, WireModel, WireTime

#: What a key of an organisation's key set speaks for (docs/spec.md [KEYSET-DOC]).
KeyRole = Literal["directory", "gateway", "coordinator", "participant", "server"]


class PublicJwk(WireModel):
    """An Ed25519 public key as a JWK (RFC 8037): ``kty: OKP``, ``crv: Ed25519``."""

    kty: Literal["OKP"]
    crv: Literal["Ed25519"]
    x: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="32 raw bytes, base64url")
    kid: Kid


def _unset(value: object) -> bool:
    return value is None


class KeyringEntry(PublicJwk):
    """A public key in a keyring, with the issuer that vouches for it and, when it came
    from a key set, its period ([SIG-PERIOD]): the period members are written only when
    present, and a keyring written before periods existed reads unchanged."""

    issuer: str = Field(min_length=1, max_length=512)
    not_before: WireTime | None = Field(
        default=None, exclude_if=_unset, description="the key verifies nothing signed before"
    )
    not_after: WireTime | None = Field(
        default=None,
        exclude_if=_unset,
        description="the key verifies nothing signed after; absent: open-ended",
    )
    revoked_at: WireTime | None = Field(
        default=None,
        exclude_if=_unset,
        description="revoked: the key verifies nothing signed at or after this time",
    )
    role: KeyRole | None = Field(default=None, exclude_if=_unset)
    organisation: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        exclude_if=_unset,
        description="the organisation whose key set listed the key",
    )
    set_version: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SAFE_INTEGER,
        exclude_if=_unset,
        description="the version of that key set",
    )

    @model_validator(mode="after")
    def _period(self) -> KeyringEntry:
        if self.not_before is None:
            stray = [
                name
                for name, value in (
                    ("notAfter", self.not_after),
                    ("revokedAt", self.revoked_at),
                    ("role", self.role),
                    ("organisation", self.organisation),
                    ("setVersion", self.set_version),
                )
                if value is not None
            ]
            if stray:
                raise ValueError(f"{', '.join(stray)} without notBefore: a period starts somewhere")
        elif self.not_after is not None and parse_time(self.not_after) <= parse_time(
            self.not_before
        ):
            raise ValueError("notAfter is not after notBefore")
        return self


class KeyringDocument(WireModel):
    """A keyring file: the keys a verifier knows and the issuers it trusts."""

    hatp_version: str
    trusted_issuers: list[str] = Field(min_length=1)
    keys: list[KeyringEntry]
