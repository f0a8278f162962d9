"""The extension's settings: what a hatp server says about itself, and how a caller checks it.

A server advertises ``capabilities.extensions["dev.hatp/hatp"]`` (a
:class:`HatpAdvert`): the protocol version, its roles, its id, for a
participant its operations with their tiers and lease limits, and its public
keys. A caller checks the advert before it sends a single hatp request
(:func:`check_advert`), and refuses a server that does not fit with
``PEER_INCOMPATIBLE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import mcp_types as types
from mcp.client import Client
from pydantic import Field, ValidationError

from hatp import _checks
from hatp.errors import HatpError, PeerIncompatible
from hatp.evidence import Keyring, PublicKey
from hatp.mcp._wire import EXTENSION_ID
from hatp.model import Tier, WireModel, first_error
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "HatpAdvert",
    "OperationAdvert",
    "Role",
    "advertised",
    "check_advert",
    "check_server",
]

Role = Literal["participant", "gateway", "directory", "coordinator"]


class OperationAdvert(WireModel):
    """One operation a participant offers: its tier and, for a hold, its lease limits."""

    tier: Tier = Field(strict=False)
    max_lease_seconds: float | None = None
    max_hold_seconds: float | None = None


class HatpAdvert(WireModel):
    """The settings under ``capabilities.extensions["dev.hatp/hatp"]``."""

    hatp_version: str
    id: str = Field(min_length=1, max_length=512)
    roles: list[Role] = Field(min_length=1)
    operations: dict[str, OperationAdvert] = Field(default_factory=dict)
    keys: list[dict[str, str]] = Field(default_factory=list)

    def settings(self) -> dict[str, Any]:
        """The extension's settings: the wire form, members with no value left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def check_advert(
    extensions: Mapping[str, Any] | None,
    *,
    role: Role,
    server_id: str,
    keyring: Keyring,
) -> HatpAdvert:
    """Check what a server advertises before using it as ``role`` named ``server_id``.

    Every advertised key must be in ``keyring`` under ``server_id`` and
    trusted there: a server cannot bring its own trust.

    Raises:
        PeerIncompatible: ``data.reason`` ``NO_EXTENSION``, ``SETTINGS``,
            ``VERSION``, ``ROLE``, ``IDENTITY`` or ``KEY_UNTRUSTED``.
    """
    where = {"server": server_id}
    settings = (extensions or {}).get(EXTENSION_ID)
    if settings is None:
        if _checks.is_on("MCP-ADVERTISED"):
            raise PeerIncompatible(
                f"{server_id} does not advertise the {EXTENSION_ID} extension: it is not a "
                "hatp server (serve hatp on it with hatp.mcp.serve_hatp / serve_gateway)",
                reason="NO_EXTENSION",
                **where,
            )
        return _unchecked(server_id, role)
    try:
        advert = HatpAdvert.model_validate(settings)
    except ValidationError as exc:
        if not _checks.is_on("MCP-ADVERTISED"):
            return _unchecked(server_id, role)
        at, msg = first_error(exc)
        raise PeerIncompatible(
            f"{server_id}'s {EXTENSION_ID} settings are not a HatpAdvert: {at}: {msg}",
            reason="SETTINGS",
            **where,
        ) from None
    if advert.hatp_version != PROTOCOL_VERSION and _checks.is_on("MCP-VERSION"):
        raise PeerIncompatible(
            f"{server_id} speaks hatp {advert.hatp_version}; this build speaks {PROTOCOL_VERSION}",
            reason="VERSION",
            found=advert.hatp_version,
            supported=[PROTOCOL_VERSION],
            **where,
        )
    if role not in advert.roles and _checks.is_on("MCP-ROLE"):
        raise PeerIncompatible(
            f"{server_id} advertises the roles {advert.roles}, not {role}",
            reason="ROLE",
            role=role,
            **where,
        )
    if advert.id != server_id and _checks.is_on("MCP-IDENTITY"):
        raise PeerIncompatible(
            f"the server reached as {server_id} says it is {advert.id}; connect to the "
            "right server, or name it by the id it advertises",
            reason="IDENTITY",
            advertised=advert.id,
            **where,
        )
    for jwk in advert.keys:
        _check_key(jwk, server_id, keyring)
    return advert


def check_server(client: Client, *, role: Role, server_id: str, keyring: Keyring) -> HatpAdvert:
    """:func:`check_advert` on what the server behind ``client`` advertised.

    Raises:
        PeerIncompatible: as :func:`check_advert`.
        RuntimeError: ``client`` is not entered (``async with``).
    """
    return check_advert(
        advertised(client.server_capabilities), role=role, server_id=server_id, keyring=keyring
    )


def advertised(capabilities: types.ServerCapabilities | None) -> dict[str, Any]:
    """What a server advertises: its ``capabilities.extensions``, over what it mirrors under
    ``capabilities.experimental`` for sessions on 2025 protocol versions."""
    if capabilities is None:
        return {}
    return {**(capabilities.experimental or {}), **(capabilities.extensions or {})}


def _unchecked(server_id: str, role: Role) -> HatpAdvert:
    # With the check off (planted-violation tests only) the caller takes the
    # server at its name, as a client that never looked would.
    return HatpAdvert(hatp_version=PROTOCOL_VERSION, id=server_id, roles=[role])


def _check_key(jwk: Mapping[str, str], server_id: str, keyring: Keyring) -> None:
    kid = str(jwk.get("kid", ""))
    try:
        key = PublicKey.from_jwk(jwk)
        known, issuer = keyring.resolve(key.kid)
    except HatpError as exc:
        if not _checks.is_on("MCP-KEYS"):
            return
        raise PeerIncompatible(
            f"{server_id} advertises key {kid!r}, which this keyring does not trust "
            f"({exc.message}); add the server's public key under {server_id}",
            reason="KEY_UNTRUSTED",
            server=server_id,
            kid=kid,
        ) from None
    if (issuer != server_id or known.to_jwk() != key.to_jwk()) and _checks.is_on("MCP-KEYS"):
        raise PeerIncompatible(
            f"{server_id} advertises key {kid!r}, which this keyring holds as "
            f"{issuer}'s{'' if known.to_jwk() == key.to_jwk() else ' with other key material'}",
            reason="KEY_UNTRUSTED",
            server=server_id,
            kid=kid,
            issuer=issuer,
        )
