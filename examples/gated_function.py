"""Gate one risky Python function with ``@gated`` (``hatp.gate``).

Shows: ``wire_money``, a plain function, decorated so that acme's finance
approver must approve each call, for an amount their authority covers; a
call without an approval refused with ``APPROVAL_REQUIRED``, and
``wire_money.requirement(...)`` saying what to ask for without calling; the
agent asking acme's Human Gateway for exactly those arguments (its people
approve at once, as scripted, each vote signed by their own key); the call
run once with the approval; a replay refused (used) and the approval tried
on other arguments refused (another call). The gate checks the approval
itself, against its own declaration and the keys of the gateway and
directory it trusts. acme's world (its directory, gateway and people) comes
from ``hatp.demo.TripWorld``; your server would trust your own
organisation's keys. An ``async def`` is gated the same way.

Run it: ``python examples/gated_function.py`` (it works in a temporary folder).
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from hatp.clock import SystemClock, format_time
from hatp.demo import FINANCE_ADDRESS, GATEWAY, TripWorld
from hatp.errors import ApprovalInvalid, ApprovalRequired
from hatp.evidence import Keyring
from hatp.gate import ApprovalGate, Requester, gated
from hatp.store import UsedApprovals, open_store

SERVER = "https://treasury.example"
#: Who is calling, as your own authentication says: the agent, and the person it acts for.
AGENT = Requester("agent://acme.com/travel-bot", "human://acme.com/alice")
AMOUNT = {"value": "900.00", "currency": "USD"}


def trusted(world: TripWorld, issuer: str) -> Keyring:
    """The keys ``issuer`` vouches for in acme's keyring, trusting only that issuer."""
    return Keyring([(key, issuer) for key in world.keyring.issued_by(issuer)], [issuer])


async def ask_gateway(world: TripWorld, call: dict[str, Any], needed: Any) -> dict[str, Any]:
    """The agent's side: ask acme's Human Gateway to approve exactly this call."""
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
                "call": {"server": SERVER, "tool": needed.tool, "arguments": call},
                "toolDefinition": None,  # a plain function has no listing to bind
                "address": needed.address,
                "action": needed.action,
                "amountPointer": needed.amount_pointer,
                "price": None,
                "passkey": False,
                "reason": {"summary": "The offsite hotel, booked for alice"},
                "decideBy": format_time(world.clock.now() + timedelta(minutes=15)),
                "validSeconds": min(600, needed.max_lifetime_seconds),
            }
        )
        while answer["kind"] == "pending":
            answer = await gateway.poll_call(answer["askId"], wait_seconds=5.0)
        return answer
    finally:
        await gateway.stop()
        await people.close()


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="hatp-gated-"))
    clock = SystemClock()
    world = TripWorld.open(folder / "acme", clock)
    store = open_store(folder / "treasury.db")  # where used approvals are kept
    try:
        gate = ApprovalGate(
            SERVER,
            [],  # @gated declares its function here
            gateways=trusted(world, GATEWAY),
            directories=trusted(world, world.directory.issuer),
            used=UsedApprovals(store),
            clock=clock,
        )

        @gated(gate, FINANCE_ADDRESS, action="approve.spend", amount="/amount")
        def wire_money(amount: dict[str, str], payee: str, memo: str = "") -> str:
            """The risky function itself: it runs only once the gate let the call through."""
            return f"wired {amount['value']} {amount['currency']} to {payee}"

        # 1. Without an approval: refused, with what to ask for.
        try:
            wire_money(AMOUNT, "Hotel Adlon", requester=AGENT)
            raise SystemExit("the gate let an unapproved call through")
        except ApprovalRequired as refused:
            print("without an approval:", refused.code)
        needed = wire_money.requirement(AMOUNT, "Hotel Adlon")  # the same, without calling
        print("ask", needed.address, "for", needed.action, "of", needed.amount)

        # 2. The agent asks acme's Human Gateway for exactly this call (defaults included).
        call = wire_money.arguments(AMOUNT, "Hotel Adlon")
        approval = asyncio.run(ask_gateway(world, call, needed))
        print("the gateway answered:", approval["decision"], "by", ", ".join(approval["approvers"]))

        # 3. With the approval: the function runs, once.
        print(
            "with the approval:",
            wire_money(AMOUNT, "Hotel Adlon", approval=approval, requester=AGENT),
        )

        # 4. The same approval again: refused (single use); on other arguments: another call.
        for payee in ("Hotel Adlon", "Hotel Elsewhere"):
            try:
                wire_money(AMOUNT, payee, approval=approval, requester=AGENT)
                raise SystemExit("the gate let a replayed approval through")
            except ApprovalInvalid as refused:
                print(f"again, to {payee}:", refused.code, refused.reason)
        print("OK: the gated function ran once, with an approval of exactly that call")
    finally:
        store.close()
        world.close()


if __name__ == "__main__":
    main()
