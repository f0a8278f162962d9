"""The coordinator's JSON API (``hatp serve``): a trip begun over HTTP commits, its record
fetched over HTTP verifies offline; refusals; the log's lease on a transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from hatp.clock import SystemClock
from hatp.evidence import verify_record
from serve_world import Served


async def finished(served: Served) -> None:
    """Wait (bounded by the test's bound) for every transaction begun over HTTP to end."""
    api = served.app.state.hatp_coordinator
    await asyncio.gather(*api.running())


@pytest.mark.parametrize(("decision", "state"), [("approve", "committed"), ("reject", "aborted")])
def test_a_trip_begun_over_http_ends_and_its_record_verifies_offline(
    serve: Any, decision: str, state: str
) -> None:
    """[HTTP-SERVE-COORDINATOR] POST /coordinator/txns is 201 once the transaction is in the
    log; it runs against the in-process participants; GET …/record verifies offline."""
    served: Served = serve(clock=SystemClock(), decision=decision)
    plan = served.plan("trip-http-begin")

    async def go(http: httpx2.AsyncClient) -> tuple[Any, Any, Any]:
        begun = await http.post("/coordinator/txns", json={"plan": plan})
        await finished(served)
        now = await http.get(begun.headers["location"])
        record = await http.get(begun.headers["location"] + "/record")
        return begun, now, record

    begun, now, record = served.run(go)
    assert begun.status_code == 201
    assert begun.json()["txnId"] == "trip-http-begin"
    assert begun.headers["location"] == "/coordinator/txns/trip-http-begin"
    assert now.json() == {"txnId": "trip-http-begin", "state": state}
    report = verify_record(record.json()["record"], served.keyring)
    assert report.ok, [f for f in report.findings if f.result.value != "pass"]
    effects = set(served.world.effects("trip-http-begin").values())
    assert effects == ({"whole"} if state == "committed" else {"none"})


def test_the_coordinator_refuses_with_typed_errors(serve: Any) -> None:
    """[HTTP-STATUS] a plan begun twice is 409 OUTCOME_CONFLICT; a plan breaking a rule or
    naming an unknown participant 422 PLAN_INVALID; an unknown transaction 404 TXN_UNKNOWN."""
    served: Served = serve(clock=SystemClock())
    plan = served.plan("trip-http-twice")
    stranger = served.plan("trip-http-stranger")
    stranger["branches"][0]["participant"] = "mcp://nobody.example"

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        answers = [
            await http.post("/coordinator/txns", json={"plan": plan}),
            await http.post("/coordinator/txns", json={"plan": plan}),
            await http.post(
                "/coordinator/txns", json={"plan": {"hatpVersion": "0.1", "txnId": "x"}}
            ),
            await http.post("/coordinator/txns", json={"plan": stranger}),
            await http.get("/coordinator/txns/trip-none"),
            await http.get("/coordinator/txns/trip-none/record"),
            await http.post("/coordinator/txns", json={}),
        ]
        await finished(served)
        return answers

    first, twice, shape, unknown, state, record, empty = served.run(go)
    assert first.status_code == 201
    assert (twice.status_code, twice.json()["code"]) == (409, "OUTCOME_CONFLICT")
    assert (shape.status_code, shape.json()["code"]) == (422, "PLAN_INVALID")
    assert (unknown.status_code, unknown.json()["data"]["reason"]) == (422, "UNKNOWN_PARTICIPANT")
    assert (state.status_code, state.json()["code"]) == (404, "TXN_UNKNOWN")
    assert (record.status_code, record.json()["code"]) == (404, "TXN_UNKNOWN")
    assert (empty.status_code, empty.json()["data"]["where"]) == (400, "/plan")


def test_an_operator_holds_a_finished_transaction_and_hands_it_back(serve: Any) -> None:
    """[HTTP-SERVE-COORDINATOR] the log's lease over HTTP ([STORE-LEASE] [STORE-FENCE]):
    acquire gives a fence, renew at another fence is 409 STALE_FENCE, release hands it back."""
    served: Served = serve(clock=SystemClock())
    plan = served.plan("trip-http-lock")
    lock = "/coordinator/txns/trip-http-lock/lock"

    async def go(http: httpx2.AsyncClient) -> list[Any]:
        await http.post("/coordinator/txns", json={"plan": plan})
        await finished(served)
        held = await http.post(lock, json={"owner": "ops/ann", "seconds": 60})
        fence = held.json()["fence"]
        return [
            held,
            await http.post(lock, json={"owner": "ops/bo", "seconds": 60}),
            await http.post(
                lock + "/renew", json={"owner": "ops/ann", "fence": fence, "seconds": 60}
            ),
            await http.post(
                lock + "/renew", json={"owner": "ops/ann", "fence": fence + 7, "seconds": 60}
            ),
            await http.post(lock + "/release", json={"owner": "ops/ann", "fence": fence}),
            await http.post(
                "/coordinator/txns/none/lock", json={"owner": "ops/ann", "seconds": 60}
            ),
            await http.post(lock, json={"owner": "ops/ann", "seconds": 0}),
        ]

    held, busy, renewed, stale, released, unknown, zero = served.run(go)
    fence = held.json()["fence"]
    assert isinstance(fence, int) and held.json()["txnId"] == "trip-http-lock"
    assert busy.json() == {"txnId": "trip-http-lock", "fence": None}
    assert renewed.json() == {"txnId": "trip-http-lock", "fence": fence}
    assert (stale.status_code, stale.json()["code"]) == (409, "STALE_FENCE")
    assert released.json() == {"txnId": "trip-http-lock", "fence": fence}
    assert (unknown.status_code, unknown.json()["code"]) == (404, "TXN_UNKNOWN")
    assert (zero.status_code, zero.json()["data"]["where"]) == (400, "/seconds")
