"""acme's Human Gateway and the payments server, each behind its own MCP server.

The trip world (:class:`~hatp.demo.TripWorld`) supplies the real parts:
acme's directory and people with their own keys, the gateway's durable asks,
the payments store. :func:`payments_server` is an ordinary MCP server with a
tool anyone may call (``card_balance``) and two gated ones: ``charge_card``
(acme's finance approval, covering ``/amount``, bound to its definition) and
``void_charge`` (which always fails once it runs). :func:`gateway_server`
serves the gateway (and acme's directory) with :func:`hatp.mcp.serve_gateway`.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

from hatp.clock import Clock, format_time
from hatp.demo import TripWorld
from hatp.demo._people import DIRECTORY
from hatp.demo.gated import AGENT, ARGS, CHARGE_CARD, PAYMENTS_SERVER
from hatp.demo.trip import FINANCE_ADDRESS, GATEWAY, PAYMENTS, TRAVELLER
from hatp.evidence import Keyring
from hatp.gate import ApprovalGate, GatedTool, Requester
from hatp.gateway import HumanGateway
from hatp.mcp import CallAsker, gate_tools, listed_definition, serve_gateway
from hatp.store import GateAsks, UsedApprovals
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "AGENT",
    "ARGS",
    "CHARGE_CARD",
    "DIRECTORY",
    "GATEWAY",
    "PAYMENTS_SERVER",
    "REQUESTER",
    "TRAVELLER",
    "Payments",
    "acme_gateway",
    "call_request",
    "gateway_server",
    "payments_server",
]

#: Who calls the payments server, as its transport authenticates them.
REQUESTER = Requester(AGENT, TRAVELLER)
VOID_ARGS: dict[str, Any] = {"charge": "ch-1", "amount": {"value": "10.00", "currency": "USD"}}


def issued_by(keyring: Keyring, issuer: str) -> Keyring:
    """The keys of ``keyring`` that ``issuer`` vouches for, trusting only it."""
    keys = [keyring.resolve(kid) for kid in keyring.kids()]
    return Keyring([(key, who) for key, who in keys if who == issuer], trusted_issuers=[issuer])


class Payments:
    """The payments MCP server, its gate, and what its gated tools ran.

    With ``gateway`` the server asks it itself for a stock client's call
    (its asks kept in the payments store, :attr:`asks`).
    """

    def __init__(
        self,
        world: TripWorld,
        *,
        requester: Requester = REQUESTER,
        gateway: CallAsker | None = None,
    ) -> None:
        self.ran: list[dict[str, Any]] = []
        self.used = UsedApprovals(world.stores[PAYMENTS])
        self.gate = ApprovalGate(
            PAYMENTS_SERVER,
            [
                GatedTool(
                    "charge_card",
                    FINANCE_ADDRESS,
                    action="approve.spend",
                    amount="/amount",
                    definition=CHARGE_CARD,
                ),
                GatedTool("void_charge", FINANCE_ADDRESS, action="approve.spend", amount="/amount"),
            ],
            gateways=issued_by(world.keyring, GATEWAY),
            directories=issued_by(world.keyring, DIRECTORY),
            used=self.used,
            clock=world.clock,
        )
        self.server = MCPServer("payments")
        ran = self.ran

        @self.server.tool(description=CHARGE_CARD["description"])
        def charge_card(card: str, amount: dict[str, Any], payee: str) -> str:
            ran.append({"card": card, "amount": amount, "payee": payee})
            return f"charged {amount['value']} {amount['currency']} to {payee}"

        @self.server.tool()
        def void_charge(charge: str, amount: dict[str, Any]) -> str:
            """Void a charge (this test server's bank is down: it always fails)."""
            ran.append({"charge": charge})
            raise RuntimeError("the bank is down")

        @self.server.tool()
        def card_balance(card: str) -> str:
            """What is left on a card; anyone may ask."""
            return f"{card}: 5000.00 USD"

        self.asks = GateAsks(world.stores[PAYMENTS])
        gate_tools(
            self.server,
            self.gate,
            requester=lambda _ctx: requester,
            gateway=gateway,
            asks=None if gateway is None else self.asks,
            approver_page="http://localhost:4321/approve" if gateway is not None else None,
        )

    async def listed(self, tool: str) -> dict[str, Any]:
        """``tool``'s definition as this server lists it: what an approval binds."""
        listing = await self.server.list_tools()
        return next(listed_definition(t) for t in listing if t.name == tool)


def payments_server(world: TripWorld, **options: Any) -> Payments:
    """The payments server with its gated tools (see :class:`Payments`)."""
    return Payments(world, **options)


def gateway_server(world: TripWorld, gateway: HumanGateway, *, directory: bool = True) -> MCPServer:
    """acme's gateway served over MCP, with a tool of its own (``gateway_status``)."""
    server = MCPServer("acme-gateway")

    @server.tool()
    def gateway_status() -> str:
        """Whether the gateway is up."""
        return "up"

    serve_gateway(
        server,
        gateway,
        keys=[world.keys["gateway"].public],
        directory=world.directory if directory else None,
    )
    return server


def call_request(
    clock: Clock,
    gate: ApprovalGate,
    *,
    tool: str = "charge_card",
    args: Mapping[str, Any] = ARGS,
    decide_seconds: float = 900,
    requester: Requester = REQUESTER,
    definition: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CallRequest an agent sends the gateway for exactly the call ``gate`` asked for,
    binding ``definition`` (by default the declared one of ``charge_card``)."""
    needed = gate.requirement(tool, args)
    if needed is None:
        raise ValueError(f"{tool} is not gated")
    return {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "call-request",
        "requestId": f"pay-{secrets.token_hex(4)}",
        "requester": requester.agent,
        "onBehalfOf": requester.on_behalf_of,
        "call": {"server": needed.server, "tool": needed.tool, "arguments": dict(args)},
        "toolDefinition": dict(definition)
        if definition is not None
        else (CHARGE_CARD if tool == "charge_card" else None),
        "address": needed.address,
        "action": needed.action,
        "amountPointer": needed.amount_pointer,
        "price": None,
        "passkey": False,
        "reason": {"summary": "Flight to the Berlin offsite, booked for alice"},
        "decideBy": format_time(clock.now() + timedelta(seconds=decide_seconds)),
        "validSeconds": min(600, needed.max_lifetime_seconds),
    }


@asynccontextmanager
async def acme_gateway(
    world: TripWorld, decision: str = "approve", *, after: float = 0.0
) -> AsyncIterator[HumanGateway]:
    """acme's gateway, running, whose people answer as scripted ``after`` seconds after
    each ask (``approve``, ``reject``, ``decline`` or ``never``)."""
    people = world.scripted_people(decision, after_seconds=after)
    gateway = world.gateway(people)
    gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()
        await people.close()


async def approved(gateway: HumanGateway, request: Mapping[str, Any]) -> dict[str, Any]:
    """Ask ``gateway`` in process for the call and wait for the signed CallApproval."""
    answer = await gateway.ask_call(request)
    while answer["kind"] == "pending":
        answer = await gateway.poll_call(answer["askId"], wait_seconds=5.0)
    return answer


def open_world(folder: Path, clock: Clock) -> TripWorld:
    """The trip world in ``folder`` on ``clock``."""
    return TripWorld.open(folder, clock)
