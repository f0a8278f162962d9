"""The coordinator drives the four trip participants over MCP exactly as it does in process.

Each participant (airline, hotel, calendar, payments) sits behind its own
in-process MCP server (``serve_hatp``); the coordinator reaches each through
``mcp_participant``, with a tap counting votes for acme's approver (as in
the coordinator tests). Once, the payments server keeps back its answer to
the first capture until the coordinator has given up on it: a real MCP
request timeout during the final step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client, advertise
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer

from coordinator.trips import ALL_WHOLE, BOUND, Tap, Trip, events, failed_findings
from hatp.clock import ManualClock
from hatp.coordinator import Outcome
from hatp.demo import PARTICIPANT_IDS, PAYMENTS, TripWorld
from hatp.mcp import EXTENSION_ID, METHODS, McpParticipant, mcp_participant, serve_hatp
from hatp.model import TxnState
from hatp.participant import Participant
from hatp.store import DecisionLog, Store

#: Real seconds the coordinator's link to payments waits for an answer.
PAYMENTS_TIMEOUT = 1.0


@pytest.fixture
def trip(tmp_path: Path, clock: ManualClock, store: Store, store_url: str) -> Iterator[Trip]:
    """The trip world (the log on the parametrized store, the participants beside it)."""
    urls = None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)
    world = TripWorld.open(tmp_path / "trip", clock, rooms=30, store_urls=urls)
    try:
        yield Trip(world, DecisionLog(store), clock)
    finally:
        world.close()


class HoldFirstAnswer:
    """Server middleware: the first ``method`` request runs, but its answer waits for the
    next one to arrive (the caller's retry), or until the caller gives up on it."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.arrived = 0
        self._retried = asyncio.Event()

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if ctx.method != self.method:
            return await call_next(ctx)
        self.arrived += 1
        if self.arrived > 1:
            self._retried.set()
            return await call_next(ctx)
        answer = await call_next(ctx)
        await asyncio.wait_for(self._retried.wait(), BOUND)  # cancelled when the caller gives up
        return answer


async def links_over_mcp(
    trip: Trip, stack: AsyncExitStack, middleware: dict[str, list[Any]] | None = None
) -> dict[str, Participant]:
    """Serve each trip participant on its own MCP server; return a tapped link to each."""
    world, links = trip.world, {}
    for pid, participant in world.participants.items():
        mcp = MCPServer(pid.removeprefix("mcp://"), middleware=(middleware or {}).get(pid))
        serve_hatp(mcp, participant, keys=[world.keys[pid].public])
        client = Client(mcp, extensions=[advertise(EXTENSION_ID)])
        await stack.enter_async_context(client)
        timeout = PAYMENTS_TIMEOUT if pid == PAYMENTS else None
        link = await mcp_participant(pid, client, world.keyring, timeout=timeout)
        links[pid] = Tap(link, trip.votes, trip.renewals)
    return links


def run_over_mcp(trip: Trip, middleware: dict[str, list[Any]] | None = None) -> Outcome:
    async def go() -> Outcome:
        async with AsyncExitStack() as stack:
            links = await links_over_mcp(trip, stack, middleware)
            assert all(isinstance(link.inner, McpParticipant) for link in links.values())  # type: ignore[attr-defined]
            return await trip.coordinator(links=links).run(trip.plan())

    return asyncio.run(go())


def test_a_trip_commits_across_four_mcp_servers(trip: Trip) -> None:
    outcome = run_over_mcp(trip)
    txn = outcome.txn_id
    assert outcome.state is TxnState.COMMITTED
    assert trip.world.effects(txn) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []
    assert events(outcome.record, "txn.in-doubt") == []
    for event in events(outcome.record, "txn.committed"):
        body = event["body"]
        pid = trip.world.participants[_participant(outcome, body["branchId"])]
        stored = asyncio.run(pid.status(txn, body["branchId"])).receipt
        assert body["receipt"] == stored, "the record holds what the participant signed"


def test_a_capture_whose_answer_times_out_goes_in_doubt_and_commits_once_COORD_IN_DOUBT(
    trip: Trip,
) -> None:
    """[COORD-IN-DOUBT] a real MCP timeout on the final step: retried with the same ids,
    answered with the stored receipt, committed, captured once."""
    held = HoldFirstAnswer(METHODS["txn/commit"])
    outcome = run_over_mcp(trip, {PAYMENTS: [held]})
    txn = outcome.txn_id
    assert outcome.state is TxnState.COMMITTED
    assert held.arrived == 2, "the capture was sent twice: once timed out, once answered"
    (doubt,) = events(outcome.record, "txn.in-doubt")
    assert (doubt["body"]["branchId"], doubt["body"]["attempt"]) == ("charge", 1)
    assert "gave no answer to dev.hatp/txn/commit" in doubt["body"]["detail"]
    assert trip.kinds(PAYMENTS, txn) == ["authorized", "captured"]
    assert trip.world.effects(txn) == ALL_WHOLE
    (captured,) = [
        e for e in events(outcome.record, "txn.committed") if e["body"]["branchId"] == "charge"
    ]
    stored = asyncio.run(trip.world.participants[PAYMENTS].status(txn, "charge")).receipt
    assert captured["body"]["receipt"] == stored
    assert failed_findings(outcome, trip.world) == []


def _participant(outcome: Outcome, branch_id: str) -> str:
    (planned,) = events(outcome.record, "txn.planned")
    plan = planned["body"].get("plan", planned["body"])
    return next(b["participant"] for b in plan["branches"] if b["branchId"] == branch_id)
