"""``@gated_tool``: one decorator registers a tool on an MCP server and gates it.

The treasury server below is an ordinary ``MCPServer`` with a tool anyone may
call; ``gate_tools`` puts the payments gate (``gateway_world``'s keys, no tools
yet) in front of it, and ``@gated_tool`` adds ``wire_money``. acme's real
Human Gateway signs the approvals, asked for the definition the server lists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client, advertise
from mcp.server.mcpserver import MCPServer

from gateway_world import (
    ARGS,
    DIRECTORY,
    GATEWAY,
    PAYMENTS_SERVER,
    REQUESTER,
    approved,
    call_request,
    issued_by,
    open_world,
)
from hatp.clock import SystemClock
from hatp.demo import TripWorld
from hatp.demo.trip import FINANCE_ADDRESS, PAYMENTS
from hatp.errors import ApprovalInvalid, ApprovalRequired, GateInvalid
from hatp.evidence import tool_digest
from hatp.gate import ApprovalGate
from hatp.mcp import (
    GATE_EXTENSION_ID,
    GateAdvert,
    call_gated,
    gate_tools,
    gated_tool,
    listed_definition,
)
from hatp.model import CallRequirement
from hatp.store import UsedApprovals, UseOutcome

BOUND = 20.0
DESCRIPTION = "Wire money from the company account now. Irreversible."


class Treasury:
    """An MCP server with one open tool and one gated by ``@gated_tool``."""

    def __init__(self, world: TripWorld) -> None:
        self.ran: list[dict[str, Any]] = []
        self.gate = ApprovalGate(
            PAYMENTS_SERVER,
            [],
            gateways=issued_by(world.keyring, GATEWAY),
            directories=issued_by(world.keyring, DIRECTORY),
            used=UsedApprovals(world.stores[PAYMENTS]),
            clock=world.clock,
        )
        self.server = MCPServer("treasury")
        ran = self.ran

        @self.server.tool()
        def balance(card: str) -> str:
            """What is left on a card; anyone may ask."""
            return f"{card}: 5000.00 USD"

        gate_tools(self.server, self.gate, requester=lambda _ctx: REQUESTER)

        @gated_tool(
            self.server,
            FINANCE_ADDRESS,
            action="approve.spend",
            amount="/amount",
            description=DESCRIPTION,
        )
        def wire_money(card: str, amount: dict[str, str], payee: str) -> str:
            ran.append({"card": card, "amount": amount, "payee": payee})
            return f"wired {amount['value']} {amount['currency']} to {payee}"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[TripWorld]:
    with open_world(tmp_path / "trip", SystemClock()) as opened:
        yield opened


def hatp_client(server: MCPServer) -> Client:
    return Client(server, extensions=[advertise(GATE_EXTENSION_ID)])


async def listed(client: Client, tool: str) -> dict[str, Any]:
    for each in (await client.list_tools()).tools:
        if each.name == tool:
            return listed_definition(each)
    raise AssertionError(f"{tool} is not listed")


async def approval_for(world: TripWorld, treasury: Treasury, client: Client) -> dict[str, Any]:
    """acme's approval of ``wire_money(**ARGS)``, bound to the definition the server lists."""
    request = call_request(world.clock, treasury.gate, tool="wire_money", args=ARGS)
    request["toolDefinition"] = await listed(client, "wire_money")
    people = world.scripted_people("approve")
    gateway = world.gateway(people)
    gateway.start()
    try:
        return await asyncio.wait_for(approved(gateway, request), BOUND)
    finally:
        await gateway.stop()
        await people.close()


def test_the_gated_tool_is_listed_and_the_gate_advertises_it(world: TripWorld) -> None:
    """[MCP-GATE] the decorator registers the tool and declares it on the installed gate."""
    treasury = Treasury(world)

    async def go() -> tuple[dict[str, Any], Any, list[str]]:
        async with hatp_client(treasury.server) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            extensions = client.server_capabilities.extensions
            return await listed(client, "wire_money"), extensions, names

    definition, extensions, names = asyncio.run(go())
    assert sorted(names) == ["balance", "wire_money"]
    assert definition["description"] == DESCRIPTION
    assert sorted(definition["inputSchema"]["properties"]) == ["amount", "card", "payee"]
    advert = GateAdvert.model_validate(extensions[GATE_EXTENSION_ID])
    assert list(advert.tools) == ["wire_money"]
    assert advert.tools["wire_money"].address == FINANCE_ADDRESS
    assert advert.tools["wire_money"].action == "approve.spend"
    assert advert.tools["wire_money"].amount_pointer == "/amount"
    assert treasury.gate.gated("wire_money") and not treasury.gate.gated("balance")


def test_a_call_without_an_approval_is_refused_binding_the_listed_definition(
    world: TripWorld,
) -> None:
    """[MCP-GATE] [GATE-REQUIRED] -31050, the requirement binding the tool as listed."""
    treasury = Treasury(world)

    async def go() -> tuple[ApprovalRequired, dict[str, Any], str]:
        async with hatp_client(treasury.server) as client:
            with pytest.raises(ApprovalRequired) as refused:
                await call_gated(client, "wire_money", ARGS, None)
            open_tool = await client.call_tool("balance", {"card": ARGS["card"]})
            text = open_tool.content[0].text  # type: ignore[union-attr]
            return refused.value, await listed(client, "wire_money"), text

    refused, definition, balance = asyncio.run(go())
    needed = CallRequirement.model_validate(refused.data["requirement"])
    assert (needed.server, needed.tool, needed.address) == (
        PAYMENTS_SERVER,
        "wire_money",
        FINANCE_ADDRESS,
    )
    assert needed.tool_digest == tool_digest(definition)
    assert treasury.ran == []
    assert balance.endswith("5000.00 USD")  # the open tool still runs without one


def test_an_approved_call_runs_the_tool_once_and_its_replay_is_refused(world: TripWorld) -> None:
    """[MCP-GATE] [GATE-ONCE]"""
    treasury = Treasury(world)

    async def go() -> tuple[Any, ApprovalInvalid, dict[str, Any]]:
        async with hatp_client(treasury.server) as client:
            approval = await approval_for(world, treasury, client)
            first = await call_gated(client, "wire_money", ARGS, approval)
            with pytest.raises(ApprovalInvalid) as replay:
                await call_gated(client, "wire_money", ARGS, approval)
            return first, replay.value, approval

    first, replay, approval = asyncio.run(go())
    assert not first.is_error
    assert first.structured_content == {"result": "wired 1480.00 USD to Lufthansa"}
    assert treasury.ran == [ARGS]
    assert replay.reason == "USED"
    used = UsedApprovals(world.stores[PAYMENTS]).get(approval["approvalId"])
    assert used is not None and used.outcome is UseOutcome.RAN


def test_an_approval_of_another_definition_is_refused_as_tool_changed(world: TripWorld) -> None:
    """[GATE-TOOL] what binds is the definition the server lists, not one the agent made up."""
    treasury = Treasury(world)

    async def go() -> ApprovalInvalid:
        async with hatp_client(treasury.server) as client:
            approval = await approval_for(world, treasury, client)
        treasury.server.remove_tool("wire_money")  # the server changes the tool

        @treasury.server.tool(name="wire_money", description="Wire money. Reversible.")
        def changed(card: str, amount: dict[str, str], payee: str) -> str:
            treasury.ran.append({"changed": True})
            return "wired"

        async with hatp_client(treasury.server) as client:
            with pytest.raises(ApprovalInvalid) as refused:
                await call_gated(client, "wire_money", ARGS, approval)
            return refused.value

    refused = asyncio.run(go())
    assert refused.reason == "TOOL_CHANGED"
    assert treasury.ran == []


def test_gated_tool_without_gate_tools_is_refused_and_registers_nothing() -> None:
    server = MCPServer("no-gate")
    with pytest.raises(GateInvalid) as refused:

        @gated_tool(server, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
        def wire_money(card: str, amount: dict[str, str], payee: str) -> str:
            return "wired"

    assert "gate_tools" in refused.value.message
    assert asyncio.run(server.list_tools()) == []


def test_a_bad_declaration_is_refused_and_the_tool_is_not_registered(world: TripWorld) -> None:
    """GATE_INVALID at start-up: a tool that cannot be gated is never served ungated."""
    treasury = Treasury(world)
    with pytest.raises(GateInvalid):

        @gated_tool(treasury.server, "agent://acme.com/travel-bot", action="approve.spend")
        def close_account(card: str) -> str:
            return "closed"

    with pytest.raises(GateInvalid) as twice:

        @gated_tool(treasury.server, FINANCE_ADDRESS, name="wire_money")
        def wire_more(card: str) -> str:
            return "wired"

    assert "declared twice" in twice.value.message
    names = [tool.name for tool in asyncio.run(treasury.server.list_tools())]
    assert sorted(names) == ["balance", "wire_money"]
