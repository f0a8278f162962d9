"""``hatp demo --gated``: one risky tool call, gated by an approval of exactly that call.

The payments server gates ``charge_card``: acme's finance-approver role must
approve, with ``approve.spend`` authority covering the amount in the
arguments, and the approval must bind the tool's definition. The travel
bot, working for alice, calls it without an approval (refused, with what to
ask for), asks acme's Human Gateway, calls it with the approval (it runs,
and the charge is in the payments ledger), replays the approval (refused:
used) and tries it on changed arguments (refused: another call). The
approval is checked by the payments server itself, against its own
declaration, the gateway's key and the directory's key; its single use is
kept in the payments server's own store.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hatp.clock import format_time
from hatp.demo import _payments
from hatp.demo._people import DIRECTORY
from hatp.demo.trip import GATEWAY, TRAVELLER, TripWorld
from hatp.errors import HatpError
from hatp.evidence import Keyring
from hatp.gate import ApprovalGate, GatedTool, Requester
from hatp.gateway import Channel, HumanGateway, MemoryChannel
from hatp.model import CallApproval, CallRequirement, read_amount
from hatp.store import UsedApprovals
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "AGENT",
    "CHARGE_CARD",
    "PAYMENTS_SERVER",
    "GatedRun",
    "Step",
    "payments_gate",
    "run_gated",
]

PAYMENTS_SERVER = "https://payments.example"
AGENT = "agent://acme.com/travel-bot"
FINANCE = "human://acme.com/role/finance-approver"
#: The tool as the payments server lists it; an approval binds its digest.
CHARGE_CARD: dict[str, Any] = {
    "name": "charge_card",
    "description": "Charge a company card now. Irreversible.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "card": {"type": "string"},
            "amount": {
                "type": "object",
                "properties": {"value": {"type": "string"}, "currency": {"type": "string"}},
            },
            "payee": {"type": "string"},
        },
        "required": ["card", "amount", "payee"],
    },
}
ARGS: dict[str, Any] = {
    "card": _payments.CARD,
    "amount": {"value": "1480.00", "currency": "USD"},
    "payee": "Lufthansa",
}
#: How long people have to decide, and how long the approval is good for.
DECIDE_SECONDS = 900
VALID_SECONDS = 600


@dataclass(frozen=True)
class Step:
    """One step of the walk: what was tried, whether it went through, what was said."""

    title: str
    ok: bool
    said: str
    code: str | None = None


@dataclass
class GatedRun:
    """The walk's steps, and the approval and requirement it went through."""

    steps: list[Step] = field(default_factory=list)
    requirement: CallRequirement | None = None
    approval: CallApproval | None = None

    @property
    def as_expected(self) -> bool:
        """Refused, asked, approved, ran, refused, refused: the walk the demo shows."""
        return [s.ok for s in self.steps] == [False, True, True, False, False] and (
            [s.code for s in self.steps if not s.ok]
            == ["APPROVAL_REQUIRED", "APPROVAL_INVALID", "APPROVAL_INVALID"]
        )


def payments_gate(world: TripWorld) -> ApprovalGate:
    """The payments server's gate: ``charge_card`` needs acme's finance approval.

    It trusts acme's gateway and acme's directory by key, and keeps used
    approvals in the payments server's own store.
    """
    gateways = _issued_by(world.keyring, GATEWAY)
    tool = GatedTool(
        "charge_card",
        FINANCE,
        action="approve.spend",
        amount="/amount",
        definition=CHARGE_CARD,
    )
    return ApprovalGate(
        PAYMENTS_SERVER,
        [tool],
        gateways=gateways,
        directories=_issued_by(world.keyring, DIRECTORY),
        used=UsedApprovals(world.stores[_payments.PARTICIPANT]),
        clock=world.clock,
    )


async def run_gated(world: TripWorld, channel: Channel | None = None) -> GatedRun:
    """Walk the gated ``charge_card`` call through refusal, approval, use and replay.

    The finance ask reaches people on ``channel`` (a terminal, say); by
    default they approve as scripted.
    """
    gate = payments_gate(world)
    requester = Requester(AGENT, TRAVELLER)
    run = GatedRun()

    def charge(args: Mapping[str, Any]) -> str:
        amount = read_amount(args, "/amount")
        with world.stores[_payments.PARTICIPANT].transaction() as conn:
            return _payments.charge_now(
                conn, args["card"], amount, args["payee"], _reference(run), world.clock.now()
            )

    async def attempt(title: str, args: Mapping[str, Any], approval: Any) -> Any:
        try:
            said = await gate.run("charge_card", args, approval, requester, charge)
        except HatpError as refusal:
            run.steps.append(Step(title, False, refusal.message, refusal.code))
            if run.requirement is None and "requirement" in refusal.data:
                run.requirement = CallRequirement.model_validate(refusal.data["requirement"])
            return None
        run.steps.append(Step(title, True, f"payments ran the tool: {said}"))
        return said

    await attempt("Calling charge_card without an approval", ARGS, None)
    if run.requirement is None:
        return run
    people = channel if channel is not None else world.scripted_people("approve")
    gateway = world.gateway(people)
    gateway.start()
    try:
        run.approval = await _ask(world, gateway, run.requirement, requester)
    finally:
        await gateway.stop()
        if isinstance(people, MemoryChannel):
            await people.close()
    approval = run.approval
    approvers = ", ".join(approval.approvers) or "nobody"
    run.steps.append(
        Step(
            "The agent asks the Human Gateway",
            approval.decision == "approve",
            f"{approval.decision}d by {approvers}; signed by "
            f"{approval.gateway}, for {approval.terms.server}, until {approval.expires_at}",
        )
    )
    if approval.decision != "approve":
        return run
    doc = approval.to_wire()
    await attempt("Calling it with the approval", ARGS, doc)
    await attempt("Replaying the same approval", ARGS, doc)
    changed = {**ARGS, "amount": {"value": "14800.00", "currency": "USD"}}
    await attempt("Using the approval with changed arguments", changed, doc)
    return run


async def _ask(
    world: TripWorld, gateway: HumanGateway, requirement: CallRequirement, requester: Requester
) -> CallApproval:
    """Ask for exactly the call the server named, and wait for the decision."""
    now = world.clock.now()
    request = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "call-request",
        "requestId": f"pay-lufthansa-{secrets.token_hex(4)}",
        "requester": requester.agent,
        "onBehalfOf": requester.on_behalf_of,
        "call": {"server": requirement.server, "tool": requirement.tool, "arguments": ARGS},
        "toolDefinition": CHARGE_CARD,
        "address": requirement.address,
        "action": requirement.action,
        "amountPointer": requirement.amount_pointer,
        "price": None,
        "passkey": False,
        "reason": {"summary": "Flight to the Berlin offsite, booked for alice"},
        "decideBy": format_time(now + timedelta(seconds=DECIDE_SECONDS)),
        "validSeconds": min(VALID_SECONDS, requirement.max_lifetime_seconds),
    }
    answer = await gateway.ask_call(request)
    while answer["kind"] == "pending":
        answer = await gateway.poll_call(answer["askId"], wait_seconds=5.0)
    return CallApproval.model_validate(answer)


def _reference(run: GatedRun) -> str | None:
    return None if run.approval is None else run.approval.approval_id


def _issued_by(keyring: Keyring, issuer: str) -> Keyring:
    """The keys of ``keyring`` that ``issuer`` vouches for, trusting only it."""
    keys = [keyring.resolve(kid) for kid in keyring.kids()]
    return Keyring([(key, who) for key, who in keys if who == issuer], trusted_issuers=[issuer])
