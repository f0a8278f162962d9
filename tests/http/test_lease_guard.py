"""``LeaseGuard`` on its own: what it guards, what it hands the route, what it answers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp.errors import LeaseRequired, MutationInvalid
from hatp.http import (
    FENCE_HEADER,
    LEASE_HEADER,
    RECEIPT_HEADER,
    LeaseGuard,
    attach_receipt,
    decode_header,
    encode_header,
    presented_lease,
)


async def _echo(request: Request) -> Response:
    presented = presented_lease(request)
    if request.query_params.get("receipt"):
        attach_receipt(request, {"kind": "lease-commit", "n": 1})
    if request.query_params.get("fail"):
        raise MutationInvalid("the action refused its params", action="x")
    return JSONResponse({"doc": presented.doc.decode("latin-1"), "fence": presented.fence_token})


async def _open(request: Request) -> Response:
    return JSONResponse({"method": request.method, "path": request.url.path})


def _app() -> Starlette:
    return Starlette(
        routes=[
            Route("/tickets/{id}", _echo, methods=["POST", "PATCH", "DELETE"]),
            Route("/tickets", _echo, methods=["PUT"]),
            Route("/ticketsx/{id}", _open, methods=["POST"]),
            Route("/tickets/{id}", _open, methods=["GET", "OPTIONS"]),
        ],
        middleware=[Middleware(LeaseGuard, guarded=["/tickets/"])],
    )


def _send(method: str, path: str, headers: Any = None) -> httpx2.Response:
    async def go() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=_app())
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as http:
            return await asyncio.wait_for(http.request(method, path, headers=headers), 30)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("method", "path", "guarded"),
    [
        ("POST", "/tickets/1", True),
        ("patch", "/tickets/1", True),
        ("DELETE", "/tickets/1", True),
        ("PUT", "/tickets", True),
        ("PUT", "/tickets/a/b", True),
        ("GET", "/tickets/1", False),
        ("HEAD", "/tickets/1", False),
        ("OPTIONS", "/tickets/1", False),
        ("POST", "/ticketsx/1", False),
        ("POST", "/leases", False),
    ],
)
def test_the_guard_takes_mutating_methods_on_its_prefixes(
    method: str, path: str, guarded: bool
) -> None:
    """[HTTP-LEASE-GUARD] a prefix guards itself and what lies below it, not its siblings."""
    guard = LeaseGuard(_app(), guarded=["/tickets/"])
    assert guard.guards(method, path) is guarded


def test_unguarded_requests_reach_the_app_untouched() -> None:
    """[HTTP-LEASE-GUARD] no lease asked of a read or of a sibling path."""
    assert _send("POST", "/ticketsx/1").json() == {"method": "POST", "path": "/ticketsx/1"}
    assert _send("OPTIONS", "/tickets/1").status_code == 200


def test_the_route_gets_the_decoded_lease_and_the_fence_token() -> None:
    """[HTTP-LEASE-HEADER] [HTTP-FENCE-TOKEN] the header's document, the token as an int."""
    value = encode_header({"kind": "compensation-lease"})
    answer = _send("POST", "/tickets/1", {LEASE_HEADER: value, FENCE_HEADER: "12"})
    assert answer.json() == {"doc": '{"kind":"compensation-lease"}', "fence": 12}
    assert RECEIPT_HEADER not in answer.headers
    bare = _send("PATCH", "/tickets/1", {LEASE_HEADER: "%%%"})
    assert bare.json() == {"doc": "%%%", "fence": None}


def test_the_receipt_the_route_hands_back_goes_out_in_its_header() -> None:
    """[HTTP-RECEIPT] base64url of the receipt's canonical JSON."""
    answer = _send("POST", "/tickets/1?receipt=1", {LEASE_HEADER: "e30"})
    assert decode_header(answer.headers[RECEIPT_HEADER]) == b'{"kind":"lease-commit","n":1}'


def test_a_hatp_error_of_the_route_is_its_typed_json_answer() -> None:
    """[HTTP-LEASE-GUARD] the status of the table, the wire form as the body; a receipt
    already handed back still goes out."""
    failed = _send("POST", "/tickets/1?fail=1", {LEASE_HEADER: "e30"})
    assert failed.status_code == 422
    assert failed.json() == {
        "code": "MUTATION_INVALID",
        "message": "the action refused its params",
        "data": {"action": "x"},
    }
    assert RECEIPT_HEADER not in failed.headers
    committed = _send("POST", "/tickets/1?fail=1&receipt=1", {LEASE_HEADER: "e30"})
    assert committed.status_code == 422
    assert RECEIPT_HEADER in committed.headers


def test_a_lease_sent_in_two_header_lines_is_one_value_the_verifier_refuses() -> None:
    """[HTTP-LEASE-HEADER] RFC 9110 joins them with a comma: no base64url, bytes as sent."""
    headers = [(LEASE_HEADER, "e30"), (LEASE_HEADER, "e30")]
    assert _send("POST", "/tickets/1", headers).json()["doc"] == "e30,e30"


def test_a_route_reached_without_a_guard_gets_no_lease() -> None:
    """[HTTP-LEASE-REQUIRED] fail closed: presented_lease and attach_receipt refuse."""
    request = Request({"type": "http", "method": "POST", "path": "/x", "headers": []})
    with pytest.raises(LeaseRequired):
        presented_lease(request)
    with pytest.raises(LeaseRequired):
        attach_receipt(request, {"kind": "lease-commit"})


@pytest.mark.parametrize(
    ("guarded", "methods"),
    [([], ["POST"]), (["tickets"], ["POST"]), (["/tickets"], [])],
    ids=["no-path", "relative-path", "no-method"],
)
def test_a_guard_that_guards_nothing_is_refused(guarded: list[str], methods: list[str]) -> None:
    with pytest.raises(ValueError):
        LeaseGuard(_app(), guarded=guarded, methods=methods)
