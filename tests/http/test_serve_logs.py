"""What ``hatp serve`` logs while it serves: each request, each transaction's changes of
state, each ask's delivery and vote, and never a secret (docs/spec.md §25 [HTTP-LOG])."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from hatp._logs import configure_logging
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway import SoftwareAuthenticator
from hatp.http import SESSION_COOKIE, ApiCallers, api_token_digest, hatp_app
from hatp.model import TxnState
from web_world import BOB, WebServed, sign_in, the_ask, vote

AGENT = "agent://acme.com/travel-bot"
TOKEN = "hatp-test-token-" + "k" * 32


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Every log record at DEBUG and above, as JSON lines; the root logger given back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    configure_logging("debug", json_lines=True, stream=out)
    yield out
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


def _with_callers(served: WebServed) -> WebServed:
    """The same world served with [api] callers: the travel bot's bearer token."""
    app = hatp_app(
        gateway=served.gateway,
        directory=served.world.directory,
        coordinator=served.coordinator,
        web=served.web,
        enrolment=served.enrolment,
        callers=ApiCallers({AGENT: api_token_digest(TOKEN)}),
    )
    return dataclasses.replace(served, app=app)


def test_a_served_trip_is_logged_and_no_secret_is(served: WebServed, captured: io.StringIO) -> None:
    """[HTTP-LOG] a passkey enrolled from an invitation, a sign-in, a trip begun with a bearer
    token and approved with the passkey: the log has each request (route, status, caller),
    the transaction's begin, decision and outcome, the ask's delivery and vote; no line
    holds the bearer token, the invitation, the session cookie, a private key or the
    passkey's private key."""
    world = _with_callers(served)
    plan = world.plan("trip-logged", passkey=True)
    plan["approvals"][0]["requirement"]["tolerance"] = "0.02"
    device = SoftwareAuthenticator("localhost", f"{BOB}#device", origin=world.ORIGIN)
    invitation = world.enrolment.invite(BOB)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    seen: dict[str, Any] = {}

    async def go(http: httpx2.AsyncClient) -> None:
        begun = await http.post("/approve/api/enrol/options", json={"invite": invitation})
        challenge = b64url_decode(begun.json()["options"]["challenge"])
        enrolled = await http.post(
            "/approve/api/enrol",
            json={"invite": invitation, "credential": device.register(challenge)},
        )
        assert enrolled.status_code == 200, enrolled.text
        assert (await sign_in(http, device)).status_code == 200
        seen["cookie"] = http.cookies[SESSION_COOKIE]
        started = await http.post("/coordinator/txns", json={"plan": plan}, headers=bearer)
        assert started.status_code == 201, started.text
        voted = await vote(http, device, await the_ask(http), "approve")
        assert voted.status_code == 200, voted.text
        (outcome,) = await world.finished()
        assert outcome.state is TxnState.COMMITTED

    world.run(go)
    text = captured.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    requests = [r for r in lines if r["logger"] == "hatp.http.requests"]
    begin = next(r for r in requests if r.get("route") == "/coordinator/txns")
    assert (begin["method"], begin["status"], begin["caller"]) == ("POST", 201, AGENT)
    assert begin["durationMs"] >= 0 and begin["path"] == "/coordinator/txns"
    states = [r.get("state") for r in lines if r.get("txnId") == "trip-logged"]
    assert {"active", "committing", "committed"} <= set(states)
    assert any("delivered" in r["message"] and r.get("askId") for r in lines)
    assert any("voted" in r["message"] and r.get("askId") for r in lines)
    secrets = {
        "bearer token": TOKEN,
        "invitation": invitation,
        "session cookie": seen["cookie"],
        **{
            f"private key of {name}": key.private_jwk()["d"]
            for name, key in world.world.keys.items()
        },
        "passkey private key": _passkey_secret(device),
    }
    for what, secret in secrets.items():
        assert secret not in text, what


def _passkey_secret(device: SoftwareAuthenticator) -> str:
    """The passkey's private scalar, base64url, as it would show if it leaked."""
    return b64url_encode(device._key.private_numbers().private_value.to_bytes(32, "big"))
