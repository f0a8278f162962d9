"""[HTTP-TYPED] [HTTP-MEDIA-TYPE] What no operation takes is refused with a typed body.

A path no route serves and a method a path does not take are ``NOT_FOUND`` and
``METHOD_NOT_ALLOWED`` (with ``Allow``), as every other refusal of the JSON API;
the approver page shows them as its HTML error page. A POST not sent as
``application/json`` is ``UNSUPPORTED_MEDIA_TYPE`` before its body is read, on
the JSON API and on a system of record's lease routes, so a form another site
posts reaches neither.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from hatp._checks import unsafe_switched_off
from hatp.errors import MethodNotAllowed, NotFound, UnsupportedMediaType, error_from_dict
from hatp.lease import RecoveryMode
from serve_world import Served
from web_world import WebServed

#: Content types a page of another site can post without asking (a "simple" request).
FORMS = [
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "text/plain",
    "application/json-patch+json",
]


def _typed(response: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "message", "data"} and body["code"] == code
    return body


def test_an_unknown_path_and_a_wrong_method_are_typed_refusals(serve: Any) -> None:
    """[HTTP-TYPED] 404 NOT_FOUND naming the path; 405 METHOD_NOT_ALLOWED naming the methods
    the path takes, also in Allow; each rebuilds as its typed error."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [
            await http.get("/gateway/nowhere"),
            await http.get("/gateway/asks"),
            await http.delete("/coordinator/txns/trip-1"),
            await http.put("/directory/resolve", json={}),
            await http.post("/"),
        ]

    unknown, get_asks, delete_txn, put_resolve, post_index = served.run(go)
    body = _typed(unknown, 404, "NOT_FOUND")
    assert body["data"] == {"path": "/gateway/nowhere"}
    assert isinstance(error_from_dict(body), NotFound)
    body = _typed(get_asks, 405, "METHOD_NOT_ALLOWED")
    assert body["data"] == {"method": "GET", "path": "/gateway/asks", "allowed": ["POST"]}
    assert get_asks.headers["allow"] == "POST"
    assert isinstance(error_from_dict(body), MethodNotAllowed)
    assert _typed(delete_txn, 405, "METHOD_NOT_ALLOWED")["data"]["allowed"] == ["GET", "HEAD"]
    _typed(put_resolve, 405, "METHOD_NOT_ALLOWED")
    _typed(post_index, 405, "METHOD_NOT_ALLOWED")


def test_the_approver_page_shows_an_unknown_path_as_its_error_page(served: WebServed) -> None:
    """[HTTP-TYPED] under /approve the refusal is the page's HTML error page (with Allow for
    a wrong method); the page's own JSON endpoints under /approve/api answer typed JSON."""

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        return [
            await http.get("/approve/nowhere"),
            await http.delete("/approve"),
            await http.get("/approve/api/nowhere"),
            await http.get("/approve/api/sign-in"),
        ]

    page, method, api, api_method = served.run(go)
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "NOT_FOUND" in page.text and "Content-Security-Policy" in page.headers
    assert method.status_code == 405 and method.headers["allow"] == "GET, HEAD"
    assert "METHOD_NOT_ALLOWED" in method.text
    _typed(api, 404, "NOT_FOUND")
    _typed(api_method, 405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize("content_type", [*FORMS, None])
def test_a_post_not_sent_as_json_is_refused_before_it_is_read(
    serve: Any, content_type: str | None
) -> None:
    """[HTTP-MEDIA-TYPE] a form's content type, or none, is 415 UNSUPPORTED_MEDIA_TYPE naming
    what was sent, though the body is the plan as JSON: nothing was begun."""
    served: Served = serve()
    plan = served.plan("trip-form")
    raw = httpx2.Request("POST", "/", json={"plan": plan}).content
    headers = {} if content_type is None else {"Content-Type": content_type}

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, httpx2.Response]:
        posted = await http.post("/coordinator/txns", content=raw, headers=headers)
        return posted, await http.get("/coordinator/txns/trip-form")

    posted, state = served.run(go)
    body = _typed(posted, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert body["data"] == {"contentType": content_type}
    assert isinstance(error_from_dict(body), UnsupportedMediaType)
    _typed(state, 404, "TXN_UNKNOWN")


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
def test_json_with_parameters_or_in_any_case_is_read(serve: Any, content_type: str) -> None:
    """[HTTP-MEDIA-TYPE] the media type is compared without its parameters, in any case."""
    served: Served = serve()
    raw = httpx2.Request("POST", "/", json={"plan": served.plan("trip-json")}).content

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.post(
            "/coordinator/txns", content=raw, headers={"Content-Type": content_type}
        )

    begun = served.run(go)
    assert begun.status_code == 201, begun.text


#: Each check this module proves by switching it off: check -> the test that does.
SWITCH_OFF_TESTS: dict[str, tuple[str, ...]] = {
    "HTTP-MEDIA-TYPE": ("test_switched_off_a_form_post_reaches_the_operation",),
}


def test_switched_off_a_form_post_reaches_the_operation(serve: Any) -> None:
    """[HTTP-MEDIA-TYPE] with the check off the same text/plain post begins the plan: the
    check is what refuses it."""
    served: Served = serve()
    raw = httpx2.Request("POST", "/", json={"plan": served.plan("trip-off")}).content

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.post(
            "/coordinator/txns", content=raw, headers={"Content-Type": "text/plain"}
        )

    assert served.run(go).status_code == 415
    with unsafe_switched_off("HTTP-MEDIA-TYPE"):
        assert served.run(go).status_code == 201


@pytest.mark.parametrize("content_type", [*FORMS, None])
def test_the_lease_routes_take_only_json(tickets: Any, content_type: str | None) -> None:
    """[HTTP-MEDIA-TYPE] POST /leases and /leases/{id}/recover sent as a form, or with no type,
    are 415 before anything is read: no lease was granted, none recovered."""
    body = {
        "resource": tickets.RESOURCE,
        "mutation": tickets.CLOSE,
        "tReqMs": 1000,
        "mode": RecoveryMode.COMPENSATING_ACTION.value,
    }
    raw = httpx2.Request("POST", "/", json=body).content
    headers = {} if content_type is None else {"Content-Type": content_type}

    async def run(http: httpx2.AsyncClient, leases: Any) -> list[httpx2.Response]:
        granted = await http.post("/leases", content=raw, headers=headers)
        lease = await leases.grant(
            tickets.RESOURCE, tickets.CLOSE, t_req_ms=1000, mode=RecoveryMode.COMPENSATING_ACTION
        )
        recovered = await http.post(f"/leases/{lease['leaseId']}/recover", headers=headers)
        read = await http.get(f"/leases/{lease['leaseId']}")
        return [granted, recovered, read]

    granted, recovered, read = tickets.run(run)
    _typed(granted, 415, "UNSUPPORTED_MEDIA_TYPE")
    _typed(recovered, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert read.json()["recoveryReceipt"] is None


def test_a_lease_body_too_large_is_typed(tickets: Any) -> None:
    """A lease route's body over its limit is 413 BODY_TOO_LARGE, typed as on the JSON API."""

    async def run(http: httpx2.AsyncClient, leases: Any) -> httpx2.Response:
        huge = b'{"resource": "' + b"x" * (2 << 20) + b'"}'
        return await http.post(
            "/leases", content=huge, headers={"Content-Type": "application/json"}
        )

    body = _typed(tickets.run(run), 413, "BODY_TOO_LARGE")
    assert 0 < body["data"]["limit"] < 2 << 20


def test_a_nul_in_a_path_id_or_a_body_string_is_bad_input_not_an_outage_EDGE_NUL(
    serve: Any,
) -> None:
    """[EDGE-NUL] U+0000 in a path's id, a member name or a member's value is 400
    INVALID_JSON before any store sees it: PostgreSQL cannot hold it, and refusing it
    there read as 503 STORE_UNAVAILABLE, a client's mistake shown as an outage."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        plan = served.plan("trip-nul")
        return [
            await http.get("/coordinator/txns/trip%00x"),
            await http.post("/gateway/asks/ask%00/withdraw", json={"reason": "no"}),
            await http.post("/gateway/asks/ask-1/withdraw", json={"reason": "no\u0000"}),
            await http.post("/coordinator/txns", json={"plan": {**plan, "x\u0000": 1}}),
        ]

    for response in served.run(go):
        body = _typed(response, 400, "INVALID_JSON")
        assert "U+0000" in body["message"], body
