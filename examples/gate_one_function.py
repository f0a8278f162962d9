"""Gate one risky function with the approval gate (``hatp.gate``).

Shows: ``wire_money`` declared as a gated tool that acme's finance approver
must approve, for an amount their authority covers; a call without an
approval refused with ``APPROVAL_REQUIRED`` and exactly what to ask for; the
agent asking acme's Human Gateway (its people approve at once, as scripted,
each vote signed by their own key); the call run once with the approval; a
replay of the same approval refused. The gate checks the approval itself,
against its own declaration and the keys of the gateway and directory it
trusts. acme's world (its directory, gateway and people) comes from
``hatp.demo.TripWorld``; your server would trust your own organisation's keys.

Run it: ``python examples/gate_one_function.py`` (it works in a temporary folder).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from hatp.clock import SystemClock, format_time
from hatp.demo import FINANCE_ADDRESS, GATEWAY, TripWorld
from hatp.errors import ApprovalInvalid, ApprovalRequired
from hatp.evidence import Keyring
from hatp.gate import ApprovalGate, GatedTool, Requester
from hatp.model import CallRequirement
from hatp.store import UsedApprovals, open_store

SERVER = "https://treasury.example"
AGENT = Requester("agent://acme.com/travel-bot", "human://acme.com/alice")
#: The tool as the server lists it; the approval binds its digest.
WIRE_MONEY: dict[str, Any] = {
    "name": "wire_money",
    "description": "Wire money to a payee now. Irreversible.",
    "inputSchema": {
        "type": "object",
        "properties": {"amount": {"type": "object"}, "payee": {"type": "string"}},
        "required": ["amount", "payee"],
    },
}
ARGS = {"amount": {"value": "900.00", "currency": "USD"}, "payee": "Hotel Adlon"}


def wire_money(args: Mapping[str, Any]) -> str:
    """The risky function itself: it runs only once the gate let the call through."""
    return f"wired {args['amount']['value']} {args['amount']['currency']} to {args['payee']}"


def trusted(world: TripWorld, issuer: str) -> Keyring:
    """The keys ``issuer`` vouches for in acme's keyring, trusting only that issuer."""
    return Keyring([(key, issuer) for key in world.keyring.issued_by(issuer)], [issuer])


async def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="hatp-gate-"))
    clock = SystemClock()
    world = TripWorld.open(folder / "acme", clock)
    store = open_store(folder / "treasury.db")  # where used approvals are kept
    try:
        tool = GatedTool(
            "wire_money", FINANCE_ADDRESS, action="approve.spend", amount="/amount",
            definition=WIRE_MONEY,
        )  # fmt: skip
        gate = ApprovalGate(
            SERVER,
            [tool],
            gateways=trusted(world, GATEWAY),
            directories=trusted(world, world.directory.issuer),
            used=UsedApprovals(store),
            clock=clock,
        )

        # 1. Without an approval: refused, with what to ask for.
        try:
            await gate.run("wire_money", ARGS, None, AGENT, wire_money)
            raise SystemExit("the gate let an unapproved call through")
        except ApprovalRequired as refused:
            requirement = CallRequirement.model_validate(refused.data["requirement"])
            print("without an approval:", refused.code, "; ask", requirement.address)

        # 2. The agent asks acme's Human Gateway for exactly this call.
        people = world.scripted_people("approve")
        gateway = world.gateway(people)
        gateway.start()
        try:
            answer = await gateway.ask_call(
                {
                    "hatpVersion": "0.1",
                    "kind": "call-request",
                    "requestId": "wire-adlon-1",
                    "requester": AGENT.agent,
                    "onBehalfOf": AGENT.on_behalf_of,
                    "call": {"server": SERVER, "tool": "wire_money", "arguments": ARGS},
                    "toolDefinition": WIRE_MONEY,
                    "address": requirement.address,
                    "action": requirement.action,
                    "amountPointer": requirement.amount_pointer,
                    "price": None,
                    "passkey": False,
                    "reason": {"summary": "The offsite hotel, booked for alice"},
                    "decideBy": format_time(clock.now() + timedelta(minutes=15)),
                    "validSeconds": min(600, requirement.max_lifetime_seconds),
                }
            )
            while answer["kind"] == "pending":
                answer = await gateway.poll_call(answer["askId"], wait_seconds=5.0)
        finally:
            await gateway.stop()
            await people.close()
        print("the gateway answered:", answer["decision"], "by", ", ".join(answer["approvers"]))

        # 3. With the approval: the function runs, once.
        said = await gate.run("wire_money", ARGS, answer, AGENT, wire_money)
        print("with the approval:", said)

        # 4. The same approval again: refused (single use).
        try:
            await gate.run("wire_money", ARGS, answer, AGENT, wire_money)
            raise SystemExit("the gate let a replayed approval through")
        except ApprovalInvalid as replayed:
            print("replayed:", replayed.code, replayed.reason)
        print("OK: the gated function ran once, with an approval")
    finally:
        store.close()
        world.close()


if __name__ == "__main__":
    asyncio.run(main())
