"""``hatp serve`` publishes the organisation's key set ([KEYSET-SERVE]): the exact bytes at
``/.well-known/hatp-keys.json``, a cache lifetime bounded by the set's expiry, and a set
that does not verify or has expired stops the start (``CONFIG_INVALID``, ``keys.set``)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from hatp.cli import app as cli
from hatp.clock import SystemClock
from hatp.demo._people import DIRECTORY
from hatp.demo.trip import GATEWAY, TripWorld
from hatp.errors import ConfigInvalid
from hatp.evidence import SigningKey, discover_key_set, sign_key_set, thumbprint
from hatp.http import ApiCallers, api_token_digest, hatp_app, load_config, open_services
from hatp.model import KEYSET_PATH
from serve_world import Served, check_answer

runner = CliRunner()

ORG = "https://acme.com"
ROOT = SigningKey.from_seed(bytes([61]) * 32, "acme-root-1")
GATEWAY_KEY = SigningKey.from_seed(bytes([62]) * 32, "gateway-2026-01")
BOUND = 30.0


def _set_bytes(
    *, expires_in: timedelta = timedelta(days=30), issued_before: timedelta = timedelta(hours=1)
) -> bytes:
    """A key set of acme, signed by its root, timed against the system clock (hatp serve's),
    as `hatp keys publish` writes it (indented JSON)."""
    now = SystemClock().now()
    key = {
        **GATEWAY_KEY.public.to_jwk(),
        "role": "gateway",
        "issuer": GATEWAY,
        "notBefore": "2026-01-01T00:00:00.000Z",
        "status": "active",
    }
    doc = sign_key_set(
        ROOT,
        organisation=ORG,
        version=7,
        issued_at=now - issued_before,
        expires_at=now + expires_in,
        keys=[key],
    )
    return (json.dumps(doc, indent=2) + "\n").encode()


def _get(served: Served, path: str = KEYSET_PATH) -> httpx2.Response:
    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.get(path)

    return served.run(go)


def _max_age(response: httpx2.Response) -> int:
    directives = dict(
        part.strip().partition("=")[::2] for part in response.headers["cache-control"].split(",")
    )
    assert "public" in directives
    return int(directives["max-age"])


# --- the route -------------------------------------------------------------------------------


def test_the_key_set_is_served_as_its_exact_bytes(serve: Any) -> None:
    """[KEYSET-SERVE] GET /.well-known/hatp-keys.json answers the file's bytes unchanged
    (indentation and all, so the signature verifies as published), as application/json,
    cacheable for an hour; a partner's discovery takes it."""
    published = _set_bytes()
    served: Served = serve(key_set=published)
    response = _get(served)
    assert response.status_code == 200
    assert response.content == published
    assert response.headers["content-type"] == "application/json"
    assert _max_age(response) == 3600
    pin = thumbprint(ROOT.public)
    verified = discover_key_set(served.BASE, pin=pin, client=_answering(response.content))
    assert (verified.organisation, verified.version) == (ORG, 7)


def _answering(body: bytes) -> httpx2.Client:
    """A client that answers the key set path with ``body`` (what the app answered: the
    app's transport is async, discovery's client sync)."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == KEYSET_PATH
        return httpx2.Response(200, content=body)

    return httpx2.Client(transport=httpx2.MockTransport(answer))


def test_the_cache_lifetime_never_passes_the_sets_expiry(serve: Any) -> None:
    """[KEYSET-SERVE] max-age is the time left before expiresAt when under an hour, and 0
    once the set has expired (served anyway: partners refuse it EXPIRED, and ask again)."""
    soon = _get(serve(key_set=_set_bytes(expires_in=timedelta(minutes=20))))
    assert 0 < _max_age(soon) <= 20 * 60
    expired = _set_bytes(expires_in=-timedelta(minutes=1), issued_before=timedelta(days=1))
    assert _max_age(_get(serve(key_set=expired))) == 0


def test_the_key_set_is_in_the_openapi_document_and_open_to_everyone(serve: Any) -> None:
    """[KEYSET-SERVE] [HTTP-OPENAPI] the route is described (its answer fits the KeySet
    schema declared), and stays open when the API takes bearer tokens only."""
    callers = ApiCallers({"agent://acme.com/bot": api_token_digest("t" * 43)})
    served: Served = serve(key_set=_set_bytes(), callers=callers)

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [await http.get("/openapi.json"), await http.get(KEYSET_PATH)]

    openapi, key_set = served.run(go)
    document = openapi.json()
    assert document["paths"][KEYSET_PATH]["get"]["operationId"] == "getKeySet"
    assert key_set.status_code == 200
    check_answer(document, KEYSET_PATH, "GET", key_set)


def test_without_a_key_set_there_is_no_route(serve: Any) -> None:
    """[KEYSET-SERVE] no key set given: the path is 404 and not in the OpenAPI document."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [await http.get(KEYSET_PATH), await http.get("/openapi.json")]

    missing, openapi = served.run(go)
    assert (missing.status_code, missing.json()["code"]) == (404, "NOT_FOUND")
    assert KEYSET_PATH not in openapi.json()["paths"]


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"type": "hatp.keyset"}'])
def test_hatp_app_refuses_what_is_not_a_key_set(body: bytes) -> None:
    """[KEYSET-SERVE] hatp_app serves only a document of the key set form."""
    with pytest.raises(ValueError, match="not a key set"):
        hatp_app(key_set=body)


def test_a_key_set_alone_is_served() -> None:
    """[KEYSET-SERVE] hatp_app(key_set=…) alone serves the set (a process publishing the
    organisation's well-known documents only)."""
    published = _set_bytes()

    async def go() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=hatp_app(key_set=published))
        async with httpx2.AsyncClient(transport=transport, base_url="http://h.test") as http:
            return await http.get(KEYSET_PATH)

    assert asyncio.run(asyncio.wait_for(go(), BOUND)).content == published


# --- [keys] set in hatp serve's settings ------------------------------------------------------


def _setup(folder: Path, key_set: bytes | None, table: str = 'set = "hatp-keys.json"') -> Path:
    """A directory-only deployment in ``folder`` with ``[keys]`` naming ``hatp-keys.json``,
    written with ``key_set`` (none: no file)."""
    with TripWorld.open(folder / "world", SystemClock()) as world:
        world.directory.save(folder / "directory.json")
        world.keyring.save(folder / "keyring.json")
    if key_set is not None:
        (folder / "hatp-keys.json").write_bytes(key_set)
    (folder / "hatp.toml").write_text(
        '[server]\nkeyring = "keyring.json"\ndb = "serve.db"\nport = 0\n\n'
        f'[directory]\nissuer = "{DIRECTORY}"\ncards = "directory.json"\n'
        f'gateway = "{GATEWAY}"\n\n[keys]\n{table}\n',
        encoding="utf-8",
    )
    return folder / "hatp.toml"


def test_a_served_config_with_a_key_set_answers_it(tmp_path: Path) -> None:
    """[KEYSET-SERVE] [SERVE-CONFIG] keys.set, relative to the file, is verified at start
    and served byte for byte; the banner names its version and expiry."""
    published = _set_bytes()
    config = load_config(_setup(tmp_path, published))
    assert config.key_set == tmp_path / "hatp-keys.json"

    async def go() -> tuple[list[str], httpx2.Response]:
        async with open_services(config) as services:
            transport = httpx2.ASGITransport(app=services.app())
            async with httpx2.AsyncClient(transport=transport, base_url="http://h.test") as http:
                return services.notes, await http.get(KEYSET_PATH)

    notes, response = asyncio.run(asyncio.wait_for(go(), BOUND))
    assert response.content == published
    assert any(f"{KEYSET_PATH}, the key set of {ORG} version 7" in note for note in notes)


def _tampered() -> bytes:
    doc = json.loads(_set_bytes())
    doc["keys"][0]["issuer"] = "https://evil.example"
    return json.dumps(doc).encode()


def _unsigned() -> bytes:
    doc = json.loads(_set_bytes())
    del doc["signature"]
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("key_set", "fragment"),
    [
        (lambda: _set_bytes(expires_in=-timedelta(seconds=1), issued_before=timedelta(days=1)),
         "expired"),
        (_tampered, "does not verify"),
        (_unsigned, "no signature"),
        (lambda: b"not json", "not JSON"),
        (lambda: None, "cannot read"),
    ],
    ids=["expired", "tampered", "unsigned", "not-json", "missing"],
)  # fmt: skip
def test_a_key_set_that_does_not_verify_stops_the_start(
    tmp_path: Path, key_set: Any, fragment: str
) -> None:
    """[KEYSET-SERVE] an expired set, one changed after signing, an unsigned one, a file
    that is not JSON or not there: CONFIG_INVALID naming keys.set, nothing served."""
    config = load_config(_setup(tmp_path, key_set()))

    async def go() -> None:
        async with open_services(config):
            raise AssertionError("served a key set that does not verify")

    with pytest.raises(ConfigInvalid) as refused:
        asyncio.run(asyncio.wait_for(go(), BOUND))
    assert refused.value.data["key"] == "keys.set"
    assert refused.value.message.startswith("keys.set: ")
    assert fragment in refused.value.message, refused.value.message
    assert not (tmp_path / "serve.db").exists()  # refused before the store was opened


def test_hatp_serve_with_an_expired_key_set_exits_2(tmp_path: Path) -> None:
    """[KEYSET-SERVE] [SERVE-CLI] the command prints the code and the setting, exit 2."""
    expired = _set_bytes(expires_in=-timedelta(seconds=1), issued_before=timedelta(days=1))
    result = runner.invoke(cli, ["serve", "--config", str(_setup(tmp_path, expired))])
    assert result.exit_code == 2
    assert "CONFIG_INVALID" in result.stderr and "keys.set" in result.stderr


def test_an_unknown_key_in_the_keys_table_is_refused(tmp_path: Path) -> None:
    """[SERVE-CONFIG] [keys] takes `set` alone."""
    with pytest.raises(ConfigInvalid) as refused:
        load_config(_setup(tmp_path, _set_bytes(), table='set = "hatp-keys.json"\nsets = "x.json"'))
    assert refused.value.data["key"] == "keys.sets"
