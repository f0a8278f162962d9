"""Wire types for public keys and keyrings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hatp.model._base import Kid, WireModel


class PublicJwk(WireModel):
    """An Ed25519 public key as a JWK (RFC 8037): ``kty: OKP``, ``crv: Ed25519``."""

    kty: Literal["OKP"]
    crv: Literal["Ed25519"]
    x: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="32 raw bytes, base64url")
    kid: Kid


class KeyringEntry(PublicJwk):
    """A public key in a keyring, with the issuer that vouches for it."""

    issuer: str = Field(min_length=1, max_length=512)


class KeyringDocument(WireModel):
    """A keyring file: the keys a verifier knows and the issuers it trusts."""

    hatp_version: str
    trusted_issuers: list[str] = Field(min_length=1)
    keys: list[KeyringEntry]
