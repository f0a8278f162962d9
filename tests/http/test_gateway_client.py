"""[API-SIGNED] ``HttpGateway``: a coordinator asking a Human Gateway served elsewhere, each
request signed with the coordinator's key, checked against its organisation's published keys.

acme's gateway behind :func:`hatp.http.hatp_app` plays the other organisation's
(globex's): its ``SignedCallers`` keyring holds the coordinator's public key,
vouched for by the coordinator's issuer, as globex would read it from acme's key
set. The coordinator's side is :class:`hatp.http.HttpGateway` with that key as
signer: ask, poll until a person approves, estimate, tighten, withdraw, a whole
trip committed; and every way a request is refused (401 ``UNAUTHENTICATED`` with
its reason) comes back as the typed error.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx2
import pytest
import uvicorn
from openapi_spec_validator import validate

from hatp.clock import ManualClock, SystemClock, format_time, parse_time
from hatp.coordinator import ApprovalRequest
from hatp.demo import trip_plan
from hatp.demo.trip import COORDINATOR, GATEWAY, INITIATOR, PARTICIPANT_IDS
from hatp.errors import (
    AskInvalid,
    AskUnknown,
    CallerRefused,
    PeerIncompatible,
    PeerUnavailable,
    Unauthenticated,
)
from hatp.evidence import KeyPeriod, Keyring, SigningKey, digest, verify
from hatp.gateway import sign_vote
from hatp.http import ApiCallers, HttpGateway, SignedCallers, new_api_token, sign_request
from hatp.model import TxnState, parse_plan
from hatp.store import DecisionLog
from serve_world import START, Served, WatchedClock

BASE = Served.BASE
BOB = "human://acme.com/bob"
#: Another organisation's coordinator, whose key the gateway's keyring does not hold.
STRANGER = "https://coordinator.initech.example"
#: An agent with a key of its own, trusted by the gateway.
OTHER_AGENT = "agent://acme.com/expense-bot"
AGENT_KEY = SigningKey.from_seed(bytes([71]) * 32, f"{OTHER_AGENT}#key-1")
TOKEN, TOKEN_DIGEST = new_api_token()


def _serve(
    serve: Any,
    *,
    clock: Any = None,
    period: KeyPeriod | None = None,
    signed: bool = True,
    keyring: Keyring | None = None,
    **options: Any,
) -> Served:
    """The gateway served with signed callers (``keyring``, or a new one): acme's
    coordinator key (in ``period``) and the expense bot's; on ``clock`` (a watched
    manual clock by default), nobody deciding."""
    clock = clock or WatchedClock(START)
    keyring = keyring or Keyring()
    keyring.trust(COORDINATOR)
    keyring.trust(OTHER_AGENT)
    keyring.add(AGENT_KEY.public, OTHER_AGENT)
    callers = SignedCallers(keyring, clock=clock) if signed else None
    options.setdefault("decision", "never")
    served: Served = serve(clock=clock, signed_callers=callers, **options)
    # The world made the coordinator's key as it opened: globex reads it from acme's key set.
    keyring.add(served.world.keys["coordinator"].public, COORDINATOR, period)
    return served


def _gateway(
    served: Served,
    http: httpx2.AsyncClient,
    *,
    signer: SigningKey | None = None,
    caller: str = COORDINATOR,
    **options: Any,
) -> HttpGateway:
    """acme's coordinator's view of the served gateway, signing with ``signer`` (its own
    key by default) at the served clock's time unless told otherwise."""
    key = signer or served.world.keys["coordinator"]
    options.setdefault("clock", served.clock)
    return HttpGateway(BASE, GATEWAY, signer=key, caller=caller, client=http, **options)


def _request(served: Served, txn_id: str = "trip-signed-1") -> ApprovalRequest:
    """The trip's finance group, asked by ``txn_id``'s coordinator."""
    plan = parse_plan(served.plan(txn_id))
    group = next(g for g in plan.approvals if g.group_id == "finance")
    decide_by = parse_time(plan.deadlines.decide_by)
    return ApprovalRequest(txn_id, plan, digest(plan.to_wire()), group, decide_by)


def _reason(error: BaseException) -> Any:
    assert isinstance(error, Unauthenticated), repr(error)
    return error.data["reason"]


# -- the coordinator's side ------------------------------------------------------------------


def test_a_signed_ask_is_pending_and_polls_to_an_approval_the_gateway_signed(serve: Any) -> None:
    """[API-SIGNED] ask -> the signed pending (asked again: the same ask); a long poll ends
    when bob approves, with the Approval that verifies under the gateway's key."""
    served = _serve(serve)
    clock = served.clock
    assert isinstance(clock, WatchedClock)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any, Any]:
        gateway = _gateway(served, http)
        pending = await gateway.ask(asked)
        again = await gateway.ask(asked)
        ask_id = pending["askId"]
        poll = asyncio.create_task(gateway.poll(ask_id, wait_seconds=20))
        await clock.sleeping(START + timedelta(seconds=20))  # the poll waits at the gateway
        notice = next(n for n in served.people.inbox(BOB) if n.ask_id == ask_id)
        vote = sign_vote(served.world.people[BOB], notice.payload, "approve", clock.now())
        await served.gateway.submit_vote(ask_id, vote)
        return pending, again, await poll

    pending, again, approval = served.run(go)
    gateway_only = Keyring(
        [(served.world.keys["gateway"].public, GATEWAY)], trusted_issuers=[GATEWAY]
    )
    verify(pending, gateway_only)
    verify(approval, served.keyring)
    assert pending["kind"] == "pending" and again["askId"] == pending["askId"]
    assert (approval["kind"], approval["decision"], approval["askId"]) == (
        "approval",
        "approve",
        pending["askId"],
    )


def test_estimate_tighten_and_withdraw_are_signed_and_name_the_coordinator(serve: Any) -> None:
    """[API-SIGNED] [GW-WITHDRAWN-BY] estimate, tighten and withdraw over signed requests:
    each answer is the gateway's signed document, and the withdrawn reject names the
    coordinator the signature authenticated."""
    served = _serve(serve)
    asked = _request(served)
    earlier = asked.decide_by - timedelta(minutes=5)

    async def go(http: httpx2.AsyncClient) -> dict[str, Any]:
        gateway = _gateway(served, http)
        out = {"estimate": await gateway.estimate(asked), "pending": await gateway.ask(asked)}
        ask_id = out["pending"]["askId"]
        out["tightened"] = await gateway.tighten(ask_id, earlier)
        await gateway.withdraw(ask_id, "the trip was called off")
        out["final"] = await gateway.poll(ask_id)
        return out

    out = served.run(go)
    for name in ("estimate", "pending", "tightened", "final"):
        verify(out[name], served.keyring)
    assert out["estimate"]["worstSeconds"] > 0
    assert out["tightened"]["decideBy"] == format_time(earlier)
    final = out["final"]
    assert (final["kind"], final["decision"], final["withdrawn"]) == ("approval", "reject", True)
    assert final["reason"] == f"withdrawn by {COORDINATOR}: the trip was called off"


def test_withdrawing_a_transaction_withdraws_the_asks_this_client_made(serve: Any) -> None:
    """[COORD-WITHDRAW] there is no route for it: the client withdraws the open asks it
    made for the transaction, and only those; another transaction's ask stays open, and
    a client that did not make an ask (a restarted coordinator) withdraws nothing."""
    served = _serve(serve)
    first, second = _request(served, "trip-signed-a"), _request(served, "trip-signed-b")

    async def go(http: httpx2.AsyncClient) -> dict[str, Any]:
        gateway = _gateway(served, http)
        a, b = await gateway.ask(first), await gateway.ask(second)
        restarted = _gateway(served, http)
        return {
            "a": a["askId"],
            "b": b["askId"],
            "withdrawn": await gateway.withdraw_transaction("trip-signed-a", "aborted"),
            "again": await gateway.withdraw_transaction("trip-signed-a", "aborted"),
            "restarted": await restarted.withdraw_transaction("trip-signed-b", "aborted"),
            "a now": await gateway.poll(a["askId"]),
            "b now": await gateway.poll(b["askId"]),
        }

    out = served.run(go)
    assert out["withdrawn"] == [out["a"]] and out["again"] == [] and out["restarted"] == []
    assert (out["a now"]["kind"], out["a now"]["decision"]) == ("approval", "reject")
    assert out["b now"]["kind"] == "pending"


def test_a_trip_commits_with_a_remote_gateway_asked_over_signed_http(serve: Any) -> None:
    """[API-SIGNED] acme's coordinator runs the whole trip with HttpGateway as its gateway:
    every ask signed with its key, every answer vetted under its own keyring; it commits."""
    served = _serve(serve, clock=SystemClock(), decision="approve", roles=("gateway", "directory"))
    plan = trip_plan("trip-signed-http", decide_by=served.clock.now() + timedelta(minutes=15))

    async def go(http: httpx2.AsyncClient) -> Any:
        coordinator = served.world.coordinator(
            DecisionLog(served.store), _gateway(served, http), poll_seconds=1.0
        )
        return await coordinator.run(plan)

    outcome = served.run(go)
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert served.world.effects(outcome.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "whole")


def test_signed_requests_survive_a_real_server(serve: Any) -> None:
    """[API-SIGNED] uvicorn on 127.0.0.1, a real socket: the path and query the client
    signed are the ones the server checks (a poll's waitSeconds, a percent-encoded path)."""
    served = _serve(serve)
    asked = _request(served)
    app = served.app

    async def go() -> tuple[Any, Any, BaseException]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
        server = uvicorn.Server(config)
        key = served.world.keys["coordinator"]
        try:
            async with app.router.lifespan_context(app):
                serving = asyncio.create_task(server.serve(sockets=[sock]))
                try:
                    async with HttpGateway(
                        url, GATEWAY, signer=key, caller=COORDINATOR, clock=served.clock
                    ) as gateway:
                        pending = await gateway.ask(asked)
                        polled = await gateway.poll(pending["askId"], wait_seconds=0)
                        with pytest.raises(AskUnknown) as unknown:
                            await gateway.poll("ask-no such ask?", wait_seconds=0)
                        return pending, polled, unknown.value
                finally:
                    server.should_exit = True
                    await asyncio.wait_for(serving, Served.BOUND)
        finally:
            sock.close()
            await served.people.close()

    pending, polled, unknown = asyncio.run(asyncio.wait_for(go(), Served.BOUND))
    assert polled["askId"] == pending["askId"] and polled["kind"] == "pending"
    assert unknown.data["askId"] == "ask-no such ask?"


def test_the_gateways_refusals_come_back_as_their_typed_errors(serve: Any) -> None:
    """[API-SIGNED] an unknown ask, a group the plan does not have: the same typed errors
    the gateway raised."""
    served = _serve(serve)
    asked = _request(served)
    other_group = ApprovalRequest(
        asked.txn_id,
        asked.plan,
        asked.plan_digest,
        asked.group.model_copy(update={"group_id": "legal"}),
        asked.decide_by,
    )

    async def go(http: httpx2.AsyncClient) -> list[BaseException]:
        gateway = _gateway(served, http)
        errors: list[BaseException] = []
        for attempt in (gateway.poll("ask-nosuchask0000000000000"), gateway.ask(other_group)):
            with pytest.raises(Exception) as refused:
                await attempt
            errors.append(refused.value)
        return errors

    unknown, group = served.run(go)
    assert isinstance(unknown, AskUnknown)
    assert isinstance(group, AskInvalid) and group.data["reason"] == "UNKNOWN_GROUP"


def _no_answer(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (_no_answer, PeerUnavailable),
        (lambda request: httpx2.Response(502, content=b"bad gateway"), PeerUnavailable),
        (lambda request: httpx2.Response(200, json=[]), PeerIncompatible),
        (lambda request: httpx2.Response(200, json={"answer": "yes"}), PeerIncompatible),
    ],
    ids=["no-answer", "5xx", "not-an-object", "no-answer-object"],
)
def test_no_answer_is_unavailable_and_a_stranger_answer_incompatible(
    answer: Callable[[httpx2.Request], httpx2.Response], error: type[Exception]
) -> None:
    """No answer (or a 5xx without a hatp body) is PEER_UNAVAILABLE naming the gateway,
    which the coordinator counts as not approved; an answer that is not the gateway
    API's is PEER_INCOMPATIBLE."""

    async def go() -> BaseException:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
        async with HttpGateway(BASE, GATEWAY, client=http) as gateway:
            with pytest.raises(error) as refused:
                await gateway.poll("ask-1", wait_seconds=5)
        await http.aclose()
        return refused.value

    refused = asyncio.run(asyncio.wait_for(go(), Served.BOUND))
    assert refused.data["gateway"] == GATEWAY


# -- what the gateway refuses ------------------------------------------------------------------


def test_a_key_the_gateways_keyring_does_not_hold_is_refused_UNKNOWN_KEY(serve: Any) -> None:
    """[API-SIGNED] a stranger's key, and a key of an issuer the keyring does not trust:
    401 UNKNOWN_KEY (data.keyReason the keyring's), the typed Unauthenticated; nobody was
    asked."""
    stranger = SigningKey.from_seed(bytes([72]) * 32, f"{STRANGER}#key-1")
    untrusted = SigningKey.from_seed(bytes([73]) * 32, "https://coordinator.untrusted#key-1")
    served = _serve(serve, keyring=Keyring([(untrusted.public, "https://coordinator.untrusted")]))
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> list[BaseException]:
        errors: list[BaseException] = []
        for key, caller in ((stranger, STRANGER), (untrusted, "https://coordinator.untrusted")):
            with pytest.raises(Unauthenticated) as refused:
                await _gateway(served, http, signer=key, caller=caller).ask(asked)
            errors.append(refused.value)
        return errors

    unknown, untrusted_issuer = served.run(go)
    assert _reason(unknown) == _reason(untrusted_issuer) == "UNKNOWN_KEY"
    assert unknown.data["keyReason"] == "KID_UNKNOWN"
    assert unknown.data["kid"] == stranger.kid
    assert untrusted_issuer.data["keyReason"] == "ISSUER_UNTRUSTED"
    assert served.people.delivered == []


def test_a_key_revoked_before_the_request_is_refused_UNKNOWN_KEY(serve: Any) -> None:
    """[API-SIGNED] [SIG-PERIOD] acme's key set revoked the coordinator's key an hour ago:
    a request signed with it now is 401 UNKNOWN_KEY (KEY_REVOKED); one signed while it
    was valid would have been taken."""
    period = KeyPeriod(not_before=START - timedelta(days=30), revoked_at=START - timedelta(hours=1))
    served = _serve(serve, period=period)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> BaseException:
        with pytest.raises(Unauthenticated) as refused:
            await _gateway(served, http).ask(asked)
        return refused.value

    revoked = served.run(go)
    assert _reason(revoked) == "UNKNOWN_KEY" and revoked.data["keyReason"] == "KEY_REVOKED"
    assert served.people.delivered == []


@pytest.mark.parametrize("minutes", [-6, 6])
def test_a_request_signed_too_long_ago_or_ahead_is_refused_STALE(serve: Any, minutes: int) -> None:
    """[API-SIGNED] a timestamp more than 5 minutes from the gateway's time, either way:
    401 STALE, naming both times; 4 minutes off is taken."""
    served = _serve(serve)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> tuple[BaseException, Any]:
        off = ManualClock(START + timedelta(minutes=minutes))
        with pytest.raises(Unauthenticated) as refused:
            await _gateway(served, http, clock=off).ask(asked)
        near = ManualClock(START + timedelta(minutes=4 if minutes > 0 else -4))
        return refused.value, await _gateway(served, http, clock=near).ask(asked)

    stale, taken = served.run(go)
    assert _reason(stale) == "STALE"
    assert stale.data["serverTime"] == format_time(START)
    assert stale.data["toleranceSeconds"] == 300
    assert taken["kind"] == "pending"


def test_a_caller_that_is_not_the_keys_issuer_is_refused_WRONG_CALLER(serve: Any) -> None:
    """[API-SIGNED] acme's coordinator key, Hatp-Caller another id: 401 WRONG_CALLER naming
    both; the signature alone does not let a key speak as someone else."""
    served = _serve(serve)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> BaseException:
        with pytest.raises(Unauthenticated) as refused:
            await _gateway(served, http, caller="hatp://globex.com/coordinator").ask(asked)
        return refused.value

    wrong = served.run(go)
    assert _reason(wrong) == "WRONG_CALLER"
    assert wrong.data["caller"] == "hatp://globex.com/coordinator"
    assert wrong.data["issuer"] == COORDINATOR


def _tampered(headers: dict[str, str], body: bytes) -> tuple[str, dict[str, str], bytes]:
    return "/gateway/asks", headers, body.replace(b'"finance"', b'"legal"')


def _other_target(headers: dict[str, str], body: bytes) -> tuple[str, dict[str, str], bytes]:
    return "/gateway/asks?waitSeconds=1", headers, body


def _without(name: str) -> Callable[..., tuple[str, dict[str, str], bytes]]:
    def change(headers: dict[str, str], body: bytes) -> tuple[str, dict[str, str], bytes]:
        return "/gateway/asks", {k: v for k, v in headers.items() if k != name}, body

    return change


def _replaced(name: str, value: str) -> Callable[..., tuple[str, dict[str, str], bytes]]:
    def change(headers: dict[str, str], body: bytes) -> tuple[str, dict[str, str], bytes]:
        return "/gateway/asks", {**headers, name: value}, body

    return change


#: How a signed POST /gateway/asks is changed after signing -> data.header of the refusal.
BAD_SIGNATURES: dict[str, tuple[Callable[..., tuple[str, dict[str, str], bytes]], Any]] = {
    "tampered-body": (_tampered, None),
    "other-target": (_other_target, None),
    "no-key-id": (_without("Hatp-Key-Id"), "Hatp-Key-Id"),
    "no-caller": (_without("Hatp-Caller"), "Hatp-Caller"),
    "no-timestamp": (_without("Hatp-Timestamp"), "Hatp-Timestamp"),
    "signature-not-base64url": (_replaced("Hatp-Signature", "not*base64url"), "Hatp-Signature"),
    "timestamp-not-a-wire-time": (_replaced("Hatp-Timestamp", "yesterday"), "Hatp-Timestamp"),
    "signature-too-long": (_replaced("Hatp-Signature", "A" * 2000), "Hatp-Signature"),
}


@pytest.mark.parametrize("case", sorted(BAD_SIGNATURES))
def test_a_request_changed_after_signing_is_refused_BAD_SIGNATURE(serve: Any, case: str) -> None:
    """[API-SIGNED] a body or target changed after signing, a header missing or not of its
    form: 401 BAD_SIGNATURE, nothing asked."""
    served = _serve(serve)
    asked = _request(served)
    body = json.dumps(
        {
            "txnId": asked.txn_id,
            "plan": asked.plan.to_wire(),
            "planDigest": asked.plan_digest,
            "groupId": "finance",
            "decideBy": format_time(asked.decide_by),
        }
    ).encode()
    key = served.world.keys["coordinator"]
    headers = sign_request(key, COORDINATOR, "POST", "/gateway/asks", body, START)
    change, header = BAD_SIGNATURES[case]
    target, sent_headers, sent = change(headers, body)

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.post(
            target, content=sent, headers={**sent_headers, "Content-Type": "application/json"}
        )

    response = served.run(go)
    assert response.status_code == 401, response.text
    refused = response.json()
    assert (refused["code"], refused["data"]["reason"]) == ("UNAUTHENTICATED", "BAD_SIGNATURE")
    assert refused["data"].get("header") == header
    assert served.people.delivered == []


def test_a_signed_header_given_twice_is_refused_BAD_SIGNATURE(serve: Any) -> None:
    """[API-SIGNED] two Hatp-Caller headers: which one is meant is not guessed."""
    served = _serve(serve)
    key = served.world.keys["coordinator"]
    target = "/gateway/asks/ask-nosuchask0000000000000"
    headers = sign_request(key, COORDINATOR, "GET", target, b"", START)

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        twice = [*headers.items(), ("Hatp-Caller", STRANGER)]
        return await http.get(target, headers=twice)

    response = served.run(go)
    assert response.status_code == 401
    assert response.json()["data"] == {"reason": "BAD_SIGNATURE", "header": "Hatp-Caller"}


def test_an_unsigned_request_to_a_server_that_takes_only_signed_ones_is_refused(
    serve: Any,
) -> None:
    """[API-SIGNED] no signature and no token, where only signed requests are taken: 401
    NO_TOKEN, saying how to sign."""
    served = _serve(serve)

    async def go(http: httpx2.AsyncClient) -> BaseException:
        with pytest.raises(Unauthenticated) as refused:
            await HttpGateway(BASE, GATEWAY, client=http).poll("ask-nosuchask0000000000000")
        return refused.value

    unsigned = served.run(go)
    assert _reason(unsigned) == "NO_TOKEN"
    assert "Hatp-Signature" in unsigned.message


def test_a_signed_agent_speaks_only_for_itself_API_CALLER(serve: Any) -> None:
    """[API-SIGNED] [API-CALLER] a caller a signature authenticates is bound as a token's
    is: the expense bot's key cannot ask for the travel bot's plan (403 CALLER_REFUSED);
    acme's coordinator (not an agent) may."""
    served = _serve(serve)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> tuple[BaseException, Any]:
        with pytest.raises(CallerRefused) as refused:
            await _gateway(served, http, signer=AGENT_KEY, caller=OTHER_AGENT).ask(asked)
        return refused.value, await _gateway(served, http).ask(asked)

    refused, asked_by_coordinator = served.run(go)
    assert (refused.data["caller"], refused.data["named"]) == (OTHER_AGENT, INITIATOR)
    assert asked_by_coordinator["kind"] == "pending"


# -- bearer tokens beside signatures -----------------------------------------------------------


def test_with_tokens_too_a_request_authenticates_either_way(serve: Any) -> None:
    """[API-TOKEN] [API-SIGNED] with [api] callers and signed callers: a bearer token or a
    signature will do; with neither, 401 NO_TOKEN naming both; a bad token stays
    BAD_TOKEN."""
    callers = ApiCallers({STRANGER: TOKEN_DIGEST})
    served = _serve(serve, callers=callers)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> dict[str, Any]:
        out: dict[str, Any] = {
            "token": await HttpGateway(BASE, GATEWAY, token=TOKEN, client=http).ask(asked),
            "signed": await _gateway(served, http).ask(asked),
        }
        for name, client in (
            ("neither", HttpGateway(BASE, GATEWAY, client=http)),
            ("bad token", HttpGateway(BASE, GATEWAY, token=new_api_token()[0], client=http)),
        ):
            with pytest.raises(Unauthenticated) as refused:
                await client.ask(asked)
            out[name] = refused.value
        return out

    out = served.run(go)
    assert out["token"]["askId"] == out["signed"]["askId"]
    assert _reason(out["neither"]) == "NO_TOKEN"
    assert "Bearer" in out["neither"].message and "Hatp-Signature" in out["neither"].message
    assert _reason(out["bad token"]) == "BAD_TOKEN"


def test_a_server_without_signed_callers_takes_its_bearer_tokens_alone(serve: Any) -> None:
    """[API-TOKEN] no signed callers: the token works as before, and a signature is not a
    credential there (401 NO_TOKEN)."""
    served = _serve(serve, callers=ApiCallers({STRANGER: TOKEN_DIGEST}), signed=False)
    asked = _request(served)

    async def go(http: httpx2.AsyncClient) -> tuple[Any, BaseException]:
        by_token = await HttpGateway(BASE, GATEWAY, token=TOKEN, client=http).ask(asked)
        with pytest.raises(Unauthenticated) as refused:
            await _gateway(served, http).ask(asked)
        return by_token, refused.value

    by_token, signed = served.run(go)
    assert by_token["kind"] == "pending"
    assert _reason(signed) == "NO_TOKEN"


@pytest.mark.parametrize(
    ("callers", "security"),
    [
        (None, [{"requestSignature": []}]),
        (ApiCallers({STRANGER: TOKEN_DIGEST}), [{"callerToken": []}, {"requestSignature": []}]),
    ],
    ids=["signed", "either"],
)
def test_the_openapi_document_declares_the_signature(
    serve: Any, callers: ApiCallers | None, security: list[Any]
) -> None:
    """[API-SIGNED] [HTTP-OPENAPI] the signature's scheme (its header), required on every
    operation (either scheme, with tokens too), and 401 UNAUTHENTICATED among the
    refusals; the document stays valid OpenAPI."""
    served = _serve(serve, callers=callers)

    async def go(http: httpx2.AsyncClient) -> Any:
        return (await http.get("/openapi.json")).json()

    document = served.run(go)
    validate(document)
    scheme = document["components"]["securitySchemes"]["requestSignature"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "Hatp-Signature")
    ask = document["paths"]["/gateway/asks"]["post"]
    assert ask["security"] == security
    assert "UNAUTHENTICATED" in ask["responses"]["401"]["x-hatp-codes"]
    assert "CALLER_REFUSED" in ask["responses"]["403"]["x-hatp-codes"]


# -- the signature itself --------------------------------------------------------------------


def test_sign_request_covers_method_target_time_and_body() -> None:
    """[API-SIGNED] what sign_request makes, SignedCallers checks as is; the caller is the
    key's issuer; a target that is not an ASCII path cannot be signed."""
    key = SigningKey.from_seed(bytes([74]) * 32, f"{COORDINATOR}#key-1")
    keyring = Keyring([(key.public, COORDINATOR)], trusted_issuers=[COORDINATOR])
    callers = SignedCallers(keyring, clock=ManualClock(START))
    target = "/gateway/asks/ask-1?waitSeconds=20.0"
    headers = sign_request(key, COORDINATOR, "GET", target, b"", START)
    assert set(headers) == {"Hatp-Caller", "Hatp-Key-Id", "Hatp-Timestamp", "Hatp-Signature"}
    assert headers["Hatp-Timestamp"] == format_time(START)
    lowercase = {name.lower(): value for name, value in headers.items()}
    assert callers.verify("GET", target, lowercase, b"") == COORDINATOR
    for method, changed, body in (("POST", target, b""), ("GET", "/gateway/asks/ask-1", b"")):
        with pytest.raises(Unauthenticated) as refused:
            callers.verify(method, changed, headers, body)
        assert refused.value.data["reason"] == "BAD_SIGNATURE"
    with pytest.raises(Unauthenticated):
        callers.verify("GET", "/gateway/asks/ask-é", headers, b"")
    with pytest.raises(ValueError, match="ASCII"):
        sign_request(key, COORDINATOR, "GET", "/gateway/asks/ask-é", b"", START)
    with pytest.raises(ValueError, match="positive"):
        SignedCallers(keyring, tolerance=timedelta(0))
    with pytest.raises(ValueError, match="caller"):
        HttpGateway(BASE, GATEWAY, signer=key)
