"""A gated tool called by a stock MCP client: no extension, no ``_meta``, only a name and
arguments, as a host driven by a model calls it.

The payments server of ``gateway_world`` is given acme's real Human Gateway:
it asks it itself for exactly the call a stock client made, and answers with
a tool result (``isError``) that says what to do next. Called again with the
same arguments once people approved, the tool runs once. A client that
declares the extension keeps the JSON-RPC flow. Sessions on a 2025 protocol
version (``mode="legacy"``: the initialize handshake) see the adverts under
``capabilities.experimental``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client, advertise
from mcp.shared.exceptions import MCPError

from gateway_world import (
    AGENT,
    ARGS,
    GATEWAY,
    PAYMENTS_SERVER,
    TRAVELLER,
    Payments,
    acme_gateway,
    approved,
    call_request,
    gateway_server,
    open_world,
    payments_server,
)
from hatp._checks import unsafe_switched_off
from hatp.clock import SystemClock
from hatp.demo import TripWorld
from hatp.demo.trip import FINANCE_ADDRESS
from hatp.evidence import tool_digest
from hatp.gate import Requester
from hatp.mcp import (
    APPROVAL_META_KEY,
    CALL_APPROVAL_TOOL,
    EXTENSION_ID,
    GATE_EXTENSION_ID,
    GateAdvert,
)
from hatp.mcp import _gateway_server as gateway_server_module
from hatp.store import UseOutcome

BOUND = 20.0
#: Each check switched off here, and the tests that show the harm it prevents.
SWITCH_OFF_TESTS = {
    "MCP-GATE-LISTED": ("test_switched_off_a_changed_listing_runs_on_an_old_approval",),
}
OTHER_ARGS = {**ARGS, "amount": {"value": "99.00", "currency": "USD"}}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[TripWorld]:
    with open_world(tmp_path / "trip", SystemClock()) as opened:
        yield opened


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    """The hatp refusal a stock client reads from an ``isError`` result."""
    assert result.is_error
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    return error


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def until_it_runs(client: Client, args: dict[str, Any]) -> list[types.CallToolResult]:
    """Call ``charge_card`` as a model would, again and again, until it runs."""
    seen = []
    for _ in range(200):
        result = await client.call_tool("charge_card", args)
        seen.append(result)
        if not result.is_error:
            return seen
        await asyncio.sleep(0.1)
    raise AssertionError(f"charge_card never ran: {text_of(seen[-1])}")


def test_a_2025_session_sees_the_adverts_under_experimental(world: TripWorld) -> None:
    """[MCP-EXPERIMENTAL] an initialize-handshake session has no ``extensions``; the
    gate's and the gateway's adverts are under ``experimental`` as well."""
    payments = payments_server(world)

    async def go() -> tuple[str, Any, Any]:
        async with acme_gateway(world, after=0.3) as gateway:
            served = gateway_server(world, gateway)
            async with Client(payments.server, mode="legacy") as client:
                seen = client.server_capabilities
                version = client.session.protocol_version
            async with Client(served, mode="legacy") as client:
                gateway_seen = client.server_capabilities
        return version, seen, gateway_seen

    version, seen, gateway_seen = asyncio.run(go())
    assert version == "2025-11-25"
    advert = GateAdvert.model_validate(seen.experimental[GATE_EXTENSION_ID])
    assert advert.server_id == PAYMENTS_SERVER
    assert advert.tools["charge_card"].address == FINANCE_ADDRESS
    assert gateway_seen.experimental[EXTENSION_ID]["id"] == GATEWAY
    assert gateway_seen.experimental[EXTENSION_ID]["roles"] == ["gateway", "directory"]


def test_a_stock_client_is_told_what_to_do_and_the_server_asks_the_gateway_itself(
    world: TripWorld,
) -> None:
    """[MCP-GATE-STOCK] no approval: an isError result naming who must approve what,
    until when, and to call again with the same arguments; the server made the ask."""

    async def go() -> tuple[Payments, types.CallToolResult, types.CallToolResult, dict[str, Any]]:
        async with acme_gateway(world, "never") as gateway:
            payments = Payments(world, gateway=gateway)
            async with Client(payments.server, mode="legacy") as client:
                first = await client.call_tool("charge_card", ARGS)
                again = await client.call_tool("charge_card", ARGS)
            listed = await payments.listed("charge_card")
        return payments, first, again, listed

    payments, first, again, listed = asyncio.run(go())
    error = error_of(first)
    assert error["code"] == "APPROVAL_REQUIRED"
    needed = error["data"]["requirement"]
    assert needed["callDigest"] == payments.gate.requirement("charge_card", ARGS).call_digest
    assert needed["toolDigest"] == tool_digest(listed)
    assert needed["address"] == FINANCE_ADDRESS
    ask = error["data"]["ask"]
    assert ask["askId"].startswith("ask-") and ask["gateway"] == GATEWAY
    said = text_of(first)
    for words in (FINANCE_ADDRESS, "1480.00 USD", ask["askId"], ask["decideBy"], "same arguments"):
        assert words in said
    assert error_of(again)["data"]["ask"]["askId"] == ask["askId"]  # one ask, not two
    current = payments.asks.current(
        server=PAYMENTS_SERVER,
        call_digest=needed["callDigest"],
        agent=AGENT,
        on_behalf_of=TRAVELLER,
    )
    assert current is not None and current.ask_id == ask["askId"]
    assert payments.ran == []


def test_once_approved_the_same_call_runs_once_and_the_next_needs_a_new_approval(
    world: TripWorld,
) -> None:
    """[MCP-GATE-STOCK] [GATE-ONCE] the retry runs the tool once; the same call again
    is refused and asks anew; other arguments are another call."""

    async def go() -> tuple[Payments, list[types.CallToolResult], Any, Any]:
        async with acme_gateway(world, after=0.3) as gateway:
            payments = Payments(world, gateway=gateway)
            async with Client(payments.server) as client:
                seen = await until_it_runs(client, dict(ARGS))
                replay = await client.call_tool("charge_card", ARGS)
                other = await client.call_tool("charge_card", OTHER_ARGS)
        return payments, seen, replay, other

    payments, seen, replay, other = asyncio.run(go())
    assert len(seen) >= 2, "the pending path was taken"
    first_ask = error_of(seen[0])["data"]["ask"]["askId"]
    assert seen[-1].structured_content == {"result": "charged 1480.00 USD to Lufthansa"}
    assert len(payments.ran) == 1
    replayed = error_of(replay)
    assert replayed["code"] == "APPROVAL_REQUIRED"
    assert replayed["data"]["ask"]["askId"] != first_ask
    others = error_of(other)["data"]
    assert others["requirement"]["callDigest"] != replayed["data"]["requirement"]["callDigest"]
    assert others["ask"]["askId"] not in (first_ask, replayed["data"]["ask"]["askId"])
    assert len(payments.ran) == 1
    closed = payments.asks.current(
        server=PAYMENTS_SERVER,
        call_digest=replayed["data"]["requirement"]["callDigest"],
        agent=AGENT,
        on_behalf_of=TRAVELLER,
    )
    assert closed is not None and closed.seq == 2


def test_a_changed_listing_invalidates_the_approval_and_names_the_listed_digest(
    world: TripWorld,
) -> None:
    """[GATE-TOOL] the definition bound is the one listed now: a listing changed after
    approval is refused TOOL_CHANGED, naming the new digest, and a new ask is made."""

    async def go() -> tuple[Payments, Any, dict[str, Any], dict[str, Any]]:
        async with acme_gateway(world) as gateway:
            payments = Payments(world, gateway=gateway)
            async with Client(payments.server) as client:
                first = error_of(await client.call_tool("charge_card", ARGS))
                await asyncio.wait_for(
                    gateway.poll_call(first["data"]["ask"]["askId"], wait_seconds=BOUND), BOUND
                )
                before = await payments.listed("charge_card")
                tool = payments.server._tool_manager.get_tool("charge_card")
                assert tool is not None
                tool.description = "Charge a company card now. Irreversible. Also tips 20%."
                after = await payments.listed("charge_card")
                result = await client.call_tool("charge_card", ARGS)
        return payments, result, before, after

    payments, result, before, after = asyncio.run(go())
    error = error_of(result)
    earlier = error["data"]["earlier"]
    assert (earlier["code"], earlier["data"]["reason"]) == ("APPROVAL_INVALID", "TOOL_CHANGED")
    assert tool_digest(after) in earlier["message"]
    assert error["data"]["requirement"]["toolDigest"] == tool_digest(after) != tool_digest(before)
    assert "could not be used" in text_of(result)
    assert payments.ran == []


def test_people_who_reject_are_heard_and_the_next_call_asks_again(world: TripWorld) -> None:
    """[MCP-GATE-STOCK] [GATE-APPROVED] a rejection is reported as one; the tool did not run."""

    async def go() -> tuple[Payments, list[types.CallToolResult]]:
        async with acme_gateway(world, "reject") as gateway:
            payments = Payments(world, gateway=gateway)
            async with Client(payments.server) as client:
                first = await client.call_tool("charge_card", ARGS)
                ask_id = error_of(first)["data"]["ask"]["askId"]
                await asyncio.wait_for(gateway.poll_call(ask_id, wait_seconds=BOUND), BOUND)
                rejected = await client.call_tool("charge_card", ARGS)
                asked_again = await client.call_tool("charge_card", ARGS)
        return payments, [first, rejected, asked_again]

    payments, (first, rejected, asked_again) = asyncio.run(go())
    error = error_of(rejected)
    assert (error["code"], error["data"]["reason"]) == ("APPROVAL_INVALID", "REJECTED")
    again = error_of(asked_again)
    assert again["code"] == "APPROVAL_REQUIRED"
    assert again["data"]["ask"]["askId"] != error_of(first)["data"]["ask"]["askId"]
    assert payments.ran == []


def test_another_requester_never_gets_an_approval_made_for_someone_else(
    world: TripWorld,
) -> None:
    """[MCP-REQUESTER] the ask is found by call digest AND requester: an approval given
    for alice's agent is not used for another agent's identical call."""
    intruder = Requester("agent://acme.com/expense-bot", TRAVELLER)

    async def go() -> tuple[Payments, Payments, Any, str]:
        async with acme_gateway(world) as gateway:
            alice = Payments(world, gateway=gateway)
            other = Payments(world, gateway=gateway, requester=intruder)
            async with Client(alice.server) as client:
                asked = error_of(await client.call_tool("charge_card", ARGS))
            ask_id = asked["data"]["ask"]["askId"]
            await asyncio.wait_for(gateway.poll_call(ask_id, wait_seconds=BOUND), BOUND)
            async with Client(other.server) as client:
                result = await client.call_tool("charge_card", ARGS)
        return alice, other, result, ask_id

    alice, other, result, ask_id = asyncio.run(go())
    error = error_of(result)
    assert error["code"] == "APPROVAL_REQUIRED"
    assert error["data"]["ask"]["askId"] != ask_id
    assert alice.ran == other.ran == []


def test_a_stock_client_may_still_carry_an_approval_in_meta(world: TripWorld) -> None:
    """An approval in ``_meta`` is used as it is; its refusals come as isError results
    to a client that did not declare the extension."""

    async def go() -> tuple[Payments, Any, Any, dict[str, Any]]:
        async with acme_gateway(world) as gateway:
            payments = Payments(world, gateway=gateway)
            request = call_request(
                world.clock, payments.gate, definition=await payments.listed("charge_card")
            )
            approval = await asyncio.wait_for(approved(gateway, request), BOUND)
            async with Client(payments.server) as client:
                meta = {APPROVAL_META_KEY: approval}
                ran = await client.call_tool("charge_card", ARGS, meta=meta)
                replay = await client.call_tool("charge_card", ARGS, meta=meta)
        return payments, ran, replay, approval

    payments, ran, replay, approval = asyncio.run(go())
    assert not ran.is_error and len(payments.ran) == 1
    error = error_of(replay)
    assert (error["code"], error["data"]["reason"]) == ("APPROVAL_INVALID", "USED")
    assert set(error["data"]) >= {"approvalId", "usedAt"}  # camelCase on the wire
    used = payments.used.get(approval["approvalId"])
    assert used is not None and used.outcome is UseOutcome.RAN


def test_a_client_that_declares_the_extension_keeps_the_json_rpc_flow(
    world: TripWorld,
) -> None:
    """[MCP-GATE] a hatp client gets -31050 and asks the gateway itself: the server
    asks nobody for it."""

    async def go() -> tuple[Payments, MCPError]:
        async with acme_gateway(world, "never") as gateway:
            payments = Payments(world, gateway=gateway)
            hatp = Client(payments.server, extensions=[advertise(GATE_EXTENSION_ID)])
            async with hatp as client:
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("charge_card", ARGS)
        return payments, refused.value

    payments, refused = asyncio.run(go())
    assert refused.code == -31050
    assert "ask" not in refused.data["data"]
    needed = refused.data["data"]["requirement"]
    assert (
        payments.asks.current(
            server=PAYMENTS_SERVER,
            call_digest=needed["callDigest"],
            agent=AGENT,
            on_behalf_of=TRAVELLER,
        )
        is None
    )


def test_without_a_gateway_a_stock_client_gets_the_requirement_as_a_result(
    world: TripWorld,
) -> None:
    """A server given no gateway asks nobody; the stock client still reads the
    requirement in an isError result instead of a JSON-RPC error."""
    payments = payments_server(world)

    async def go() -> types.CallToolResult:
        async with Client(payments.server) as client:
            return await client.call_tool("charge_card", ARGS)

    error = error_of(asyncio.run(go()))
    assert error["code"] == "APPROVAL_REQUIRED"
    assert error["data"]["requirement"]["tool"] == "charge_card"
    assert "ask" not in error["data"]
    assert payments.ran == []


def test_a_gateway_unreachable_is_said_plainly_and_nothing_runs(world: TripWorld) -> None:
    """A gateway that fails is a refusal the model reads (isError), not a crash."""

    class Down:
        async def ask_call(self, request: Any) -> dict[str, Any]:
            from hatp.errors import PeerUnavailable

            raise PeerUnavailable("acme's gateway gave no answer", server=GATEWAY)

        async def poll_call(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
            raise AssertionError("nothing was asked")

    payments = Payments(world, gateway=Down())

    async def go() -> types.CallToolResult:
        async with Client(payments.server) as client:
            return await client.call_tool("charge_card", ARGS)

    result = asyncio.run(go())
    assert error_of(result)["code"] == "PEER_UNAVAILABLE"
    assert "gave no answer" in text_of(result)
    assert payments.ran == []


def test_request_call_approval_on_a_2025_session_never_answers_input_required(
    world: TripWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[MCP-INPUT] a 2025 session cannot take input_required: it gets the signed pending
    vote as a result and calls again with the same request, which names the same ask."""
    monkeypatch.setattr(gateway_server_module, "HANDSHAKE_WAIT_SECONDS", 0.2)
    payments = payments_server(world)
    people = world.scripted_people("never")

    async def go() -> tuple[Any, Any]:
        gateway = world.gateway(people)
        gateway.start()
        try:
            request = call_request(
                world.clock, payments.gate, definition=await payments.listed("charge_card")
            )
            async with Client(gateway_server(world, gateway), mode="legacy") as client:
                first = await client.call_tool(CALL_APPROVAL_TOOL, {"request": request})
                again = await client.call_tool(CALL_APPROVAL_TOOL, {"request": request})
        finally:
            await gateway.stop()
            await people.close()
        return first, again

    first, again = asyncio.run(go())
    for result in (first, again):
        assert isinstance(result, types.CallToolResult) and not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["kind"] == "pending"
        assert "call request_call_approval again" in text_of(result).lower()
    assert first.structured_content["askId"] == again.structured_content["askId"]


def test_switched_off_a_changed_listing_runs_on_an_old_approval(world: TripWorld) -> None:
    """[MCP-GATE-LISTED] planted: with the listing not read, the gate binds the definition
    written in its declaration, which no client sees: an approval of that hand-written
    definition runs the tool whatever the server lists (the harm the check stops)."""

    async def go() -> tuple[Payments, types.CallToolResult, types.CallToolResult]:
        async with acme_gateway(world) as gateway:
            payments = Payments(world, gateway=gateway)
            request = call_request(world.clock, payments.gate)  # binds CHARGE_CARD as declared
            approval = await asyncio.wait_for(approved(gateway, request), BOUND)
            meta = {APPROVAL_META_KEY: approval}
            async with Client(payments.server) as client:
                checked = await client.call_tool("charge_card", ARGS, meta=meta)
                with unsafe_switched_off("MCP-GATE-LISTED"):
                    unchecked = await client.call_tool("charge_card", ARGS, meta=meta)
        return payments, checked, unchecked

    payments, checked, unchecked = asyncio.run(go())
    assert error_of(checked)["data"]["reason"] == "TOOL_CHANGED"
    assert not unchecked.is_error
    assert len(payments.ran) == 1


def test_a_gated_tool_is_listed_without_an_output_schema(world: TripWorld) -> None:
    """[MCP-GATE-STOCK] a refusal's structuredContent cannot fit the tool's own output
    schema, and stock clients check it even on isError: gated tools list none, plain
    tools keep theirs, and a gated tool's answer is unchanged."""
    payments = payments_server(world)

    async def go() -> dict[str, types.Tool]:
        async with Client(payments.server, mode="legacy") as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    listed = asyncio.run(go())
    assert listed["charge_card"].output_schema is None
    assert listed["void_charge"].output_schema is None
    assert listed["card_balance"].output_schema is not None
