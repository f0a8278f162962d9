"""The ``signature`` member every signed object carries."""

from __future__ import annotations

from pydantic import Field

from hatp.model._base import WireModel


class Signature(WireModel):
    """``{alg, kid, sig}``: Ed25519 over the canonical bytes of the object without it."""

    alg: str = Field(description='"Ed25519"; anything else is refused')
    kid: str = Field(description="the signing key's id, looked up in the keyring")
    sig: str = Field(description="64 signature bytes, unpadded base64url")
