"""``hatp serve`` and another organisation: ``[trust]`` fetches a partner's key set at
start (pinned by its root's thumbprint) and adds its keys to the keyring, ``[api]
signed`` serves requests signed by those keys, and ``[coordinator.gateways]`` sends a
partner's approval groups to the partner's gateway."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hatp.clock import SystemClock, format_time
from hatp.demo import COORDINATOR, GATEWAY, TripWorld, trip_plan
from hatp.demo._people import DIRECTORY
from hatp.errors import ConfigInvalid
from hatp.evidence import SigningKey, digest, sign_key_set, thumbprint
from hatp.http import load_config, open_services, sign_request
from hatp.model import KEYSET_PATH, parse_plan
from threaded_server import serving_in_thread

GLOBEX = "https://globex.com"
GLOBEX_COORDINATOR = "https://coordinator.globex.com"
ROOT = SigningKey.from_seed(bytes([61]) * 32, "globex-root-1")
COORD = SigningKey.from_seed(bytes([62]) * 32, "globex-coordinator-1")
REVOKED = SigningKey.from_seed(bytes([63]) * 32, "globex-coordinator-0")
STRANGER = SigningKey.from_seed(bytes([64]) * 32, "globex-coordinator-9")
PARTICIPANT = SigningKey.from_seed(bytes([65]) * 32, "globex-warehouse-1")
PIN = thumbprint(ROOT.public)
BOUND = 30.0


def _globex_set(organisation: str = GLOBEX) -> bytes:
    """globex's key set: its coordinator's key, and an older one revoked an hour ago."""
    now = SystemClock().now()
    since = format_time(now - timedelta(days=30))
    doc = sign_key_set(
        ROOT,
        organisation=organisation,
        version=2,
        issued_at=now - timedelta(minutes=1),
        expires_at=now + timedelta(days=7),
        keys=[
            {**COORD.public.to_jwk(), "role": "coordinator", "issuer": GLOBEX_COORDINATOR,
             "notBefore": since, "status": "active"},
            {**REVOKED.public.to_jwk(), "role": "coordinator", "issuer": GLOBEX_COORDINATOR,
             "notBefore": since, "status": "revoked",
             "revokedAt": format_time(now - timedelta(hours=1))},
            {**PARTICIPANT.public.to_jwk(), "role": "participant",
             "issuer": "mcp://warehouse.globex.com", "notBefore": since, "status": "active"},
        ],
    )  # fmt: skip
    return json.dumps(doc).encode()


@contextlib.contextmanager
def _publishing(body: bytes) -> Iterator[str]:
    """globex publishing ``body`` at its well-known path on 127.0.0.1; its base URL."""

    async def key_set(_: Request) -> Response:
        return Response(body, media_type="application/json")

    with serving_in_thread(Starlette(routes=[Route(KEYSET_PATH, key_set)])) as url:
        yield url


def _setup(folder: Path, **sections: str | None) -> Path:
    """acme's deployment in ``folder`` and its settings file (``sections`` add or replace
    whole tables by name; ``None`` drops one)."""
    with TripWorld.open(folder / "world", SystemClock()) as world:
        world.directory.save(folder / "directory.json")
        world.keyring.save(folder / "keyring.json")
    tables: dict[str, str | None] = {
        "server": 'keyring = "keyring.json"\ndb = "serve.db"\nport = 8123',
        "gateway": f'id = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"',
        "directory": f'issuer = "{DIRECTORY}"\ncards = "directory.json"',
        "coordinator": f'id = "{COORDINATOR}"\nkey = "world/keys/coordinator.jwk"',
        **sections,
    }
    text = "".join(f"[{name}]\n{body}\n\n" for name, body in tables.items() if body is not None)
    (folder / "hatp.toml").write_text(text, encoding="utf-8")
    return folder / "hatp.toml"


def _trust(url: str, pin: str = PIN) -> str:
    return f'"{GLOBEX}" = {{ url = "{url}", pin = "{pin}" }}'


def _ask_body() -> dict[str, Any]:
    now = SystemClock().now()
    plan = trip_plan("trip-partner-1", decide_by=now + timedelta(minutes=15))
    return {
        "txnId": "trip-partner-1",
        "plan": plan,
        "planDigest": digest(parse_plan(plan).to_wire()),
        "groupId": "finance",
        "decideBy": plan["deadlines"]["decideBy"],
    }


def test_partner_settings_are_read_SERVE_CONFIG(tmp_path: Path) -> None:
    """[SERVE-CONFIG] [trust], [coordinator.gateways], [api] signed and [server]
    key_cache reach the settings."""
    coordinator = (
        f'id = "{COORDINATOR}"\nkey = "world/keys/coordinator.jwk"\n'
        '[coordinator.gateways]\n"globex.com" = { url = "http://127.0.0.1:9/", '
        'id = "https://gateway.globex.com" }'
    )
    config = load_config(
        _setup(
            tmp_path,
            coordinator=coordinator,
            trust=_trust("http://127.0.0.1:9"),
            api="signed = true",
        )
    )
    assert config.trust[GLOBEX].pin == PIN
    assert config.key_cache == tmp_path / "key-cache"
    assert config.signed_callers and config.callers is None
    assert config.coordinator is not None
    assert config.coordinator.gateways["globex.com"].id == "https://gateway.globex.com"


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"api": "signed = false"}, "api"),
        ({"trust": '"https://globex.com" = { url = "ftp://globex.com", pin = "x" }'},
         "trust.https://globex.com.url"),
        ({"trust": '"https://globex.com" = { url = "https://globex.com" }'},
         "trust.https://globex.com.pin"),
        ({"coordinator": f'id = "{COORDINATOR}"\nkey = "k"\n[coordinator.gateways]\n'
                         '"Globex Inc" = { url = "http://x/", id = "g" }'},
         "coordinator.gateways.Globex Inc"),
        ({"coordinator": f'id = "{COORDINATOR}"\nkey = "k"\n[coordinator.gateways]\n'
                         '"globex.com" = { url = "mcp://x", id = "g" }'},
         "coordinator.gateways.globex.com.url"),
    ],
)  # fmt: skip
def test_a_bad_partner_setting_is_refused_naming_its_key_SERVE_CONFIG(
    tmp_path: Path, sections: dict[str, str], key: str
) -> None:
    """[SERVE-CONFIG] an [api] that admits nobody, a key set URL that is not http(s), a
    trust without its pin, a gateway keyed by something that is not a domain or reached
    at something that is not http(s): CONFIG_INVALID naming the setting."""
    with pytest.raises(ConfigInvalid) as refused:
        load_config(_setup(tmp_path, **sections))
    assert refused.value.data["key"] == key


def test_requests_signed_by_a_trusted_partners_key_are_served_API_SIGNED(tmp_path: Path) -> None:
    """[KEYSET-FETCH] [API-SIGNED] globex's key set, fetched at start under its pin, lets
    its coordinator's signed ask in; a key it revoked, a key it never listed, and its
    participant's key (not a coordinator's) are refused 401; the set is cached under the
    pin."""

    async def go(url: str) -> list[int]:
        config = load_config(_setup(tmp_path, trust=_trust(url), api="signed = true"))
        async with open_services(config) as services:
            transport = httpx2.ASGITransport(app=services.app())
            async with httpx2.AsyncClient(transport=transport, base_url="http://t") as http:
                statuses = []
                signers = [
                    (COORD, GLOBEX_COORDINATOR),
                    (REVOKED, GLOBEX_COORDINATOR),
                    (STRANGER, GLOBEX_COORDINATOR),
                    (PARTICIPANT, "mcp://warehouse.globex.com"),
                ]
                for key, caller in signers:
                    body = httpx2.Request("POST", "http://t", json=_ask_body()).content
                    headers = sign_request(
                        key, caller, "POST", "/gateway/asks", body, SystemClock().now()
                    )
                    answer = await http.post(
                        "/gateway/asks",
                        content=body,
                        headers={**headers, "Content-Type": "application/json"},
                    )
                    statuses.append(answer.status_code)
                return statuses

    with _publishing(_globex_set()) as url:
        statuses = asyncio.run(asyncio.wait_for(go(url), BOUND))
    assert statuses == [200, 401, 401, 401]
    assert (tmp_path / "key-cache" / f"{PIN}.json").is_file()


@pytest.mark.parametrize(
    ("body", "pin", "said"),
    [
        (_globex_set(), thumbprint(STRANGER.public), "another root"),
        (_globex_set("https://initech.com"), PIN, "initech"),
    ],
)
def test_a_partner_set_that_is_not_the_one_pinned_stops_the_start_KEYSET_PIN(
    tmp_path: Path, body: bytes, pin: str, said: str
) -> None:
    """[KEYSET-PIN] [SERVE-CONFIG] a set signed by another root than pinned, or another
    organisation's set at the partner's URL: CONFIG_INVALID naming the trust entry,
    nothing served."""

    async def go(url: str) -> None:
        config = load_config(_setup(tmp_path, trust=_trust(url, pin)))
        async with open_services(config):
            pass

    with _publishing(body) as url, pytest.raises(ConfigInvalid) as refused:
        asyncio.run(asyncio.wait_for(go(url), BOUND))
    assert refused.value.data["key"] == f"trust.{GLOBEX}"
    assert said in refused.value.message


def test_a_partners_groups_go_to_its_gateway_COORD_GATEWAYS(tmp_path: Path) -> None:
    """[COORD-GATEWAYS] [coordinator.gateways]: the start-up notes say where globex's
    approval groups are asked; the served coordinator starts with the route."""
    coordinator = (
        f'id = "{COORDINATOR}"\nkey = "world/keys/coordinator.jwk"\n'
        '[coordinator.gateways]\n"globex.com" = { url = "http://127.0.0.1:9/", '
        'id = "https://gateway.globex.com" }'
    )

    async def go() -> list[str]:
        config = load_config(_setup(tmp_path, coordinator=coordinator))
        async with open_services(config) as services:
            assert services.coordinator is not None
            return services.notes

    notes = asyncio.run(asyncio.wait_for(go(), BOUND))
    assert any("approvals at globex.com: asked at its gateway" in n for n in notes)
