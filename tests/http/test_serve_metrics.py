"""``hatp serve``'s ``GET /metrics``: the Prometheus text format, read back with
``prometheus_client.parser``, counting this app's transactions, asks, requests and
store errors (docs/spec.md §25 [HTTP-METRICS])."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any, NoReturn

import httpx2
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gate.calls import ARGS, NOW, REQUESTER, approval, make_gate
from hatp.clock import ManualClock, SystemClock
from hatp.coordinator import Recovery
from hatp.demo._tickets import open_tickets, ticket_system
from hatp.errors import ApprovalInvalid, ApprovalRequired, StoreUnavailable
from hatp.http import ApiCallers, ServeMetrics, api_token_digest, hatp_app
from hatp.store import Store
from lease.sor_world import CLOSE, KEY, RESOURCE, TICKET, grant, refusal
from serve_world import START, Served, WatchedClock


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(http: httpx2.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return samples(answer.text)


def test_a_committed_and_an_aborted_trip_are_counted_with_their_phases(serve: Any) -> None:
    """[HTTP-METRICS] after a trip that commits and one the airline refuses (a business seat),
    begun over the JSON API: 2 begun, 1 committed, 1 aborted, each phase histogram has its
    counts, no ask is left open, and the requests are counted by route template."""
    served: Served = serve(clock=SystemClock())
    good = served.plan("trip-metrics-ok")
    bad = served.plan("trip-metrics-no", seat="2A")

    async def go(http: httpx2.AsyncClient) -> Any:
        for plan in (good, bad):
            assert (await http.post("/coordinator/txns", json={"plan": plan})).status_code == 201
        await asyncio.gather(*served.app.state.hatp_coordinator.running())
        await http.get("/coordinator/txns/trip-metrics-ok")
        await http.get("/coordinator/txns/trip-metrics-ok")
        return await scrape(http), await http.get("/coordinator/txns/trip-metrics-no")

    found, last = served.run(go)
    assert last.json()["state"] == "aborted"
    assert value(found, "hatp_txn_begun_total") == 2
    assert value(found, "hatp_txn_ended_total", state="committed") == 1
    assert value(found, "hatp_txn_ended_total", state="aborted") == 1
    assert value(found, "hatp_txn_ended_total", state="needs-attention") == 0
    assert value(found, "hatp_txn_decided_total", decision="commit") == 1
    assert value(found, "hatp_txn_decided_total", decision="abort") == 1
    for phase in ("phase1", "phase2", "whole"):
        assert value(found, "hatp_txn_phase_seconds_count", phase=phase) == 2, phase
    assert value(found, "hatp_asks_open", kind="approval") == 0
    assert value(found, "hatp_asks_oldest_open_seconds") == 0
    assert value(found, "hatp_gateway_listen_failures_total") == 0  # [GW-LISTEN]
    route = "/coordinator/txns/{txnId}"
    assert value(found, "hatp_http_requests_total", method="GET", route=route, status="200") == 2
    begun = value(
        found, "hatp_http_requests_total", method="POST", route="/coordinator/txns", status="201"
    )
    assert begun == 2


def test_open_asks_and_the_age_of_the_oldest_are_read_at_the_scrape(serve: Any) -> None:
    """[HTTP-METRICS] an ask nobody answers is open: hatp_asks_open{kind="approval"} is 1 and
    the oldest's age follows the gateway's clock."""
    clock = WatchedClock(START)
    served: Served = serve(clock=clock, decision="never")

    async def go(http: httpx2.AsyncClient) -> Any:
        assert (await http.post("/gateway/asks", json=served.ask_body())).status_code == 200
        clock.advance(90)
        return await scrape(http)

    found = served.run(go)
    assert value(found, "hatp_asks_open", kind="approval") == 1
    assert value(found, "hatp_asks_open", kind="question") == 0
    assert value(found, "hatp_asks_oldest_open_seconds") == timedelta(seconds=90).total_seconds()


def test_open_transactions_are_counted_by_state_at_the_scrape(serve: Any) -> None:
    """[HTTP-METRICS] [COORD-SETTLE] what is open in the log, by state: a trip whose
    approver never answers is active; nothing is counted as aborting or unwinding."""
    served: Served = serve(clock=SystemClock(), decision="never")

    async def go(http: httpx2.AsyncClient) -> Any:
        plan = served.plan("trip-metrics-open")
        assert (await http.post("/coordinator/txns", json={"plan": plan})).status_code == 201
        return await scrape(http)

    found = served.run(go)
    assert value(found, "hatp_txn_open", state="active") == 1
    for state in ("committing", "in-doubt", "unwinding", "aborting"):
        assert value(found, "hatp_txn_open", state=state) == 0, state
    assert ("hatp_txn_open", (("state", "aborted"),)) not in found  # a finished state


def test_a_store_that_fails_raises_the_store_error_counter(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[HTTP-METRICS] a request refused 503 STORE_UNAVAILABLE counts for its component
    (coordinator), and a scrape whose open asks cannot be read counts for the gateway and
    still answers."""
    served: Served = serve(clock=SystemClock())

    def down(*_: Any, **__: Any) -> NoReturn:
        raise StoreUnavailable("the database did not answer")

    monkeypatch.setattr(served.coordinator.log, "get", down)
    monkeypatch.setattr(served.gateway.asks, "open_asks", down)

    async def go(http: httpx2.AsyncClient) -> Any:
        refused = await http.get("/coordinator/txns/trip-none")
        return refused, await scrape(http)

    refused, found = served.run(go)
    assert (refused.status_code, refused.json()["code"]) == (503, "STORE_UNAVAILABLE")
    assert value(found, "hatp_store_errors_total", component="coordinator") == 1
    assert value(found, "hatp_store_errors_total", component="gateway") == 1


def test_metrics_need_no_token_and_each_app_counts_alone(serve: Any) -> None:
    """[HTTP-METRICS] with [api] callers, /metrics answers without a bearer token, as
    /healthz does; a refused request is counted 401; a second app's registry is its own."""
    token = "t-" + "x" * 40
    callers = ApiCallers({"agent://acme.com/travel-bot": api_token_digest(token)})
    served: Served = serve(callers=callers)
    other: Served = serve()

    async def go(http: httpx2.AsyncClient) -> Any:
        refused = await http.get("/coordinator/txns/trip-none")
        return refused, await scrape(http)

    async def quiet(http: httpx2.AsyncClient) -> Any:
        return await scrape(http)

    refused, found = served.run(go)
    assert refused.status_code == 401
    route = "/coordinator/txns/{txnId}"
    assert value(found, "hatp_http_requests_total", method="GET", route=route, status="401") == 1
    alone = other.run(quiet)
    assert value(alone, "hatp_http_requests_total", method="GET", route=route, status="401") == 0


def test_recovery_runs_are_counted_from_its_stats(serve: Any) -> None:
    """[HTTP-METRICS] hatp_recovery_runs_total and hatp_recovery_takeovers_total are read from
    the served Recovery's stats at the scrape: one turn over a log with nothing open."""
    served: Served = serve(clock=SystemClock())
    recovery = Recovery(served.coordinator)
    app = hatp_app(coordinator=served.coordinator, recovery=recovery)
    served = dataclasses.replace(served, app=app)

    async def go(http: httpx2.AsyncClient) -> Any:
        await recovery.turn()
        return await scrape(http)

    found = served.run(go)
    assert value(found, "hatp_recovery_runs_total") == 1
    assert value(found, "hatp_recovery_takeovers_total") == 0
    assert value(found, "hatp_recovery_failures_total") == 0


def test_gate_checks_and_refusals_are_counted_by_code(store: Store) -> None:
    """[HTTP-METRICS] a gate given the app's metrics counts a call refused for want of an
    approval, one that passes, and one refused for an approval used before (reason USED)."""
    metrics = ServeMetrics()
    gate = make_gate(store, ManualClock(NOW), observer=metrics)

    def call(doc: dict[str, Any] | None) -> None:
        asyncio.run(gate.run("charge_card", ARGS, doc, REQUESTER, lambda _: "ok"))

    with pytest.raises(ApprovalRequired):
        call(None)
    call(approval())
    with pytest.raises(ApprovalInvalid):
        call(approval())
    found = samples(generate_latest(metrics.registry).decode())
    assert value(found, "hatp_gate_checks_total", result="passed") == 1
    assert value(found, "hatp_gate_checks_total", result="refused") == 2
    assert value(found, "hatp_gate_refusals_total", code="APPROVAL_REQUIRED", reason="") == 1
    assert value(found, "hatp_gate_refusals_total", code="APPROVAL_INVALID", reason="USED") == 1


def test_lease_grants_and_refusals_are_counted_by_reason(store: Store) -> None:
    """[HTTP-METRICS] a system of record given the app's metrics counts a lease granted and
    applied, and one refused at apply for its shape (reason SHAPE)."""
    metrics = ServeMetrics()
    sor = ticket_system(store, KEY, ManualClock(START), observer=metrics)
    open_tickets(store, [TICKET])
    lease = grant(sor)
    sor.apply(lease, resource=RESOURCE, mutation=CLOSE)
    assert refusal(sor, b"not a lease").reason == "SHAPE"
    found = samples(generate_latest(metrics.registry).decode())
    assert value(found, "hatp_lease_decisions_total", stage="grant", result="passed") == 1
    assert value(found, "hatp_lease_decisions_total", stage="apply", result="passed") == 1
    assert value(found, "hatp_lease_decisions_total", stage="apply", result="refused") == 1
    assert value(found, "hatp_lease_refusals_total", stage="apply", reason="SHAPE") == 1
