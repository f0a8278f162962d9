"""The OpenAPI description of ``hatp serve``'s JSON API: a valid OpenAPI 3.1 document,
every route in it with its statuses, and real answers that fit the schemas it declares."""

from __future__ import annotations

import re
from typing import Any

import httpx2
import jsonschema
from openapi_spec_validator import validate
from starlette.routing import Route

from gateway_world import call_request, payments_server
from hatp.clock import SystemClock
from hatp.http import HTTP_STATUS, OPENAPI_VERSION
from serve_world import Served, check_answer

BOB = "human://acme.com/bob"


def _document(served: Served) -> dict[str, Any]:
    async def go(http: httpx2.AsyncClient) -> Any:
        return (await http.get("/openapi.json")).json()

    document: dict[str, Any] = served.run(go)
    return document


def test_the_document_is_valid_openapi_3_1(serve: Any) -> None:
    """[HTTP-OPENAPI] GET /openapi.json passes openapi-spec-validator as OpenAPI 3.1."""
    document = _document(serve())
    assert document["openapi"] == OPENAPI_VERSION
    validate(document)


def test_every_route_is_described_with_its_statuses(serve: Any) -> None:
    """[HTTP-OPENAPI] every route the app serves is a path of the document; each operation
    names its success status, 400 INVALID_JSON, and the status of every code it refuses with."""
    served: Served = serve()
    document = _document(served)
    for route in served.app.routes:
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+):path\}", r"{\1}", route.path)
        for method in route.methods or ():
            if method != "HEAD":
                assert method.lower() in document["paths"][path], (method, path)
    for operation in served.app.state.hatp_operations:
        path = re.sub(r"\{(\w+):path\}", r"{\1}", operation.path)
        described = document["paths"][path][operation.method.lower()]
        responses = described["responses"]
        assert str(operation.status) in responses
        assert "INVALID_JSON" in responses["400"]["x-hatp-codes"]
        for code in operation.refusals:
            statuses = {s for (c, _), s in HTTP_STATUS.items() if c == code}
            assert statuses, f"{code} is not in the status table"
            for status in statuses:
                assert code in responses[str(status)]["x-hatp-codes"], (path, code)
        if operation.method == "POST":
            assert "BODY_TOO_LARGE" in responses["413"]["x-hatp-codes"]
            assert described["requestBody"]["required"] is True


def test_real_answers_fit_the_schemas_the_document_declares(serve: Any) -> None:
    """[HTTP-OPENAPI] the answers of every route, and a refusal of each kind, validate against
    the response schema of their path, method and status; a real request body validates
    against its request schema."""
    served: Served = serve(clock=SystemClock())
    document = _document(served)
    request = call_request(served.clock, payments_server(served.world).gate)
    plan = served.plan("trip-openapi")
    checked: list[tuple[str, str, int]] = []

    async def go(http: httpx2.AsyncClient) -> None:
        async def check(path: str, method: str, url: str, **options: Any) -> Any:
            response = await http.request(method, url, **options)
            check_answer(document, path, method, response)
            checked.append((path, method, response.status_code))
            return response.json()

        await check("/", "GET", "/")
        await check("/openapi.json", "GET", "/openapi.json")
        await check("/.well-known/human-card.json", "GET", "/.well-known/human-card.json")
        asked = await check("/gateway/asks", "POST", "/gateway/asks", json=served.ask_body())
        ask = asked["answer"]["askId"]
        await check("/gateway/asks/{askId}", "GET", f"/gateway/asks/{ask}?waitSeconds=5")
        await check("/gateway/asks/{askId}", "GET", "/gateway/asks/ask-none")
        await check("/gateway/asks/{askId}", "GET", "/gateway/asks/x?waitSeconds=-1")
        await check("/gateway/estimate", "POST", "/gateway/estimate", json=served.ask_body())
        q = await check(
            "/gateway/questions", "POST", "/gateway/questions", json={"question": served.question()}
        )
        await check(
            "/gateway/questions/{askId}",
            "GET",
            f"/gateway/questions/{q['answer']['askId']}?waitSeconds=5",
        )
        c = await check("/gateway/calls", "POST", "/gateway/calls", json={"request": request})
        await check(
            "/gateway/calls/{askId}", "GET", f"/gateway/calls/{c['answer']['askId']}?waitSeconds=5"
        )
        second = await check(
            "/gateway/asks", "POST", "/gateway/asks", json=served.ask_body("trip-openapi-2")
        )
        other = second["answer"]["askId"]
        await check(
            "/gateway/asks/{askId}/tighten",
            "POST",
            f"/gateway/asks/{other}/tighten",
            json={"decideBy": second["answer"]["decideBy"]},
        )
        await check(
            "/gateway/asks/{askId}/withdraw",
            "POST",
            f"/gateway/asks/{other}/withdraw",
            json={"reason": "done"},
        )
        await check(
            "/gateway/asks/{askId}/withdraw",
            "POST",
            "/gateway/asks/x/withdraw",
            content=b"x" * (2 << 20),
            headers={"Content-Type": "application/json"},
        )
        await check(
            "/directory/resolve",
            "POST",
            "/directory/resolve",
            json={
                "address": "human://acme.com/role/finance-approver",
                "action": "approve.spend",
                "amounts": {"USD": "730.00"},
                "onBehalfOf": "human://acme.com/alice",
            },
        )
        await check(
            "/directory/resolve",
            "POST",
            "/directory/resolve",
            json={"address": "nope", "action": "a", "onBehalfOf": BOB},
        )
        await check("/directory/cards", "GET", "/directory/cards")
        await check("/directory/cards/{cardId}", "GET", f"/directory/cards/{BOB}")
        await check("/directory/cards/{cardId}", "GET", "/directory/cards/human://x.com/y")
        await check("/coordinator/txns", "POST", "/coordinator/txns", json={"plan": plan})
        await check("/coordinator/txns", "POST", "/coordinator/txns", json={"plan": plan})
        await check("/coordinator/txns", "POST", "/coordinator/txns", json={"plan": {}})
        for task in served.app.state.hatp_coordinator.running():
            await task
        await check("/coordinator/txns/{txnId}", "GET", "/coordinator/txns/trip-openapi")
        await check("/coordinator/txns", "GET", "/coordinator/txns?state=committed&limit=5")
        await check("/coordinator/txns", "GET", "/coordinator/txns?limit=0")
        await check(
            "/coordinator/txns/{txnId}/record", "GET", "/coordinator/txns/trip-openapi/record"
        )
        lock = "/coordinator/txns/trip-openapi/lock"
        held = await check(
            "/coordinator/txns/{txnId}/lock", "POST", lock, json={"owner": "ops", "seconds": 30}
        )
        fence = held["fence"]
        await check(
            "/coordinator/txns/{txnId}/lock/renew",
            "POST",
            lock + "/renew",
            json={"owner": "ops", "fence": fence + 1, "seconds": 30},
        )
        await check(
            "/coordinator/txns/{txnId}/lock/release",
            "POST",
            lock + "/release",
            json={"owner": "ops", "fence": fence},
        )

    served.run(go)
    assert {s for _, _, s in checked} >= {200, 201, 400, 404, 409, 413, 422}
    body = document["paths"]["/gateway/asks"]["post"]["requestBody"]["content"]
    schema = {**body["application/json"]["schema"], "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(served.ask_body())
