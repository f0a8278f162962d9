"""Gated MCP tools: a call runs only with an approval of exactly that call, once.

The payments server of ``gateway_world`` gates ``charge_card`` and
``void_charge`` with :func:`hatp.mcp._gate.gate_tools`; acme's real Human
Gateway signs the approvals (its people approve as scripted, on the real
clock). Refusals arrive as JSON-RPC errors with our codes and the hatp error
as ``data``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client, advertise
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from gateway_world import (
    AGENT,
    ARGS,
    GATEWAY,
    PAYMENTS_SERVER,
    REQUESTER,
    VOID_ARGS,
    Payments,
    acme_gateway,
    approved,
    call_request,
    open_world,
    payments_server,
)
from hatp.clock import SystemClock
from hatp.demo import TripWorld
from hatp.demo.trip import FINANCE_ADDRESS
from hatp.errors import ApprovalInvalid, ApprovalRequired
from hatp.gate import Requester
from hatp.mcp import (
    APPROVAL_META_KEY,
    GATE_EXTENSION_ID,
    JSONRPC_CODES,
    GateAdvert,
    call_gated,
    gate_tools,
)
from hatp.model import CallRequirement
from hatp.store import UseOutcome

BOUND = 20.0


@pytest.fixture
def world(tmp_path: Path) -> Iterator[TripWorld]:
    with open_world(tmp_path / "trip", SystemClock()) as opened:
        yield opened


async def approval_for(world: TripWorld, payments: Payments, **options: Any) -> dict[str, Any]:
    """An approval of the call as the server lists its tool now."""
    definition = await payments.listed(options.get("tool", "charge_card"))
    async with acme_gateway(world) as gateway:
        request = call_request(world.clock, payments.gate, definition=definition, **options)
        return await asyncio.wait_for(approved(gateway, request), BOUND)


def hatp_client(server: MCPServer) -> Client:
    """A client that declares the gate extension: refusals come as JSON-RPC errors."""
    return Client(server, extensions=[advertise(GATE_EXTENSION_ID)])


def code_of(error: MCPError) -> tuple[int, str, str | None]:
    data: dict[str, Any] = error.data
    return error.code, data["code"], data["data"].get("reason")


def test_the_gate_advertises_the_server_its_gated_tools_and_the_gateways_it_trusts(
    world: TripWorld,
) -> None:
    """[MCP-GATE] a plain client sees what to ask for before it calls."""
    payments = payments_server(world)

    async def go() -> Any:
        async with hatp_client(payments.server) as client:
            return client.server_capabilities.extensions

    extensions = asyncio.run(go())
    advert = GateAdvert.model_validate(extensions[GATE_EXTENSION_ID])
    assert advert.server_id == PAYMENTS_SERVER
    assert sorted(advert.tools) == ["charge_card", "void_charge"]
    assert advert.tools["charge_card"].address == FINANCE_ADDRESS
    assert advert.tools["charge_card"].action == "approve.spend"
    assert advert.tools["charge_card"].amount_pointer == "/amount"
    assert advert.trusted_gateways == [GATEWAY]


def test_a_gated_call_without_an_approval_is_refused_saying_what_to_ask_for(
    world: TripWorld,
) -> None:
    """[MCP-GATE] [GATE-REQUIRED] -31050, data = the hatp error with the requirement."""
    payments = payments_server(world)

    async def go() -> tuple[MCPError, ApprovalRequired]:
        async with hatp_client(payments.server) as client:
            with pytest.raises(MCPError) as raw:
                await client.call_tool("charge_card", ARGS)
            with pytest.raises(ApprovalRequired) as typed:
                await call_gated(client, "charge_card", ARGS, None)
            return raw.value, typed.value

    raw, typed = asyncio.run(go())
    assert raw.code == JSONRPC_CODES["APPROVAL_REQUIRED"] == -31050
    assert raw.data["code"] == "APPROVAL_REQUIRED"
    needed = CallRequirement.model_validate(raw.data["data"]["requirement"])
    listed = asyncio.run(payments.listed("charge_card"))
    assert needed == payments.gate.requirement("charge_card", ARGS, definition=listed)
    assert (needed.server, needed.tool, needed.address) == (
        PAYMENTS_SERVER,
        "charge_card",
        FINANCE_ADDRESS,
    )
    assert typed.data["requirement"] == raw.data["data"]["requirement"]
    assert payments.ran == []


def test_a_valid_approval_runs_the_tool_once_and_its_replay_is_refused_as_used(
    world: TripWorld,
) -> None:
    """[MCP-GATE] [GATE-ONCE] the approval travels in _meta; a replay gets -31051 USED."""
    payments = payments_server(world)

    async def go() -> tuple[Any, MCPError, dict[str, Any]]:
        approval = await approval_for(world, payments)
        async with hatp_client(payments.server) as client:
            first = await client.call_tool("charge_card", ARGS, meta={APPROVAL_META_KEY: approval})
            with pytest.raises(MCPError) as replay:
                await client.call_tool("charge_card", ARGS, meta={APPROVAL_META_KEY: approval})
            return first, replay.value, approval

    first, replay, approval = asyncio.run(go())
    assert not first.is_error
    assert first.structured_content == {"result": "charged 1480.00 USD to Lufthansa"}
    assert len(payments.ran) == 1
    assert code_of(replay) == (-31051, "APPROVAL_INVALID", "USED")
    used = payments.used.get(approval["approvalId"])
    assert used is not None and used.outcome is UseOutcome.RAN


def test_an_approval_used_with_changed_arguments_is_refused_as_another_call(
    world: TripWorld,
) -> None:
    """[MCP-GATE] [GATE-CALL] the gate checks the call it sees, not the one approved."""
    payments = payments_server(world)
    changed = {**ARGS, "amount": {"value": "14800.00", "currency": "USD"}}

    async def go() -> ApprovalInvalid:
        approval = await approval_for(world, payments)
        async with hatp_client(payments.server) as client:
            with pytest.raises(ApprovalInvalid) as refused:
                await call_gated(client, "charge_card", changed, approval)
            return refused.value

    refused = asyncio.run(go())
    assert refused.reason == "OTHER_CALL"
    assert payments.ran == []


def test_a_gated_call_whose_arguments_hold_no_amount_is_refused_as_call_invalid(
    world: TripWorld,
) -> None:
    """[MCP-GATE] -31052: the amount the approvers' authority must cover is not there."""
    payments = payments_server(world)
    no_amount = {"card": ARGS["card"], "amount": "a lot", "payee": "Lufthansa"}

    async def go() -> MCPError:
        async with hatp_client(payments.server) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("charge_card", no_amount)
            return refused.value

    refused = asyncio.run(go())
    assert code_of(refused) == (-31052, "CALL_INVALID", "AMOUNT")
    assert payments.ran == []


def test_an_approval_that_is_not_a_call_approval_is_refused_as_shape(world: TripWorld) -> None:
    """[MCP-GATE] [GATE-SHAPE] whatever sits in _meta is checked, never trusted."""
    payments = payments_server(world)

    async def go() -> list[MCPError]:
        refusals = []
        async with hatp_client(payments.server) as client:
            for junk in ("approved!", {"decision": "approve"}, [1, 2]):
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("charge_card", ARGS, meta={APPROVAL_META_KEY: junk})
                refusals.append(refused.value)
        return refusals

    for refused in asyncio.run(go()):
        assert code_of(refused) == (-31051, "APPROVAL_INVALID", "SHAPE")
    assert payments.ran == []


def test_the_requester_is_the_authenticated_caller_not_whoever_asked(world: TripWorld) -> None:
    """[MCP-REQUESTER] [GATE-REQUESTER] another agent presenting alice's approval is refused."""
    payments = payments_server(world)
    intruder = payments_server(world, requester=Requester("agent://evil.example/bot", AGENT))

    async def go() -> ApprovalInvalid:
        approval = await approval_for(world, payments)
        async with hatp_client(intruder.server) as client:
            with pytest.raises(ApprovalInvalid) as refused:
                await call_gated(client, "charge_card", ARGS, approval)
            return refused.value

    assert asyncio.run(go()).reason == "OTHER_REQUESTER"
    assert intruder.ran == []


def test_a_gated_tool_that_fails_uses_its_approval_and_records_the_failure(
    world: TripWorld,
) -> None:
    """[MCP-GATE] [GATE-ONCE] the claim comes before the tool; a failed run stays used."""
    payments = payments_server(world)

    async def go() -> tuple[Any, MCPError, dict[str, Any]]:
        approval = await approval_for(world, payments, tool="void_charge", args=VOID_ARGS)
        async with hatp_client(payments.server) as client:
            failed = await call_gated(client, "void_charge", VOID_ARGS, approval)
            with pytest.raises(MCPError) as again:
                await client.call_tool("void_charge", VOID_ARGS, meta={APPROVAL_META_KEY: approval})
            return failed, again.value, approval

    failed, again, approval = asyncio.run(go())
    assert failed.is_error
    assert payments.ran == [{"charge": "ch-1"}]
    assert code_of(again) == (-31051, "APPROVAL_INVALID", "USED")
    used = payments.used.get(approval["approvalId"])
    assert used is not None and used.outcome is UseOutcome.FAILED


def test_a_plain_mcp_client_still_calls_the_tools_that_are_not_gated(world: TripWorld) -> None:
    """[MCP-GATE] no extension declared, no approval, no hatp: the other tools work."""
    payments = payments_server(world)

    async def go() -> tuple[Any, list[str]]:
        async with Client(payments.server) as client:
            listed = await client.list_tools()
            return await client.call_tool("card_balance", {"card": "4242"}), [
                t.name for t in listed.tools
            ]

    result, names = asyncio.run(go())
    assert not result.is_error
    assert result.structured_content == {"result": "4242: 5000.00 USD"}
    assert sorted(names) == ["card_balance", "charge_card", "void_charge"]


def test_a_server_is_gated_once(world: TripWorld) -> None:
    """Gating the same server twice is refused at start-up, not at the first call."""
    payments = payments_server(world)
    with pytest.raises(ValueError, match="already registered"):
        gate_tools(payments.server, payments.gate, requester=lambda _ctx: REQUESTER)
