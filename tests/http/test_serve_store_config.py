"""``hatp serve``'s ``[store]`` table bounds every wait on the database, and the health
endpoints of an app with and without a store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hatp.clock import SystemClock
from hatp.demo import GATEWAY, TripWorld
from hatp.demo._people import DIRECTORY
from hatp.errors import ConfigInvalid
from hatp.http import hatp_app, open_services, parse_config
from hatp.store import StoreLimits


def _config(tmp_path: Path, store: dict[str, Any] | None = None) -> Any:
    """acme's gateway and directory in ``tmp_path``, with ``store`` as the [store] table."""
    with TripWorld.open(tmp_path / "world", SystemClock()) as world:
        world.directory.save(tmp_path / "directory.json")
        world.keyring.save(tmp_path / "keyring.json")
    doc: dict[str, Any] = {
        "server": {"db": "serve.db", "keyring": "keyring.json"},
        "gateway": {"id": GATEWAY, "key": "world/keys/gateway.jwk"},
        "directory": {"issuer": DIRECTORY, "cards": "directory.json"},
    }
    if store is not None:
        doc["store"] = store
    return parse_config(doc, tmp_path)


def test_the_store_table_sets_every_bound_and_defaults_to_the_stores_SERVE_CONFIG(
    tmp_path: Path,
) -> None:
    """[SERVE-CONFIG] [STORE-LIMITS] what is not set keeps StoreLimits' default."""
    assert _config(tmp_path).store == StoreLimits()
    read = _config(tmp_path, {"call_seconds": 2, "statement_seconds": 1.5, "workers": 3})
    assert read.store == StoreLimits(call_seconds=2, statement_seconds=1.5, workers=3)


@pytest.mark.parametrize(
    ("store", "key"),
    [
        ({"call_seconds": 0}, "store.call_seconds"),
        ({"lock_seconds": -1}, "store.lock_seconds"),
        ({"busy_seconds": "15"}, "store.busy_seconds"),
        ({"workers": 0}, "store.workers"),
        ({"timeout": 5}, "store.timeout"),
    ],
)
def test_a_wait_without_a_bound_is_refused_naming_it_SERVE_CONFIG(
    tmp_path: Path, store: dict[str, Any], key: str
) -> None:
    """[SERVE-CONFIG] not a positive number of seconds, or no such setting."""
    with pytest.raises(ConfigInvalid) as caught:
        _config(tmp_path, store)
    assert caught.value.data["key"] == key
    assert caught.value.message.startswith(f"config: {key}")


def test_the_store_hatp_serve_opens_has_the_files_bounds_SERVE_CONFIG(tmp_path: Path) -> None:
    """[SERVE-CONFIG] the settings reach the store the roles use."""
    config = _config(tmp_path, {"call_seconds": 3, "busy_seconds": 2})

    async def opened() -> StoreLimits:
        async with open_services(config) as services:
            assert services.gateway is not None
            return services.gateway.asks.store.limits

    assert asyncio.run(opened()) == StoreLimits(call_seconds=3, busy_seconds=2)


def test_an_app_without_a_store_is_live_and_ready_HTTP_HEALTH(tmp_path: Path) -> None:
    """[HTTP-HEALTH] a directory alone uses no store: /readyz has nothing to wait for."""
    world = TripWorld.open(tmp_path, SystemClock())
    app = hatp_app(directory=world.directory)
    assert world.directory.issuer == DIRECTORY

    async def ask() -> list[httpx2.Response]:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://hatp.test") as http:
            return [await http.get("/healthz"), await http.get("/readyz")]

    try:
        live, ready = asyncio.run(ask())
    finally:
        world.close()
    assert (live.status_code, live.json()) == (200, {"status": "live"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
