"""``dev.hatp/txn/undo`` on a coordinator served over MCP: an agent shows a committed trip's
undo plan (nothing begun), begins it, acme's people approve it and it commits; every
refusal arrives as the same typed error (``UNDO_REFUSED`` with its reason,
``TXN_UNKNOWN``), and params that do not fit are ``PEER_INCOMPATIBLE`` naming the member."""

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
from hatp.errors import HatpError, PeerIncompatible, TransactionUnknown, UndoRefused
from hatp.evidence import verify_record
from hatp.mcp import EXTENSION_ID, McpCoordinator, mcp_coordinator, serve_coordinator
from hatp.mcp._rpc import request
from hatp.mcp._wire import METHODS
from hatp.model import TxnState
from hatp.store import DecisionLog, open_store

T = TypeVar("T")
#: The trip's committed steps; the calendar event (compensate tier) can always be taken back.
STEPS = {"seat", "room", "calendar", "charge"}


def _with_coordinator(
    folder: Path, body: Callable[[McpCoordinator, Client, TripWorld], Awaitable[T]]
) -> T:
    """Run ``body`` against acme's coordinator served over MCP, its people approving."""

    async def go() -> tuple[T | None, HatpError | None]:
        with TripWorld.open(folder, SystemClock()) as world:
            gateway = world.gateway(world.scripted_people())
            store = open_store(folder / "coordinator.db")
            coordinator = world.coordinator(
                DecisionLog(store), gateway, retry_delay=0.05, poll_seconds=0.2
            )
            server = MCPServer("acme-coordinator")
            serve_coordinator(server, coordinator, keys=[world.keys["coordinator"].public])
            gateway.start()
            try:
                async with Client(server, extensions=[advertise(EXTENSION_ID)]) as client:
                    remote = await mcp_coordinator(COORDINATOR, client, world.keyring)
                    try:
                        return await asyncio.wait_for(body(remote, client, world), 60), None
                    except HatpError as exc:  # raised out here, not wrapped by the client's tasks
                        return None, exc
            finally:
                await gateway.stop()
                store.close()

    answer, error = asyncio.run(go())
    if error is not None:
        raise error
    return answer  # type: ignore[return-value]


async def _committed(remote: McpCoordinator, txn_id: str) -> None:
    await remote.begin(trip_plan(txn_id, decide_by=SystemClock().now() + timedelta(minutes=10)))
    assert await remote.wait(txn_id, every=0.05) is TxnState.COMMITTED


def test_an_agent_shows_then_begins_an_undo_and_it_commits_MCP_UNDO(tmp_path: Path) -> None:
    """[MCP-UNDO] plan_undo (dryRun) answers the plan and begins nothing; undo answers
    {txnId, state, plan} once the undo is logged; acme's approver approves it and it commits,
    its record verifying offline; the calendar event is taken back, the rest stands."""

    async def body(remote: McpCoordinator, client: Client, world: TripWorld) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        await _committed(remote, "trip-mcp-undo")
        seen["every"] = await remote.plan_undo("trip-mcp-undo")
        seen["shown"] = await remote.plan_undo(
            "trip-mcp-undo", steps=["calendar"], undo_txn_id="trip-mcp-undo.back"
        )
        with pytest.raises(TransactionUnknown):
            await remote.state("trip-mcp-undo.back")  # a dry run begins nothing
        seen["begun"] = await remote.undo(
            "trip-mcp-undo", steps=["calendar"], decide_seconds=600, undo_txn_id="trip-mcp-u1"
        )
        seen["ended"] = await remote.wait("trip-mcp-u1", every=0.05)
        seen["record"] = await remote.record("trip-mcp-u1")
        seen["effects"] = world.effects("trip-mcp-undo")
        return seen

    seen = _with_coordinator(tmp_path, body)
    every = seen["every"]
    taken = [b["branchId"] for b in every["branches"]]
    kept = {k["branchId"] for k in every["undoes"]["kept"]}
    assert "calendar" in taken and set(taken) | kept == STEPS and kept.isdisjoint(taken)
    shown = seen["shown"]
    assert shown["txnId"] == "trip-mcp-undo.back"
    assert [(b["branchId"], b["operation"]) for b in shown["branches"]] == [
        ("calendar", "hatp.compensate")
    ]
    assert {k["branchId"]: k["reason"] for k in shown["undoes"]["kept"]} == dict.fromkeys(
        STEPS - {"calendar"}, "not asked to undo"
    )
    begun = seen["begun"]
    assert begun["txnId"] == "trip-mcp-u1"
    assert begun["state"] in ("active", "committing", "committed")
    assert begun["plan"]["undoes"]["txnId"] == "trip-mcp-undo"
    assert [b["undoes"] for b in begun["plan"]["branches"]] == [
        {"txnId": "trip-mcp-undo", "branchId": "calendar"}
    ]
    assert seen["ended"] is TxnState.COMMITTED
    with TripWorld.open(tmp_path, SystemClock()) as world:
        report = verify_record(seen["record"], world.keyring)
        assert report.ok, report
    effects = seen["effects"]
    assert effects.pop("mcp://calendar.example") != "whole"
    assert set(effects.values()) == {"whole"}


def test_refusals_arrive_as_the_same_typed_errors_MCP_UNDO(tmp_path: Path) -> None:
    """[MCP-UNDO] [UNDO-REFUSE] an unknown transaction TXN_UNKNOWN; a step that is not the
    transaction's UNDO_REFUSED UNKNOWN_STEP naming it; once the calendar is taken back,
    ALREADY_UNDONE for it, and once everything is, NOTHING_TO_UNDO: each the typed error,
    its data as the coordinator raised it."""

    async def body(remote: McpCoordinator, client: Client, world: TripWorld) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with pytest.raises(TransactionUnknown) as unknown:
            await remote.undo("trip-none")
        seen["unknown"] = unknown.value
        await _committed(remote, "trip-mcp-refused")
        with pytest.raises(UndoRefused) as lunch:
            await remote.plan_undo("trip-mcp-refused", steps=["calendar", "lunch"])
        seen["lunch"] = lunch.value
        first = await remote.undo("trip-mcp-refused", steps=["calendar"])
        assert await remote.wait(first["txnId"], every=0.05) is TxnState.COMMITTED
        with pytest.raises(UndoRefused) as again:
            await remote.undo("trip-mcp-refused", steps=["calendar"])
        seen["again"] = again.value
        rest = await remote.undo("trip-mcp-refused")
        assert await remote.wait(rest["txnId"], every=0.05) is TxnState.COMMITTED
        with pytest.raises(UndoRefused) as nothing:
            await remote.plan_undo("trip-mcp-refused")
        seen["nothing"] = nothing.value
        return seen

    seen = _with_coordinator(tmp_path, body)
    assert seen["unknown"].code == "TXN_UNKNOWN"
    assert seen["lunch"].data == {
        "reason": "UNKNOWN_STEP",
        "txnId": "trip-mcp-refused",
        "branchId": "lunch",
    }
    assert seen["again"].data == {
        "reason": "ALREADY_UNDONE",
        "txnId": "trip-mcp-refused",
        "branchId": "calendar",
    }
    assert seen["nothing"].reason == "NOTHING_TO_UNDO"
    assert seen["nothing"].data["txnId"] == "trip-mcp-refused"


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"txnId": "trip-none", "steps": "calendar"}, "/steps"),
        ({"txnId": "trip-none", "steps": []}, "/steps"),
        ({"txnId": "trip-none", "differing": "yes"}, "/differing"),
        ({"txnId": "trip-none", "dryRun": 1}, "/dryRun"),
        ({"txnId": "trip-none", "decideSeconds": -5}, "/decideSeconds"),
        ({"txnId": "trip-none", "undoTxnId": "not an id"}, "/undoTxnId"),
        ({"txnId": "trip-none", "approvals": []}, "/approvals"),
        ({}, "/txnId"),
    ],
)
def test_params_that_do_not_fit_are_refused_naming_the_member_MCP_UNDO(
    tmp_path: Path, params: dict[str, Any], where: str
) -> None:
    """[MCP-UNDO] a member of the wrong type or out of range, an unknown one, no txnId:
    PEER_INCOMPATIBLE (reason METHOD) naming where, before the coordinator is asked (the
    same params well formed are TXN_UNKNOWN)."""

    async def body(remote: McpCoordinator, client: Client, world: TripWorld) -> Any:
        with pytest.raises(PeerIncompatible) as refused:
            await request(client, METHODS["txn/undo"], params, server=COORDINATOR)
        with pytest.raises(TransactionUnknown):
            await request(client, METHODS["txn/undo"], {"txnId": "trip-none"}, server=COORDINATOR)
        return refused.value

    refused = _with_coordinator(tmp_path, body)
    assert refused.reason == "METHOD"
    assert refused.data["where"] == where
    assert refused.data["method"] == METHODS["txn/undo"]
