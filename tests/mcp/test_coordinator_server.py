"""A coordinator as an MCP server: an agent begins the trip over MCP and fetches its record."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp import Client
from mcp.client import advertise
from mcp.server.mcpserver import MCPServer

from hatp.clock import SystemClock
from hatp.demo import COORDINATOR, TripWorld, trip_plan
from hatp.errors import (
    HatpError,
    OutcomeConflict,
    PeerIncompatible,
    PlanInvalid,
    StaleFence,
    TransactionUnknown,
)
from hatp.evidence import verify_record
from hatp.mcp import EXTENSION_ID, McpCoordinator, mcp_coordinator, serve_coordinator
from hatp.model import TxnState
from hatp.store import DecisionLog, open_store

T = TypeVar("T")


def _with_coordinator(folder: Path, body: Callable[[McpCoordinator, TripWorld], Awaitable[T]]) -> T:
    """Run ``body`` against acme's coordinator served over MCP, its people approving."""

    async def go() -> tuple[T | None, HatpError | None]:
        with TripWorld.open(folder, SystemClock()) as world:
            gateway = world.gateway(world.scripted_people())
            store = open_store(folder / "coordinator.db")
            log = DecisionLog(store)
            coordinator = world.coordinator(log, gateway, retry_delay=0.05, poll_seconds=0.2)
            server = MCPServer("acme-coordinator")
            serve_coordinator(server, coordinator, keys=[world.keys["coordinator"].public])
            gateway.start()
            try:
                async with Client(server, extensions=[advertise(EXTENSION_ID)]) as client:
                    remote = await mcp_coordinator(COORDINATOR, client, world.keyring)
                    try:
                        return await asyncio.wait_for(body(remote, world), 60), None
                    except HatpError as exc:  # raised out here, not wrapped by the client's tasks
                        return None, exc
            finally:
                await gateway.stop()
                store.close()

    answer, error = asyncio.run(go())
    if error is not None:
        raise error
    return answer  # type: ignore[return-value]


def _plan(txn_id: str) -> dict[str, Any]:
    return trip_plan(txn_id, decide_by=SystemClock().now() + timedelta(minutes=10))


def test_an_agent_begins_a_trip_over_mcp_and_it_commits(tmp_path: Path) -> None:
    async def body(remote: McpCoordinator, world: TripWorld) -> tuple[TxnState, TxnState, Any]:
        begun = await remote.begin(_plan("trip-mcp-1"))
        ended = await remote.wait("trip-mcp-1", every=0.05)
        return begun, ended, await remote.record("trip-mcp-1")

    begun, ended, record = _with_coordinator(tmp_path, body)
    assert begun is not TxnState.COMMITTED  # begin returns once logged, not once finished
    assert ended is TxnState.COMMITTED
    with TripWorld.open(tmp_path, SystemClock()) as world:
        report = verify_record(record, world.keyring)
        assert report.ok, report


def test_a_plan_that_breaks_a_rule_is_refused_and_nothing_is_logged(tmp_path: Path) -> None:
    async def body(remote: McpCoordinator, world: TripWorld) -> Any:
        plan = _plan("trip-mcp-bad")
        plan["branches"][0]["participant"] = "mcp://nowhere.example"
        try:
            await remote.begin(plan)
        except PlanInvalid as exc:
            refused = exc
        with pytest.raises(TransactionUnknown):
            await remote.state("trip-mcp-bad")
        return refused

    refused = _with_coordinator(tmp_path, body)
    assert refused.data["reason"] == "UNKNOWN_PARTICIPANT"


def test_beginning_the_same_transaction_twice_is_refused(tmp_path: Path) -> None:
    async def body(remote: McpCoordinator, world: TripWorld) -> TxnState:
        plan = _plan("trip-mcp-twice")
        await remote.begin(plan)
        with pytest.raises(OutcomeConflict):
            await remote.begin(plan)
        return await remote.wait("trip-mcp-twice", every=0.05)

    assert _with_coordinator(tmp_path, body) is TxnState.COMMITTED


def test_a_server_that_is_not_that_coordinator_is_refused(tmp_path: Path) -> None:
    async def go() -> list[str]:
        reasons = []
        with TripWorld.open(tmp_path, SystemClock()) as world:
            plain = MCPServer("plain")
            async with Client(plain, extensions=[advertise(EXTENSION_ID)]) as client:
                try:
                    await mcp_coordinator(COORDINATOR, client, world.keyring)
                except PeerIncompatible as exc:
                    reasons.append(exc.reason)
            store = open_store(tmp_path / "coordinator.db")
            coordinator = world.coordinator(DecisionLog(store), world.gateway())
            served = MCPServer("acme-coordinator")
            serve_coordinator(served, coordinator, keys=[world.keys["coordinator"].public])
            async with Client(served, extensions=[advertise(EXTENSION_ID)]) as client:
                try:
                    await mcp_coordinator("hatp://other.example/coordinator", client, world.keyring)
                except PeerIncompatible as exc:
                    reasons.append(exc.reason)
            store.close()
        return reasons

    assert asyncio.run(go()) == ["NO_EXTENSION", "IDENTITY"]


def test_a_transaction_s_lease_is_taken_renewed_and_released_over_mcp(tmp_path: Path) -> None:
    """[STORE-LEASE] and [STORE-FENCE], served as lock/acquire, lock/renew, lock/release."""

    async def body(remote: McpCoordinator, world: TripWorld) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        await remote.begin(_plan("trip-mcp-lock"))
        await remote.wait("trip-mcp-lock", every=0.05)  # the outcome write released the lease
        fence = await remote.acquire("trip-mcp-lock", "ops/alice", 30)
        seen["fence"] = fence
        seen["second"] = await remote.acquire("trip-mcp-lock", "ops/bob", 30)
        assert fence is not None
        await remote.renew("trip-mcp-lock", "ops/alice", fence, 60)
        for call in (
            remote.renew("trip-mcp-lock", "ops/alice", fence - 1, 60),
            remote.renew("trip-mcp-lock", "ops/bob", fence, 60),
            remote.release("trip-mcp-lock", "ops/bob", fence),
        ):
            with pytest.raises(StaleFence):
                await call
        await remote.release("trip-mcp-lock", "ops/alice", fence)
        await remote.release("trip-mcp-lock", "ops/alice", fence)  # twice is harmless
        seen["after"] = await remote.acquire("trip-mcp-lock", "ops/bob", 30)
        with pytest.raises(TransactionUnknown):
            await remote.acquire("no-such-txn", "ops/bob", 30)
        with pytest.raises(PeerIncompatible) as caught:
            await remote.acquire("trip-mcp-lock", "ops/bob", 0)
        seen["bad"] = caught.value.data["where"]
        return seen

    seen = _with_coordinator(tmp_path, body)
    assert seen["second"] is None, "a live lease is granted to no one else"
    assert seen["after"] == seen["fence"] + 1, "every grant moves the fence up"
    assert seen["bad"] == "/seconds"
