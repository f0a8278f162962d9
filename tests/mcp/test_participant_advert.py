"""What a participant advertises over MCP, and every advert a caller refuses before using it.

Each planted advert breaks one rule; ``mcp_participant`` refuses it with
``PEER_INCOMPATIBLE`` and the reason, and with that rule's check switched
off (``hatp._checks.unsafe_switched_off``) the same advert is taken: proof
that the named check is what refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer

from hatp._checks import unsafe_switched_off
from hatp.errors import HatpError, PeerIncompatible
from hatp.evidence import Keyring, SigningKey
from hatp.mcp import EXTENSION_ID, HatpAdvert, ParticipantExtension, mcp_participant
from hatp.participant import ParticipantServer
from participant.ops import AIRLINE, KEY, keyring, run

Connect = Callable[..., Any]
HOTEL = "mcp://hotel.example"


class Advertise(Extension):
    """A server's hatp advert, exactly as given (and nothing served)."""

    identifier = EXTENSION_ID

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._settings = dict(settings)

    def settings(self) -> dict[str, Any]:
        return self._settings


def test_the_advert_names_the_participant_its_operations_their_limits_and_its_keys(
    airline_mcp: MCPServer, connect: Connect
) -> None:
    async def go() -> dict[str, Any]:
        async with connect(airline_mcp) as client:
            link = await mcp_participant(AIRLINE, client, keyring())
            assert link.advert == HatpAdvert.model_validate(
                client.server_capabilities.extensions[EXTENSION_ID]  # type: ignore[index]
            )
            return dict(client.server_capabilities.extensions[EXTENSION_ID])  # type: ignore[index]

    assert run(go()) == {
        "hatpVersion": "0.1",
        "id": AIRLINE,
        "roles": ["participant"],
        "operations": {
            "hold_seat": {"tier": "hold", "maxLeaseSeconds": 600.0, "maxHoldSeconds": 900.0},
            "add_event": {"tier": "compensate"},
            "charge_card": {"tier": "final"},
            # Every participant takes back its compensate-tier steps (§28 [PART-UNDO-OFFER]).
            "hatp.compensate": {
                "tier": "hold",
                "maxLeaseSeconds": 1200.0,
                "maxHoldSeconds": 1800.0,
            },
        },
        "keys": [KEY.public.to_jwk()],
    }


@dataclass(frozen=True)
class Planted:
    """One advert a caller must refuse: the server, the id it is asked for, the keyring."""

    reason: str
    check: str
    server: Callable[[ParticipantServer], MCPServer]
    participant_id: str = AIRLINE
    trust: Callable[[], Keyring] = keyring


def _advert(airline: ParticipantServer, **changes: Any) -> MCPServer:
    settings = ParticipantExtension(airline, keys=[KEY.public]).settings()
    return MCPServer("planted", extensions=[Advertise({**settings, **changes})])


OTHER = SigningKey.from_seed(bytes([7]) * 32, "mcp://airline.example#key-2")
PLANTED: dict[str, Planted] = {
    "no-extension": Planted("NO_EXTENSION", "MCP-ADVERTISED", lambda a: MCPServer("plain")),
    "settings-not-an-advert": Planted(
        "SETTINGS", "MCP-ADVERTISED", lambda a: _advert(a, roles="participant")
    ),
    "wrong-version": Planted("VERSION", "MCP-VERSION", lambda a: _advert(a, hatpVersion="9.9")),
    "wrong-role": Planted("ROLE", "MCP-ROLE", lambda a: _advert(a, roles=["gateway"])),
    "wrong-id": Planted(
        "IDENTITY",
        "MCP-IDENTITY",
        lambda a: _advert(a),
        participant_id=HOTEL,
        trust=lambda: Keyring([(KEY.public, HOTEL)], trusted_issuers=[HOTEL]),
    ),
    "key-unknown": Planted(
        "KEY_UNTRUSTED",
        "MCP-KEYS",
        lambda a: _advert(a, keys=[KEY.public.to_jwk(), OTHER.public.to_jwk()]),
    ),
    "key-of-another-issuer": Planted(
        "KEY_UNTRUSTED",
        "MCP-KEYS",
        lambda a: _advert(a),
        trust=lambda: Keyring([(KEY.public, HOTEL)], trusted_issuers=[HOTEL]),
    ),
    "key-not-trusted": Planted(
        "KEY_UNTRUSTED",
        "MCP-KEYS",
        lambda a: _advert(a),
        trust=lambda: Keyring([(KEY.public, AIRLINE)], trusted_issuers=[]),
    ),
}


def _checked(case: Planted, airline: ParticipantServer, connect: Connect) -> HatpError | None:
    """Connect to the planted server; the refusal, or ``None`` when the advert was taken."""

    async def go() -> HatpError | None:
        async with connect(case.server(airline)) as client:
            try:
                await mcp_participant(case.participant_id, client, case.trust())
            except HatpError as exc:
                return exc
        return None

    return run(go())


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_advert_is_refused_peer_incompatible(
    name: str, airline: ParticipantServer, connect: Connect
) -> None:
    """[MCP-ADVERTISED] [MCP-VERSION] [MCP-ROLE] [MCP-IDENTITY] [MCP-KEYS]"""
    case = PLANTED[name]
    refused = _checked(case, airline, connect)
    assert isinstance(refused, PeerIncompatible)
    assert refused.reason == case.reason
    assert refused.data["server"] == case.participant_id


SWITCHABLE = sorted(PLANTED)


@pytest.mark.parametrize("name", SWITCHABLE)
def test_switching_its_check_off_lets_the_planted_advert_through(
    name: str, airline: ParticipantServer, connect: Connect
) -> None:
    case = PLANTED[name]
    with unsafe_switched_off(case.check):
        assert _checked(case, airline, connect) is None, f"{name} still refused"


@pytest.mark.parametrize("name", SWITCHABLE)
def test_switching_the_other_checks_off_leaves_it_refused(
    name: str, airline: ParticipantServer, connect: Connect
) -> None:
    case = PLANTED[name]
    others = {c.check for c in PLANTED.values()} - {case.check}
    with unsafe_switched_off(*others):
        refused = _checked(case, airline, connect)
    assert isinstance(refused, PeerIncompatible) and refused.reason == case.reason
