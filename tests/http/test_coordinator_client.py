"""``CoordinatorClient`` against hatp serve's app in process, with ``[api] callers``: a
transaction begun, followed and listed; ``GET /coordinator/txns`` lists an agent's own
transactions alone [API-OWNER]; every refusal comes back as its typed hatp error."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from hatp._checks import unsafe_switched_off
from hatp.demo.trip import INITIATOR
from hatp.errors import (
    CallerRefused,
    InvalidJson,
    PeerIncompatible,
    PeerUnavailable,
    TransactionUnknown,
    Unauthenticated,
)
from hatp.evidence import verify_record
from hatp.http import ApiCallers, CoordinatorClient, new_api_token
from serve_world import Served, check_answer

OTHER_AGENT = "agent://acme.com/expense-bot"
SERVICE = "https://coordinator.other.example"
TOKENS = {who: new_api_token() for who in (INITIATOR, OTHER_AGENT, SERVICE)}
CALLERS = ApiCallers({who: kept for who, (_, kept) in TOKENS.items()})


def _client(http: httpx2.AsyncClient, who: str | None) -> CoordinatorClient:
    token = None if who is None else TOKENS[who][0]
    return CoordinatorClient(Served.BASE, token=token, client=http)


async def _settled(served: Served) -> None:
    for task in served.app.state.hatp_coordinator.running():
        await task


def test_an_agent_lists_only_its_own_transactions_API_OWNER(serve: Any) -> None:
    """[API-OWNER] the bot lists the bot's plans, the other agent its own, a service every
    one; newest first, by state, within the limit; each answer fits the OpenAPI schema."""
    served: Served = serve(callers=CALLERS)
    mine, theirs = served.plan("trip-bot-1"), served.plan("trip-other-1", seat="15A")
    theirs["initiator"] = OTHER_AGENT

    async def go(http: httpx2.AsyncClient) -> dict[str, list[Any]]:
        await _client(http, INITIATOR).begin(mine)
        await _client(http, OTHER_AGENT).begin(theirs)
        await _settled(served)
        document = (await http.get("/openapi.json")).json()
        auth = {"Authorization": f"Bearer {TOKENS[INITIATOR][0]}"}
        answer = await http.get("/coordinator/txns?state=committed&limit=5", headers=auth)
        check_answer(document, "/coordinator/txns", "GET", answer)
        refused = await http.get("/coordinator/txns?limit=0", headers=auth)
        check_answer(document, "/coordinator/txns", "GET", refused)
        return {
            "bot": await _client(http, INITIATOR).list(),
            "other": await _client(http, OTHER_AGENT).list(),
            "service": await _client(http, SERVICE).list(),
            "newest": await _client(http, SERVICE).list(limit=1),
            "committed": await _client(http, SERVICE).list(state="committed"),
        }

    found = served.run(go)
    ids = {who: [t["txnId"] for t in rows] for who, rows in found.items()}
    assert ids == {
        "bot": ["trip-bot-1"],
        "other": ["trip-other-1"],
        "service": ["trip-other-1", "trip-bot-1"],
        "newest": ["trip-other-1"],
        "committed": [t["txnId"] for t in found["service"] if t["state"] == "committed"],
    }
    assert "trip-bot-1" in ids["committed"]
    assert found["bot"][0]["initiator"] == INITIATOR


def test_with_the_owner_check_switched_off_an_agent_lists_every_transaction(
    serve: Any,
) -> None:
    """[API-OWNER] planted: unchecked, the other agent's token lists the bot's plans too
    (so the test above proves the check)."""
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        await _client(http, INITIATOR).begin(served.plan("trip-bot-2"))
        with unsafe_switched_off("API-OWNER"):
            return await _client(http, OTHER_AGENT).list()

    assert [t["txnId"] for t in served.run(go)] == ["trip-bot-2"]


def test_a_transaction_is_begun_followed_and_its_record_verifies(serve: Any) -> None:
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> tuple[dict[str, Any], dict[str, Any], Any]:
        client = _client(http, INITIATOR)
        begun = await client.begin(served.plan("trip-client-1"))
        await _settled(served)
        return begun, await client.state("trip-client-1"), await client.record("trip-client-1")

    begun, state, record = served.run(go)
    assert begun["txnId"] == "trip-client-1"
    assert state == {"txnId": "trip-client-1", "state": "committed"}
    assert verify_record(record, served.keyring).ok


def test_every_refusal_comes_back_as_its_typed_error(serve: Any) -> None:
    """No token: UNAUTHENTICATED; another agent's transaction: CALLER_REFUSED; an unknown
    one: TXN_UNKNOWN; a bad list: INVALID_JSON; each with the server's data."""
    served: Served = serve(callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> list[Exception]:
        await _client(http, INITIATOR).begin(served.plan("trip-typed-1"))
        errors: list[Exception] = []
        for call in (
            _client(http, None).list(),
            _client(http, OTHER_AGENT).state("trip-typed-1"),
            _client(http, SERVICE).record("trip-none"),
            _client(http, SERVICE).list(state="bogus"),
        ):
            try:
                await call
            except Exception as exc:  # what the client raised, whatever it is
                errors.append(exc)
        await _settled(served)
        return errors

    unauthenticated, refused, unknown, invalid = served.run(go)
    assert isinstance(unauthenticated, Unauthenticated)
    assert unauthenticated.data["reason"] == "NO_TOKEN"
    assert isinstance(refused, CallerRefused) and refused.data["caller"] == OTHER_AGENT
    assert isinstance(unknown, TransactionUnknown)
    assert isinstance(invalid, InvalidJson) and invalid.data["where"] == "/state"


def test_no_answer_is_peer_unavailable_and_another_api_peer_incompatible() -> None:
    """A transport error: PEER_UNAVAILABLE naming the server; a 5xx without a hatp body:
    PEER_UNAVAILABLE; a 404 or a 200 that is not the coordinator API's: PEER_INCOMPATIBLE."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if path.endswith("/down"):
            raise httpx2.ConnectError("refused", request=request)
        if path.endswith("/boom"):
            return httpx2.Response(502, text="bad gateway")
        if path.endswith("/html"):
            return httpx2.Response(200, text="<html>")
        return httpx2.Response(404, text="not here")

    async def go() -> list[Exception]:
        transport = httpx2.MockTransport(answer)
        errors: list[Exception] = []
        async with httpx2.AsyncClient(transport=transport) as http:
            client = CoordinatorClient("http://elsewhere.test", client=http)
            for txn_id in ("down", "boom", "html", "other"):
                with pytest.raises(Exception) as raised:
                    await client.state(txn_id)
                errors.append(raised.value)
        return errors

    down, boom, html, other = asyncio.run(go())
    assert isinstance(down, PeerUnavailable) and "http://elsewhere.test" in down.message
    assert down.data["server"] == "http://elsewhere.test"
    assert isinstance(boom, PeerUnavailable)
    assert isinstance(html, PeerIncompatible) and html.reason == "METHOD"
    assert isinstance(other, PeerIncompatible) and other.reason == "METHOD"
