"""The Human Gateway's JSON API (``hatp serve``): every route, its answers and refusals.

acme's real gateway behind :func:`hatp.http.hatp_app`, its asks on the
parametrized store (SQLite and PostgreSQL), acme's people scripted on a manual
clock that moves only when a test moves it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx2
import pytest

from gateway_world import call_request, payments_server
from hatp.clock import format_time
from hatp.evidence import verify
from hatp.gateway import sign_vote
from hatp.http import DEFAULT_MAX_BODY_BYTES
from serve_world import START, Served, WatchedClock

BOB = "human://acme.com/bob"
JSON = {"Content-Type": "application/json"}


def pending(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()["answer"]
    assert answer["kind"] == "pending"
    return answer


def refusal(response: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "message", "data"}
    assert body["code"] == code
    return body


def test_an_ask_over_http_is_the_gateways_signed_pending_vote_and_asked_once(serve: Any) -> None:
    """[HTTP-SERVE-GATEWAY] POST /gateway/asks answers the signed PendingVote; asked again,
    the same ask ([GW-ASK-ONCE])."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any]:
        first = await http.post("/gateway/asks", json=served.ask_body())
        again = await http.post("/gateway/asks", json=served.ask_body())
        return pending(first), pending(again)

    first, again = served.run(go)
    verify(first, served.keyring)
    assert (first["askId"], first["txnId"], first["groupId"]) == (
        again["askId"],
        "trip-http-1",
        "finance",
    )


def test_a_long_poll_answers_as_soon_as_the_ask_is_decided(serve: Any) -> None:
    """[HTTP-LONG-POLL] GET /gateway/asks/{askId}?waitSeconds=20 waits; bob's vote, handed to
    the gateway in process, ends the wait with the signed Approval, the clock unmoved."""
    clock = WatchedClock(START)
    served: Served = serve(clock=clock, decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any]:
        ask_id = pending(await http.post("/gateway/asks", json=served.ask_body()))["askId"]
        poll = asyncio.create_task(http.get(f"/gateway/asks/{ask_id}", params={"waitSeconds": 20}))
        await clock.sleeping(START + timedelta(seconds=20))  # the poll is waiting now
        assert not poll.done()
        notice = next(n for n in served.people.inbox(BOB) if n.ask_id == ask_id)
        vote = sign_vote(served.world.people[BOB], notice.payload, "approve", clock.now())
        await served.gateway.submit_vote(ask_id, vote)
        return await poll, ask_id

    polled, ask_id = served.run(go)
    assert polled.status_code == 200
    approval = polled.json()["answer"]
    verify(approval, served.keyring)
    assert (approval["kind"], approval["decision"], approval["askId"]) == (
        "approval",
        "approve",
        ask_id,
    )
    assert approval["approvers"] == [BOB]
    assert clock.now() == START


def test_a_poll_without_a_wait_answers_at_once_and_a_wait_is_capped(serve: Any) -> None:
    """[HTTP-LONG-POLL] waitSeconds 0 (the default) answers the pending vote at once; a wait
    of an hour is capped at 30 s on the gateway's clock."""
    clock = WatchedClock(START)
    served: Served = serve(clock=clock, decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any]:
        ask_id = pending(await http.post("/gateway/asks", json=served.ask_body()))["askId"]
        now = pending(await http.get(f"/gateway/asks/{ask_id}"))
        poll = asyncio.create_task(http.get(f"/gateway/asks/{ask_id}?waitSeconds=3600"))
        await clock.sleeping(START + timedelta(seconds=30))
        clock.advance(30)
        return now, await poll

    now, capped = served.run(go)
    assert now["kind"] == "pending"
    assert pending(capped)["askId"] == now["askId"]


def test_withdraw_closes_the_ask_and_the_poll_shows_a_withdrawn_reject(serve: Any) -> None:
    """[HTTP-SERVE-GATEWAY] POST /gateway/asks/{askId}/withdraw answers {}; the ask is then
    a signed withdrawn reject."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any]:
        ask_id = pending(await http.post("/gateway/asks", json=served.ask_body()))["askId"]
        done = await http.post(f"/gateway/asks/{ask_id}/withdraw", json={"reason": "plan dropped"})
        return done, (await http.get(f"/gateway/asks/{ask_id}")).json()["answer"]

    done, approval = served.run(go)
    assert (done.status_code, done.json()) == (200, {})
    assert (approval["decision"], approval["withdrawn"]) == ("reject", True)


def test_tighten_moves_the_deadline_earlier(serve: Any) -> None:
    """[HTTP-SERVE-GATEWAY] POST /gateway/asks/{askId}/tighten answers the pending vote naming
    the new deadline; tightening a question is refused 409 RESPONSE_REFUSED (WRONG_KIND)."""
    served: Served = serve(decision="never")
    sooner = format_time(START + timedelta(minutes=5))

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any]:
        ask_id = pending(await http.post("/gateway/asks", json=served.ask_body()))["askId"]
        moved = await http.post(f"/gateway/asks/{ask_id}/tighten", json={"decideBy": sooner})
        question = pending(await http.post("/gateway/questions", json=_q(served)))
        wrong = await http.post(
            f"/gateway/asks/{question['askId']}/tighten", json={"decideBy": sooner}
        )
        return pending(moved), wrong

    moved, wrong = served.run(go)
    assert moved["decideBy"] == sooner
    assert refusal(wrong, 409, "RESPONSE_REFUSED")["data"]["reason"] == "WRONG_KIND"


def test_an_estimate_is_the_signed_chain_and_asks_nobody(serve: Any) -> None:
    """[HTTP-SERVE-GATEWAY] POST /gateway/estimate answers {estimate}: the signed ChainEstimate."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> Any:
        return await http.post("/gateway/estimate", json=served.ask_body())

    response = served.run(go)
    assert response.status_code == 200
    estimate = response.json()["estimate"]
    verify(estimate, served.keyring)
    assert estimate["kind"] == "chain-estimate"
    assert served.people.delivered == []


def test_a_question_is_asked_and_its_answer_polled(serve: Any) -> None:
    """[HTTP-SERVE-GATEWAY] POST /gateway/questions, then GET /gateway/questions/{askId}:
    bob's signed Answer."""
    served: Served = serve(decision="approve")

    async def go(http: httpx2.AsyncClient) -> Any:
        asked = await http.post("/gateway/questions", json=_q(served))
        ask_id = asked.json()["answer"]["askId"]
        return await http.get(f"/gateway/questions/{ask_id}", params={"waitSeconds": 5})

    response = served.run(go)
    assert response.status_code == 200
    answer = response.json()["answer"]
    verify(answer, served.keyring)
    assert (answer["kind"], answer["value"], answer["answeredBy"]) == ("answer", "aisle", BOB)


def test_a_question_nobody_may_answer_is_gone(serve: Any) -> None:
    """[HTTP-STATUS] a question whose address reaches nobody: 410 ASK_WITHDRAWN."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> Any:
        return await http.post(
            "/gateway/questions", json=_q(served, address="human://acme.com/zed")
        )

    body = refusal(served.run(go), 410, "ASK_WITHDRAWN")
    assert body["data"]["askId"], body


def test_a_tool_call_is_approved_over_http(serve: Any) -> None:
    """[HTTP-SERVE-GATEWAY] POST /gateway/calls, then GET /gateway/calls/{askId}: the signed
    CallApproval of exactly that call."""
    served: Served = serve(decision="approve")
    request = call_request(served.clock, payments_server(served.world).gate)

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any]:
        asked = await http.post("/gateway/calls", json={"request": request})
        ask_id = asked.json()["answer"]["askId"]
        polled = await http.get(f"/gateway/calls/{ask_id}", params={"waitSeconds": 5})
        wrong_kind = await http.get(f"/gateway/asks/{ask_id}")
        return polled, wrong_kind

    polled, wrong_kind = served.run(go)
    approval = polled.json()["answer"]
    verify(approval, served.keyring)
    assert (approval["kind"], approval["decision"]) == ("call-approval", "approve")
    assert (approval["terms"]["requestId"], approval["terms"]["tool"]) == (
        request["requestId"],
        "charge_card",
    )
    refusal(wrong_kind, 404, "ASK_UNKNOWN")


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "where"),
    [
        ("/gateway/asks", {"planDigest": "sha256:x"}, 400, "INVALID_JSON", "/txnId"),
        ("/gateway/asks", [1, 2], 400, "INVALID_JSON", ""),
        ("/gateway/calls", {"request": {"hatpVersion": "0.1", "kind": "call-request"}}, 422,
         "CALL_INVALID", None),
        ("/gateway/questions", {"question": {"hatpVersion": "0.1", "kind": "question"}}, 422,
         "QUESTION_INVALID", None),
        ("/gateway/asks/ask-x/withdraw", {"askId": "ask-y", "reason": "x"}, 400, "INVALID_JSON",
         "/askId"),
        ("/gateway/asks/ask-x/withdraw", {"reason": "x", "extra": 1}, 400, "INVALID_JSON",
         "/extra"),
        ("/gateway/asks/ask-x/withdraw", {"reason": "gone"}, 404, "ASK_UNKNOWN", None),
        ("/gateway/asks/ask-x/tighten", {"decideBy": "soon"}, 400, "INVALID_JSON", "/decideBy"),
    ],
)  # fmt: skip
def test_a_request_that_does_not_fit_is_refused_with_its_typed_error(
    serve: Any, path: str, body: Any, status: int, code: str, where: str | None
) -> None:
    """[HTTP-PARAMS] the params are read as the MCP binding reads them; a misfit is 400
    INVALID_JSON naming the member, the role's own refusal keeps its code and status."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> Any:
        return await http.post(path, json=body)

    refused = refusal(served.run(go), status, code)
    if where is not None:
        assert refused["data"]["where"] == where


def test_the_plan_decides_what_the_gateway_refuses(serve: Any) -> None:
    """[HTTP-STATUS] an unknown group or another plan's digest: 422 ASK_INVALID; a plan
    that breaks a rule: 422 PLAN_INVALID."""
    served: Served = serve(decision="never")
    broken = served.ask_body()
    broken["plan"]["branches"][0]["tier"] = "maybe"

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        return [
            await http.post("/gateway/asks", json=served.ask_body(groupId="legal")),
            await http.post("/gateway/asks", json=served.ask_body(planDigest="sha256:" + "A" * 43)),
            await http.post("/gateway/asks", json=broken),
        ]

    group, other, bad = served.run(go)
    assert refusal(group, 422, "ASK_INVALID")["data"]["reason"] == "UNKNOWN_GROUP"
    assert refusal(other, 422, "ASK_INVALID")["data"]["reason"] == "DIGEST_MISMATCH"
    refusal(bad, 422, "PLAN_INVALID")


def test_malformed_json_and_bad_queries_are_invalid_json(serve: Any) -> None:
    """[HTTP-PARAMS] a body that is not strict JSON names where it breaks; a query member
    that does not fit, or is unknown, is named too."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        return [
            await http.post("/gateway/asks", content=b'{"txnId": ', headers=JSON),
            await http.post("/gateway/asks", content=b'{"a": 1, "a": 2}', headers=JSON),
            await http.get("/gateway/asks/ask-x", params={"waitSeconds": "-1"}),
            await http.get("/gateway/asks/ask-x", params={"waitSeconds": "soon"}),
            await http.get("/gateway/asks/ask-x", params={"wait": "5"}),
            await http.get("/gateway/asks/ask-x"),
        ]

    syntax, twice, negative, text, unknown, missing = served.run(go)
    assert "line 1" in refusal(syntax, 400, "INVALID_JSON")["data"]["where"]
    refusal(twice, 400, "INVALID_JSON")
    assert refusal(negative, 400, "INVALID_JSON")["data"]["where"] == "/waitSeconds"
    assert refusal(text, 400, "INVALID_JSON")["data"]["where"] == "/waitSeconds"
    assert refusal(unknown, 400, "INVALID_JSON")["data"]["where"] == "/wait"
    refusal(missing, 404, "ASK_UNKNOWN")


def test_a_body_too_large_is_413_and_nothing_runs(serve: Any) -> None:
    """[HTTP-BODY-LIMIT] a body past the limit (declared or streamed) is 413 BODY_TOO_LARGE."""
    served: Served = serve(decision="never")
    huge = b'{"reason": "' + b"x" * DEFAULT_MAX_BODY_BYTES + b'"}'

    async def streamed() -> Any:
        yield huge

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        return [
            await http.post("/gateway/asks/ask-x/withdraw", content=huge, headers=JSON),
            await http.post("/gateway/asks/ask-x/withdraw", content=streamed(), headers=JSON),
        ]

    for response in served.run(go):
        body = refusal(response, 413, "BODY_TOO_LARGE")
        assert body["data"]["limit"] == DEFAULT_MAX_BODY_BYTES
    assert served.people.delivered == []


def _q(served: Served, **members: Any) -> dict[str, Any]:
    return {"question": served.question(**members)}
