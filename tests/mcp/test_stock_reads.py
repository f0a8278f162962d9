"""A stock MCP client reads a branch's status, a transaction's state and its record through tools.

A stock client (an MCP SDK client that declares no extension, or a host
driven by a model) cannot send ``dev.hatp/txn/*`` requests; it lists and
calls tools. Each test here is such a client (:func:`stock_client`: in
process, no extension declared, the pre-2026 initialize handshake, so it
negotiates 2025-11-25 as most hosts do) against the airline participant of
the participant tests (``airline_mcp``) or acme's coordinator of the trip
world, and compares what the tool answers with what the hatp method answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client, advertise
from mcp.server.mcpserver import MCPServer

from hatp.clock import SystemClock
from hatp.coordinator import Coordinator
from hatp.demo import COORDINATOR, TripWorld, trip_plan
from hatp.errors import HatpError, OutcomeConflict, StoreUnavailable, TransactionUnknown
from hatp.evidence import digest, verify, verify_record
from hatp.mcp import EXTENSION_ID, METHODS, McpCoordinator, mcp_coordinator, serve_coordinator
from hatp.mcp._rpc import request
from hatp.model import TxnState
from hatp.participant import ParticipantServer
from hatp.store import DecisionLog, Store, open_store
from participant.ops import AIRLINE, keyring, plan, run, seen

BRANCH_STATUS = "hatp_branch_status"
TXN_STATUS = "hatp_txn_status"
TXN_RECORD = "hatp_txn_record"
STOCK_VERSION = "2025-11-25"
DIGEST = digest(plan().to_wire())


def stock_client(server: MCPServer) -> Client:
    """A client as a stock host has one: no extension declared, the initialize handshake."""
    return Client(server, mode="legacy")


def text_of(result: types.CallToolResult) -> str:
    """The one text block of a tool result."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def assert_refusal(result: types.CallToolResult, error: HatpError) -> None:
    """``result`` is ``error`` as a tool result: isError, its message, its wire form."""
    assert result.is_error is True
    assert text_of(result) == error.message
    assert result.structured_content == {"error": error.to_dict()}


MISSING = "Field required"
NOT_TEXT = "Input should be a valid string"
EMPTY = "String should have at least 1 character"


def assert_argument_error(
    result: types.CallToolResult, tool: str, argument: str, problem: str
) -> None:
    """The SDK's own answer to arguments that do not fit the tool's input schema: an
    isError result, no structured content, its text the tool's name and pydantic's
    report naming the argument and the problem."""
    assert result.is_error is True
    assert result.structured_content is None
    text = text_of(result)
    assert text.startswith(f"Error executing tool {tool}: 1 validation error"), text
    assert f"\n{argument}\n  {problem}" in text, text


# --- a participant: hatp_branch_status ------------------------------------------------------


async def _stock_calls(server: MCPServer, *calls: dict[str, Any]) -> list[types.CallToolResult]:
    async with stock_client(server) as client:
        return [await client.call_tool(BRANCH_STATUS, args) for args in calls]


def test_a_stock_client_lists_the_read_only_branch_status_tool(airline_mcp: MCPServer) -> None:
    """[MCP-READ-TOOL] listed next to the server's own tool, read-only, ``{txnId, branchId}``."""

    async def go() -> tuple[str, list[types.Tool]]:
        async with stock_client(airline_mcp) as client:
            return client.protocol_version, (await client.list_tools()).tools

    version, listed = run(go())
    assert version == STOCK_VERSION
    tools = {tool.name: tool for tool in listed}
    assert sorted(tools) == [BRANCH_STATUS, "seat_map"], "the server's own tool is still there"
    status = tools[BRANCH_STATUS]
    assert status.input_schema["required"] == ["txnId", "branchId"]
    properties = status.input_schema["properties"]
    assert {properties[a]["type"] for a in ("txnId", "branchId")} == {"string"}
    assert status.annotations is not None and status.annotations.read_only_hint is True
    assert status.description is not None and AIRLINE in status.description


def test_the_status_of_a_prepared_branch_is_what_txn_status_answers(
    airline: ParticipantServer, airline_mcp: MCPServer
) -> None:
    """[MCP-READ-TOOL] the same BranchStatus, its receipt as signed, and a line to read."""
    run(airline.prepare(plan(), "seat", 1))

    async def go() -> tuple[types.CallToolResult, dict[str, Any]]:
        [result] = await _stock_calls(airline_mcp, {"txnId": "txn-1", "branchId": "seat"})
        async with Client(airline_mcp, extensions=[advertise(EXTENSION_ID)]) as client:
            params = {"txnId": "txn-1", "branchId": "seat"}
            answer = await request(client, METHODS["txn/status"], params, server=AIRLINE)
        return result, answer

    result, answer = run(go())
    assert result.is_error is False
    assert result.structured_content == answer == {"status": answer["status"]}
    status = run(airline.status("txn-1", "seat"))
    assert answer["status"] == status.to_wire()
    verify(answer["status"]["receipt"], keyring())  # the receipt exactly as it was signed
    assert text_of(result) == (
        "branch seat of txn-1 at mcp://airline.example: prepared "
        "(hold until 2026-12-02T09:10:00.000Z; fence 1)"
    )


async def _refused(p: ParticipantServer) -> str:
    await p.prepare(plan(), "seat", 1)
    await p.prepare(plan("txn-2"), "seat", 1)  # the seat is held: txn-2 votes no
    return "txn-2"


async def _committed(p: ParticipantServer) -> str:
    voted = await p.prepare(plan(), "event", 1)
    await p.commit("txn-1", "event", 1, DIGEST, seen(voted))
    return "txn-1"


async def _flagged(p: ParticipantServer) -> str:
    voted = await p.prepare(plan(), "charge", 1)
    await p.abort("txn-1", "charge", 1)
    with pytest.raises(OutcomeConflict):
        await p.commit("txn-1", "charge", 1, DIGEST, seen(voted))
    return "txn-1"


LINES: dict[str, tuple[Callable[[ParticipantServer], Coroutine[Any, Any, str]], str, str]] = {
    "refused": (
        _refused,
        "seat",
        "branch seat of txn-2 at mcp://airline.example: refused "
        "(because SOLD_OUT: seat 12A is not free; fence 1)",
    ),
    "committed": (
        _committed,
        "event",
        "branch event of txn-1 at mcp://airline.example: committed (fence 1)",
    ),
    "flagged": (
        _flagged,
        "charge",
        "branch charge of txn-1 at mcp://airline.example: aborted (fence 1; flags: "
        "2026-12-02T09:00:00.000Z commit (fence 1) refused: branch 'charge' of 'txn-1' is "
        "already aborted; commit refused and flagged (an outcome is never flipped))",
    ),
}


@pytest.mark.parametrize("case", sorted(LINES))
def test_the_text_line_says_where_the_branch_stands(
    case: str, airline: ParticipantServer, airline_mcp: MCPServer
) -> None:
    steps, branch_id, line = LINES[case]
    txn_id = run(steps(airline))
    [result] = run(_stock_calls(airline_mcp, {"txnId": txn_id, "branchId": branch_id}))
    assert result.is_error is False
    assert result.structured_content == {"status": run(airline.status(txn_id, branch_id)).to_wire()}
    assert text_of(result) == line


def test_a_branch_the_participant_never_heard_of_is_unknown_not_a_refusal(
    airline: ParticipantServer, airline_mcp: MCPServer
) -> None:
    """The participant answers status for any branch (§13): ``unknown``, fence 0, no receipt."""
    [result] = run(_stock_calls(airline_mcp, {"txnId": "txn-9", "branchId": "nowhere"}))
    assert result.is_error is False
    expected = run(airline.status("txn-9", "nowhere"))
    assert result.structured_content == {"status": expected.to_wire()}
    assert result.structured_content["status"]["state"] == "unknown"
    assert result.structured_content["status"]["fence"] == 0
    assert result.structured_content["status"]["receipt"] is None
    assert text_of(result) == (
        "branch nowhere of txn-9 at mcp://airline.example: unknown "
        "(this participant was never asked about it)"
    )


def test_a_status_the_participant_cannot_read_is_an_is_error_result_with_its_code(
    airline_mcp: MCPServer, ledgers: Store
) -> None:
    """[MCP-READ-TOOL] A hatp refusal reaches a stock client as a tool result it shows the model,
    not as a JSON-RPC error: here the participant's store lost its branch table."""
    with ledgers.transaction() as conn:
        conn.exec_driver_sql("DROP TABLE hatp_branch")

    async def go() -> tuple[types.CallToolResult, HatpError]:
        [result] = await _stock_calls(airline_mcp, {"txnId": "txn-1", "branchId": "seat"})
        async with Client(airline_mcp, extensions=[advertise(EXTENSION_ID)]) as client:
            params = {"txnId": "txn-1", "branchId": "seat"}
            try:
                await request(client, METHODS["txn/status"], params, server=AIRLINE)
            except HatpError as exc:
                return result, exc
        raise AssertionError("txn/status answered without its table")

    result, refused = run(go())
    assert isinstance(refused, StoreUnavailable)
    assert_refusal(result, refused)
    assert result.structured_content["error"]["code"] == "STORE_UNAVAILABLE"


@pytest.mark.parametrize(
    ("args", "argument", "problem"),
    [
        ({"txnId": "txn-1"}, "branchId", MISSING),
        ({"branchId": "seat"}, "txnId", MISSING),
        ({"txnId": 1, "branchId": "seat"}, "txnId", NOT_TEXT),
        ({"txnId": "txn-1", "branchId": ""}, "branchId", EMPTY),
    ],
    ids=["branch-missing", "txn-missing", "txn-not-text", "branch-empty"],
)
def test_arguments_that_do_not_fit_get_the_sdk_s_own_error_result(
    args: dict[str, Any], argument: str, problem: str, airline_mcp: MCPServer
) -> None:
    [result] = run(_stock_calls(airline_mcp, args))
    assert_argument_error(result, BRANCH_STATUS, argument, problem)


# --- a coordinator: hatp_txn_status and hatp_txn_record -------------------------------------


@dataclass
class Served:
    """acme's coordinator behind an MCP server, reached by a stock client and a hatp one."""

    world: TripWorld
    coordinator: Coordinator
    stock: Client
    remote: McpCoordinator


@asynccontextmanager
async def served_coordinator(folder: Path) -> AsyncIterator[Served]:
    """acme's coordinator over MCP (as in test_coordinator_server), its people approving."""
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
            async with (
                stock_client(server) as stock,
                Client(server, extensions=[advertise(EXTENSION_ID)]) as hatp,
            ):
                remote = await mcp_coordinator(COORDINATOR, hatp, world.keyring)
                yield Served(world, coordinator, stock, remote)
        finally:
            await gateway.stop()
            store.close()


def _plan(txn_id: str) -> dict[str, Any]:
    return trip_plan(txn_id, decide_by=SystemClock().now() + timedelta(minutes=10))


def test_a_stock_client_lists_the_coordinator_s_read_only_tools(tmp_path: Path) -> None:
    """[MCP-READ-TOOL] two read-only tools, each with ``{txnId}``."""

    async def go() -> tuple[str, list[types.Tool]]:
        async with served_coordinator(tmp_path) as served:
            return served.stock.protocol_version, (await served.stock.list_tools()).tools

    version, listed = asyncio.run(go())
    assert version == STOCK_VERSION
    tools = {tool.name: tool for tool in listed}
    assert sorted(tools) == [TXN_RECORD, TXN_STATUS]
    for tool in tools.values():
        assert tool.input_schema["required"] == ["txnId"]
        assert tool.input_schema["properties"]["txnId"]["type"] == "string"
        assert tool.annotations is not None and tool.annotations.read_only_hint is True


def test_the_state_and_record_of_a_committed_trip_are_what_the_methods_answer(
    tmp_path: Path,
) -> None:
    """[MCP-READ-TOOL] the record verifies against the world's keyring; the text summarises."""

    async def go() -> dict[str, Any]:
        async with served_coordinator(tmp_path) as served:
            await served.remote.begin(_plan("trip-stock-1"))
            ended = await asyncio.wait_for(served.remote.wait("trip-stock-1", every=0.05), 60)
            args = {"txnId": "trip-stock-1"}
            return {
                "ended": ended,
                "status": await served.stock.call_tool(TXN_STATUS, args),
                "record": await served.stock.call_tool(TXN_RECORD, args),
                "txn/record": await served.remote.record("trip-stock-1"),
                "keyring": served.world.keyring,
            }

    seen = asyncio.run(go())
    assert seen["ended"] is TxnState.COMMITTED
    status: types.CallToolResult = seen["status"]
    assert status.is_error is False
    assert status.structured_content == {"txnId": "trip-stock-1", "state": "committed"}
    assert text_of(status) == "transaction trip-stock-1: committed"

    record: types.CallToolResult = seen["record"]
    assert record.is_error is False
    assert record.structured_content == {"record": seen["txn/record"]}
    logged = record.structured_content["record"]
    report = verify_record(logged, seen["keyring"])
    assert report.ok, report
    events = len(logged["events"])
    assert events > 1
    assert text_of(record) == (
        f"transaction trip-stock-1: committed; its record holds {events} signed events so far "
        "(structuredContent.record)"
    )


def test_an_unknown_transaction_is_an_is_error_result_TXN_UNKNOWN(tmp_path: Path) -> None:
    """[MCP-READ-TOOL] the same TXN_UNKNOWN ``txn/state`` raises, as an isError result."""

    async def go() -> tuple[list[types.CallToolResult], HatpError]:
        async with served_coordinator(tmp_path) as served:
            args = {"txnId": "no-such-txn"}
            results = [await served.stock.call_tool(t, args) for t in (TXN_STATUS, TXN_RECORD)]
            try:
                await served.remote.state("no-such-txn")
            except HatpError as exc:
                return results, exc
        raise AssertionError("txn/state knew no-such-txn")

    (status, record), refused = asyncio.run(go())
    assert isinstance(refused, TransactionUnknown)
    for result in (status, record):
        assert_refusal(result, refused)
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] == "TXN_UNKNOWN"


def test_a_coordinator_tool_without_its_txn_id_gets_the_sdk_s_own_error_result(
    tmp_path: Path,
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, MISSING),
        ({"txnId": ["trip-1"]}, NOT_TEXT),
        ({"txnId": ""}, EMPTY),
    ]

    async def go() -> list[tuple[str, str, types.CallToolResult]]:
        async with served_coordinator(tmp_path) as served:
            return [
                (tool, problem, await served.stock.call_tool(tool, args))
                for tool in (TXN_STATUS, TXN_RECORD)
                for args, problem in cases
            ]

    for tool, problem, result in asyncio.run(go()):
        assert_argument_error(result, tool, "txnId", problem)
