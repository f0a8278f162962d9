"""A signed vote delivered over the JSON API: ``POST /gateway/asks/{askId}/votes``.

acme's real gateway behind :func:`hatp.http.hatp_app`, its asks on the
parametrized store (SQLite and PostgreSQL); acme's people never answer on
their channel, so the only votes are the ones a test signs with a person's
key over their notice's payload and posts. The gateway checks the vote's
signature, not who delivers it ([HTTP-VOTE], [GW-VOTE-SIGNED]); an agent's token still
acts only on its own asks ([API-OWNER]).
"""

from __future__ import annotations

from typing import Any

import httpx2

from gateway_world import call_request, payments_server
from hatp.demo.trip import INITIATOR
from hatp.evidence import verify
from hatp.gateway import Notice, sign_vote
from hatp.http import ApiCallers, new_api_token
from serve_world import Served, check_answer

BOB = "human://acme.com/bob"
#: erin approves up to 500 USD: the 730 USD trip never asks her.
ERIN = "human://acme.com/erin"
VOTES = "/gateway/asks/{askId}/votes"
OTHER_AGENT = "agent://acme.com/expense-bot"
SERVICE = "https://coordinator.other.example"
TOKENS = {who: new_api_token() for who in (INITIATOR, OTHER_AGENT, SERVICE)}
CALLERS = ApiCallers({who: kept for who, (_, kept) in TOKENS.items()})


def _as(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][0]}"}


def _notice(served: Served, human: str, ask_id: str) -> Notice:
    return next(n for n in served.people.inbox(human) if n.ask_id == ask_id)


def _vote(served: Served, notice: Notice, decision: str = "approve") -> dict[str, Any]:
    """The notice's person's vote, signed with the key on their card."""
    key = served.world.people[notice.human]
    return sign_vote(key, notice.payload, decision, served.clock.now())  # type: ignore[arg-type]


def _refusal(response: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


async def _ask(http: httpx2.AsyncClient, served: Served, **headers: str) -> str:
    asked = await http.post("/gateway/asks", json=served.ask_body(), headers=headers)
    assert asked.status_code == 200, asked.text
    ask_id: str = asked.json()["answer"]["askId"]
    return ask_id


def test_a_signed_vote_delivered_over_http_decides_the_ask(serve: Any) -> None:
    """[HTTP-VOTE] [GW-VOTE-SIGNED] bob's vote, signed with the key on his card and
    posted by anyone, is recorded: the answer is the gateway's signed Approval naming him,
    what a poll then reads too; the answer fits the OpenAPI document's schema."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, Any, Any]:
        document = (await http.get("/openapi.json")).json()
        ask_id = await _ask(http, served)
        vote = _vote(served, _notice(served, BOB, ask_id))
        voted = await http.post(f"/gateway/asks/{ask_id}/votes", json={"vote": vote})
        check_answer(document, VOTES, "POST", voted)
        polled = (await http.get(f"/gateway/asks/{ask_id}")).json()["answer"]
        return voted, polled, document

    voted, polled, document = served.run(go)
    assert voted.status_code == 200, voted.text
    approval = voted.json()["answer"]
    verify(approval, served.keyring)
    assert (approval["kind"], approval["decision"], approval["approvers"]) == (
        "approval",
        "approve",
        [BOB],
    )
    assert polled == approval
    described = document["paths"][VOTES]["post"]
    body = described["requestBody"]["content"]["application/json"]["schema"]
    assert (body["required"], sorted(body["properties"])) == (["vote"], ["vote"])
    assert "dev.hatp/" not in described["description"]  # no MCP method carries it


def test_a_vote_on_a_tool_call_answers_the_signed_call_approval(serve: Any) -> None:
    """[HTTP-VOTE] a signed vote on a call ask answers the signed CallApproval."""
    served: Served = serve(decision="never")
    request = call_request(served.clock, payments_server(served.world).gate)

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        asked = await http.post("/gateway/calls", json={"request": request})
        ask_id = asked.json()["answer"]["askId"]
        notice = next(n for n in served.people.delivered if n.ask_id == ask_id)
        return await http.post(
            f"/gateway/asks/{ask_id}/votes", json={"vote": _vote(served, notice)}
        )

    voted = served.run(go)
    assert voted.status_code == 200, voted.text
    approval = voted.json()["answer"]
    verify(approval, served.keyring)
    assert (approval["kind"], approval["decision"]) == ("call-approval", "approve")
    assert approval["terms"]["requestId"] == request["requestId"]


def test_a_vote_whose_signature_does_not_verify_is_refused_and_not_recorded(
    serve: Any,
) -> None:
    """[GW-VOTE-SIGNED] bob's vote with its decision changed after signing: 403
    RESPONSE_REFUSED (SIGNATURE); the ask is still pending."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, Any]:
        ask_id = await _ask(http, served)
        forged = {**_vote(served, _notice(served, BOB, ask_id), "reject"), "decision": "approve"}
        refused = await http.post(f"/gateway/asks/{ask_id}/votes", json={"vote": forged})
        return refused, (await http.get(f"/gateway/asks/{ask_id}")).json()["answer"]

    refused, still = served.run(go)
    body = _refusal(refused, 403, "RESPONSE_REFUSED")
    assert (body["data"]["reason"], body["data"]["human"]) == ("SIGNATURE", BOB)
    assert still["kind"] == "pending"


def test_a_vote_by_someone_not_asked_is_refused(serve: Any) -> None:
    """[GW-VOTE-ASKED] erin, whom the trip's ask passes over, signs a vote on it with her own
    key: 403 RESPONSE_REFUSED (NOT_ASKED); the ask is still pending."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, Any]:
        ask_id = await _ask(http, served)
        payload = {**_notice(served, BOB, ask_id).payload, "human": ERIN}
        vote = sign_vote(served.world.people[ERIN], payload, "approve", served.clock.now())
        refused = await http.post(f"/gateway/asks/{ask_id}/votes", json={"vote": vote})
        return refused, (await http.get(f"/gateway/asks/{ask_id}")).json()["answer"]

    refused, still = served.run(go)
    body = _refusal(refused, 403, "RESPONSE_REFUSED")
    assert (body["data"]["reason"], body["data"]["human"]) == ("NOT_ASKED", ERIN)
    assert still["kind"] == "pending"


def test_a_second_vote_is_a_conflict(serve: Any) -> None:
    """[GW-VOTE-OPEN] bob's vote posted again (a retry, or a second copy): 409
    RESPONSE_REFUSED (CLOSED, the first decided the ask); the Approval is unchanged."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[Any, httpx2.Response, Any]:
        ask_id = await _ask(http, served)
        vote = _vote(served, _notice(served, BOB, ask_id))
        first = await http.post(f"/gateway/asks/{ask_id}/votes", json={"vote": vote})
        again = await http.post(f"/gateway/asks/{ask_id}/votes", json={"vote": vote})
        polled = (await http.get(f"/gateway/asks/{ask_id}")).json()["answer"]
        return first.json()["answer"], again, polled

    first, again, polled = served.run(go)
    assert _refusal(again, 409, "RESPONSE_REFUSED")["data"]["reason"] == "CLOSED"
    assert polled == first


def test_a_vote_on_a_question_is_refused_as_the_wrong_kind(serve: Any) -> None:
    """[HTTP-VOTE] [GW-VOTE-SHAPE] a question takes an answer, not a vote: 409 RESPONSE_REFUSED
    (WRONG_KIND); the question is still pending."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, Any]:
        asked = await http.post("/gateway/questions", json={"question": served.question()})
        pending = asked.json()["answer"]
        ask_id = pending["askId"]
        # A vote on what the question's pending names: its id, digest and group "question".
        payload = {m: pending[m] for m in ("askId", "txnId", "planDigest", "groupId")}
        vote = sign_vote(
            served.world.people[BOB], {**payload, "human": BOB}, "approve", served.clock.now()
        )
        refused = await http.post(f"/gateway/asks/{ask_id}/votes", json={"vote": vote})
        return refused, (await http.get(f"/gateway/questions/{ask_id}")).json()["answer"]

    refused, still = served.run(go)
    assert _refusal(refused, 409, "RESPONSE_REFUSED")["data"]["reason"] == "WRONG_KIND"
    assert still["kind"] == "pending"


def test_a_vote_on_an_unknown_ask_is_404(serve: Any) -> None:
    """[HTTP-STATUS] a well-formed vote posted under an ask id the gateway does not hold:
    404 ASK_UNKNOWN."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        ask_id = await _ask(http, served)
        vote = _vote(served, _notice(served, BOB, ask_id))
        return await http.post("/gateway/asks/ask-none/votes", json={"vote": vote})

    assert _refusal(served.run(go), 404, "ASK_UNKNOWN")["data"]["askId"] == "ask-none"


def test_a_body_that_is_not_a_vote_is_refused(serve: Any) -> None:
    """[HTTP-PARAMS] no ``vote``, or one that is not an object: 400 INVALID_JSON naming
    ``/vote``; an object that is no HumanVote: 422 RESPONSE_REFUSED (SHAPE); an ``askId``
    in the body: 400 (it is the path's)."""
    served: Served = serve(decision="never")

    async def go(http: httpx2.AsyncClient) -> list[httpx2.Response]:
        ask_id = await _ask(http, served)
        votes = f"/gateway/asks/{ask_id}/votes"
        return [
            await http.post(votes, json={}),
            await http.post(votes, json={"vote": ["approve"]}),
            await http.post(votes, json={"vote": {"decision": "approve"}}),
            await http.post(votes, json={"vote": {}, "askId": ask_id}),
        ]

    missing, listed, shapeless, doubled = served.run(go)
    assert _refusal(missing, 400, "INVALID_JSON")["data"]["where"] == "/vote"
    assert _refusal(listed, 400, "INVALID_JSON")["data"]["where"] == "/vote"
    assert _refusal(shapeless, 422, "RESPONSE_REFUSED")["data"]["reason"] == "SHAPE"
    assert _refusal(doubled, 400, "INVALID_JSON")["data"]["where"] == "/askId"


def test_an_agent_delivers_votes_only_on_its_own_asks(serve: Any) -> None:
    """[API-OWNER] with ``[api] callers``: the expense bot's token cannot deliver a vote on
    the travel bot's ask (403 CALLER_REFUSED, nothing recorded); a service's token may
    deliver bob's vote, whose signature is what counts."""
    served: Served = serve(decision="never", callers=CALLERS)

    async def go(http: httpx2.AsyncClient) -> tuple[httpx2.Response, Any, httpx2.Response]:
        ask_id = await _ask(http, served, **_as(INITIATOR))
        body = {"vote": _vote(served, _notice(served, BOB, ask_id))}
        votes = f"/gateway/asks/{ask_id}/votes"
        refused = await http.post(votes, json=body, headers=_as(OTHER_AGENT))
        still = await http.get(f"/gateway/asks/{ask_id}", headers=_as(INITIATOR))
        delivered = await http.post(votes, json=body, headers=_as(SERVICE))
        return refused, still.json()["answer"], delivered

    refused, still, delivered = served.run(go)
    body = _refusal(refused, 403, "CALLER_REFUSED")
    assert (body["data"]["caller"], body["data"]["named"]) == (OTHER_AGENT, INITIATOR)
    assert still["kind"] == "pending"
    assert delivered.status_code == 200, delivered.text
    assert delivered.json()["answer"]["decision"] == "approve"
