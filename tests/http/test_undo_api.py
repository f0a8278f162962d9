"""``POST /coordinator/txns/{txnId}/undo`` (``txn/undo``): a committed trip's undo plan shown
(a dry run, nothing begun), then begun, approved by acme's people and committed; each
refusal the typed body with its status; the route in the OpenAPI document, its real
answers fitting it; an agent's token undoes only its own transactions. On the
parametrized store (SQLite and PostgreSQL), over the app in process."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from hatp.clock import SystemClock
from hatp.demo.trip import INITIATOR
from hatp.errors import UndoRefused
from hatp.evidence import verify_record
from hatp.http import ApiCallers, CoordinatorClient, new_api_token
from serve_world import BASE, Served, check_answer

UNDO = "/coordinator/txns/{txnId}/undo"
#: The trip's committed steps; the calendar event (compensate tier) can always be taken back.
STEPS = {"seat", "room", "calendar", "charge"}


async def finished(served: Served) -> None:
    """Wait (bounded by the test's bound) for every transaction begun over HTTP to end."""
    await asyncio.gather(*served.app.state.hatp_coordinator.running())


async def committed_trip(served: Served, http: httpx2.AsyncClient, txn_id: str) -> None:
    """Begin the trip ``txn_id`` over HTTP and wait until it committed."""
    begun = await http.post("/coordinator/txns", json={"plan": served.plan(txn_id)})
    assert begun.status_code == 201, begun.text
    await finished(served)
    state = await http.get(f"/coordinator/txns/{txn_id}")
    assert state.json()["state"] == "committed", state.text


def _refusal(response: httpx2.Response) -> tuple[int, str, Any]:
    body = response.json()
    return response.status_code, body["code"], body["data"].get("reason")


def test_a_dry_run_shows_the_plan_and_begins_nothing_HTTP_UNDO(serve: Any) -> None:
    """[HTTP-UNDO] dryRun: 200 {plan}, no Location. Every committed step is either taken back
    (the calendar event with hatp.compensate, a hold) or kept with why; with steps, the others
    are kept as not asked for. No undo transaction is in the log and no step is claimed."""
    served: Served = serve(clock=SystemClock())

    async def go(http: httpx2.AsyncClient) -> tuple[list[httpx2.Response], Any]:
        await committed_trip(served, http, "trip-undo-dry")
        undo = "/coordinator/txns/trip-undo-dry/undo"
        answers = [
            await http.post(undo, json={"dryRun": True}),
            await http.post(
                undo,
                json={
                    "dryRun": True,
                    "steps": ["calendar"],
                    "undoTxnId": "trip-undo-dry.back",
                    "decideSeconds": 600,
                },
            ),
            await http.get("/coordinator/txns/trip-undo-dry.back"),
        ]
        claims = await served.coordinator.log.store.call(
            served.coordinator.undo_claims, "trip-undo-dry"
        )
        return answers, claims

    (every, calendar, after), claims = served.run(go)
    for shown in (every, calendar):
        assert shown.status_code == 200, shown.text
        assert "location" not in shown.headers
        assert set(shown.json()) == {"plan"}
    plan = every.json()["plan"]
    taken = [b["branchId"] for b in plan["branches"]]
    kept = {k["branchId"]: k["reason"] for k in plan["undoes"]["kept"]}
    assert "calendar" in taken and set(taken).isdisjoint(kept)
    assert set(taken) | set(kept) == STEPS
    assert all(reason for reason in kept.values())
    assert plan["undoes"]["txnId"] == "trip-undo-dry"
    assert plan["txnId"].startswith("trip-undo-dry.undo-")
    assert [g["groupId"] for g in plan["approvals"]] == ["finance"]

    plan = calendar.json()["plan"]
    assert plan["txnId"] == "trip-undo-dry.back"
    assert [b["branchId"] for b in plan["branches"]] == ["calendar"]
    branch = plan["branches"][0]
    assert (branch["operation"], branch["tier"], branch["amount"]) == (
        "hatp.compensate",
        "hold",
        None,
    )
    assert branch["undoes"] == {"txnId": "trip-undo-dry", "branchId": "calendar"}
    assert {k["branchId"]: k["reason"] for k in plan["undoes"]["kept"]} == dict.fromkeys(
        STEPS - {"calendar"}, "not asked to undo"
    )
    assert _refusal(after) == (404, "TXN_UNKNOWN", None)
    assert claims == {}


def test_an_undo_begun_over_http_is_approved_and_commits_HTTP_UNDO(serve: Any) -> None:
    """[HTTP-UNDO] 201 {txnId, state, plan} with Location once the undo is in the log; acme's
    approver approves it and it commits, its own record verifying offline: the calendar
    event is taken back, the rest of the trip stands. Asked again for the calendar: 409
    UNDO_REFUSED ALREADY_UNDONE; once every other step is taken back too, NOTHING_TO_UNDO."""
    served: Served = serve(clock=SystemClock(), decision="approve")

    async def go(http: httpx2.AsyncClient) -> tuple[list[httpx2.Response], dict[str, str]]:
        await committed_trip(served, http, "trip-undo-run")
        undo = "/coordinator/txns/trip-undo-run/undo"
        begun = await http.post(undo, json={"steps": ["calendar"]})
        await finished(served)
        location = begun.headers["location"]
        answers = [begun, await http.get(location), await http.get(location + "/record")]
        effects = served.world.effects("trip-undo-run")
        answers.append(await http.post(undo, json={"steps": ["calendar"]}))
        rest = await http.post(undo, json={})
        await finished(served)
        answers += [rest, await http.get(rest.headers["location"])]
        answers.append(await http.post(undo, json={"dryRun": True}))
        return answers, effects

    (begun, state, record, named, rest, rest_state, again), effects = served.run(go)
    assert begun.status_code == 201, begun.text
    undo_id = begun.json()["txnId"]
    assert undo_id.startswith("trip-undo-run.undo-")
    assert begun.headers["location"] == f"/coordinator/txns/{undo_id}"
    assert begun.json()["state"] in ("active", "committing", "committed")
    assert begun.json()["plan"]["txnId"] == undo_id
    assert begun.json()["plan"]["undoes"]["txnId"] == "trip-undo-run"
    assert state.json() == {"txnId": undo_id, "state": "committed"}
    report = verify_record(record.json()["record"], served.keyring)
    assert report.ok, [f for f in report.findings if f.result.value != "pass"]
    assert effects.pop("mcp://calendar.example") != "whole"
    assert set(effects.values()) == {"whole"}
    assert _refusal(named) == (409, "UNDO_REFUSED", "ALREADY_UNDONE")
    assert named.json()["data"] == {
        "reason": "ALREADY_UNDONE",
        "txnId": "trip-undo-run",
        "branchId": "calendar",
    }
    assert rest.status_code == 201, rest.text
    assert "calendar" not in [b["branchId"] for b in rest.json()["plan"]["branches"]]
    assert rest_state.json()["state"] == "committed"
    assert _refusal(again) == (409, "UNDO_REFUSED", "NOTHING_TO_UNDO")
    assert again.json()["data"]["txnId"] == "trip-undo-run"


def test_refusals_are_typed_with_their_status_HTTP_UNDO(serve: Any) -> None:
    """[HTTP-UNDO] [UNDO-REFUSE] an unknown transaction 404 TXN_UNKNOWN; a step that is not
    one of the transaction's 409 UNDO_REFUSED UNKNOWN_STEP naming it (the whole request
    refused, its good step too); an undoTxnId already in the log 409 OUTCOME_CONFLICT, the
    original's own 422 PLAN_INVALID UNDO_SHAPE. Nothing was begun for any of them."""
    served: Served = serve(clock=SystemClock())

    async def go(http: httpx2.AsyncClient) -> tuple[list[httpx2.Response], Any]:
        await committed_trip(served, http, "trip-undo-refused")
        other = await http.post("/coordinator/txns", json={"plan": served.plan("trip-undo-x")})
        assert other.status_code == 201, other.text  # in the log (how it ends is no matter)
        await finished(served)
        undo = "/coordinator/txns/trip-undo-refused/undo"
        answers = [
            await http.post("/coordinator/txns/trip-none/undo", json={}),
            await http.post(undo, json={"steps": ["calendar", "lunch"]}),
            await http.post(undo, json={"undoTxnId": "trip-undo-x"}),
            await http.post(undo, json={"undoTxnId": "trip-undo-refused"}),
        ]
        running = served.app.state.hatp_coordinator.running()
        claims = await served.coordinator.log.store.call(
            served.coordinator.undo_claims, "trip-undo-refused"
        )
        metrics = (await http.get("/metrics")).text
        return answers, (running, claims, metrics)

    (unknown, lunch, taken, itself), (running, claims, metrics) = served.run(go)
    # Counted where an operator watches: by result and reason [UNDO-REFUSE].
    assert 'hatp_undo_requests_total{reason="UNKNOWN_STEP",result="refused"} 1.0' in metrics
    assert 'hatp_undo_requests_total{reason="",result="planned"} 1.0' in metrics  # taken
    assert _refusal(unknown) == (404, "TXN_UNKNOWN", None)
    assert _refusal(lunch) == (409, "UNDO_REFUSED", "UNKNOWN_STEP")
    assert lunch.json()["data"] == {
        "reason": "UNKNOWN_STEP",
        "txnId": "trip-undo-refused",
        "branchId": "lunch",
    }
    assert _refusal(taken) == (409, "OUTCOME_CONFLICT", None)
    assert _refusal(itself) == (422, "PLAN_INVALID", "UNDO_SHAPE")
    assert (running, claims) == ([], {})


def test_an_open_transaction_is_not_undone_HTTP_UNDO(serve: Any) -> None:
    """[HTTP-UNDO] [UNDO-REFUSE] a transaction still waiting for its approval: 409
    UNDO_REFUSED NOT_COMMITTED, with its state."""
    served: Served = serve(decision="approve", after=3600.0)

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        begun = await http.post("/coordinator/txns", json={"plan": served.plan("trip-undo-open")})
        assert begun.status_code == 201, begun.text
        return await http.post("/coordinator/txns/trip-undo-open/undo", json={"dryRun": True})

    open_undo = served.run(go)
    assert _refusal(open_undo) == (409, "UNDO_REFUSED", "NOT_COMMITTED")
    assert open_undo.json()["data"]["state"] == "active"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"steps": "calendar"}, "/steps"),
        ({"steps": []}, "/steps"),
        ({"steps": [7]}, "/steps/0"),
        ({"steps": [""]}, "/steps/0"),
        ({"differing": "yes"}, "/differing"),
        ({"dryRun": 1}, "/dryRun"),
        ({"decideSeconds": 0}, "/decideSeconds"),
        ({"decideSeconds": "600"}, "/decideSeconds"),
        ({"undoTxnId": "not an id"}, "/undoTxnId"),
        ({"undoTxnId": 12}, "/undoTxnId"),
        ({"initiator": "agent://acme.com/other"}, "/initiator"),
        ({"txnId": "trip-other"}, "/txnId"),
        ([], ""),
    ],
)
def test_a_malformed_body_is_a_typed_400_and_begins_nothing_HTTP_UNDO(
    serve: Any, body: Any, where: str
) -> None:
    """[HTTP-UNDO] [HTTP-PARAMS] a member of the wrong type or out of range, an unknown one,
    the path's txnId in the body, a body that is no object: 400 INVALID_JSON naming where;
    nothing was built or begun (the same body well formed is refused for the unknown
    transaction, not for its shape)."""
    served: Served = serve()

    async def go(http: httpx2.AsyncClient) -> httpx2.Response:
        return await http.post("/coordinator/txns/trip-none/undo", json=body)

    refused = served.run(go)
    assert _refusal(refused) == (400, "INVALID_JSON", None)
    assert refused.json()["data"]["where"] == where
    assert served.app.state.hatp_coordinator.running() == []


def test_the_route_is_in_the_openapi_document_and_its_answers_fit_HTTP_UNDO(serve: Any) -> None:
    """[HTTP-UNDO] [HTTP-OPENAPI] the document describes the route: 201 UndoAnswer, 200
    UndoPlanAnswer (the dry run), 400, 404 TXN_UNKNOWN, 409 UNDO_REFUSED; its body the
    members UndoParams names and no others. A dry run, a begun undo and each refusal fit
    the schema of their status."""
    served: Served = serve(clock=SystemClock())

    async def go(http: httpx2.AsyncClient) -> tuple[dict[str, Any], list[httpx2.Response]]:
        document = (await http.get("/openapi.json")).json()
        await committed_trip(served, http, "trip-undo-doc")
        undo = "/coordinator/txns/trip-undo-doc/undo"
        answers = [
            await http.post(undo, json={"dryRun": True}),
            await http.post(undo, json={"decideSeconds": 900}),
            await http.post(undo, json={}),
            await http.post("/coordinator/txns/trip-none/undo", json={}),
            await http.post(undo, json={"bogus": True}),
        ]
        await finished(served)
        return document, answers

    document, answers = served.run(go)
    described = document["paths"][UNDO]["post"]
    responses = described["responses"]
    assert {"200", "201", "400", "404", "409"} <= set(responses)
    assert "UNDO_REFUSED" in responses["409"]["x-hatp-codes"]
    assert "TXN_UNKNOWN" in responses["404"]["x-hatp-codes"]
    assert described["description"].startswith("Carries the MCP method `dev.hatp/txn/undo`")
    body = described["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {
        "steps",
        "differing",
        "decideSeconds",
        "undoTxnId",
        "dryRun",
    }
    assert body["additionalProperties"] is False
    refusals = document["paths"]["/coordinator/txns"]["post"]["responses"]["409"]
    assert "UNDO_REFUSED" in refusals["x-hatp-codes"]  # an undo plan sent from outside
    assert [a.status_code for a in answers] == [200, 201, 409, 404, 400]
    for answer in answers:
        check_answer(document, UNDO, "POST", answer)


def test_an_agent_s_token_undoes_only_its_own_transactions_HTTP_UNDO(serve: Any) -> None:
    """[HTTP-UNDO] [API-OWNER] with [api] callers: another agent's token is refused 403
    CALLER_REFUSED (nothing built); the initiator's own token undoes it, through
    CoordinatorClient (plan_undo, undo) and with a refusal rebuilt as UndoRefused."""
    tokens = {who: new_api_token() for who in (INITIATOR, "agent://acme.com/expense-bot")}
    served: Served = serve(
        clock=SystemClock(), callers=ApiCallers({w: kept for w, (_, kept) in tokens.items()})
    )

    def client(http: httpx2.AsyncClient, who: str) -> CoordinatorClient:
        return CoordinatorClient(BASE, token=tokens[who][0], client=http)

    async def go(http: httpx2.AsyncClient) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        mine = client(http, INITIATOR)
        begun = await mine.begin(served.plan("trip-undo-owner"))
        await finished(served)
        assert (await mine.state(begun["txnId"]))["state"] == "committed"
        other = await http.post(
            "/coordinator/txns/trip-undo-owner/undo",
            json={"dryRun": True},
            headers={"Authorization": f"Bearer {tokens['agent://acme.com/expense-bot'][0]}"},
        )
        seen["other"] = _refusal(other)
        seen["named"] = other.json()["data"]["named"]
        seen["plan"] = await mine.plan_undo("trip-undo-owner", steps=["calendar"])
        seen["undo"] = await mine.undo("trip-undo-owner", undo_txn_id="trip-undo-owner.u1")
        await finished(served)
        seen["state"] = await mine.state("trip-undo-owner.u1")
        with pytest.raises(UndoRefused) as refused:
            await mine.undo("trip-undo-owner")
        seen["refused"] = refused.value
        return seen

    seen = served.run(go)
    assert seen["other"] == (403, "CALLER_REFUSED", None)
    assert seen["named"] == INITIATOR
    assert [b["branchId"] for b in seen["plan"]["branches"]] == ["calendar"]
    assert seen["undo"]["txnId"] == "trip-undo-owner.u1"
    assert seen["undo"]["plan"]["initiator"] == INITIATOR
    assert seen["state"]["state"] == "committed"
    assert seen["refused"].reason == "NOTHING_TO_UNDO"
