"""The payments server of the gate tests, and call approvals built by hand.

``charge_card`` is gated: the finance-approver role must approve (quorum
``QUORUM``), with ``approve.spend`` authority covering ``/amount``; the
approval must bind the tool's definition. :func:`approval` signs a
CallApproval directly with a gateway key, exactly as the Human Gateway
would, so a planted violation can change one thing and sign again: the gate
must refuse what a broken or hostile gateway signs, too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from directory.people import DIRECTORY_KEY, ISSUER
from gateway.people import KEYS, person_card
from gateway.routes import GATEWAY_ID, GATEWAY_KEY
from hatp.clock import ManualClock, format_time
from hatp.evidence import Keyring, SigningKey, call_digest, digest, sign, tool_digest
from hatp.gate import ApprovalGate, GatedTool, Price, Requester
from hatp.gateway import sign_vote
from hatp.model import Amount
from hatp.store import Store, UsedApprovals

SERVER = "https://payments.example"
AGENT = "agent://acme.com/travel-bot"
DANA = "human://acme.com/dana"
FINANCE = "human://acme.com/role/finance-approver"
NOW = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
EVIL_GATEWAY = "https://gateway.evil.example"
EVIL_KEY = SigningKey.from_seed(bytes([66]) * 32, "evil-gateway-1")
ASK_ID = "ask-charge0001"
APPROVAL_ID = "apv-charge0001"

DEFINITION: dict[str, Any] = {
    "name": "charge_card",
    "description": "Charge the company card.",
    "inputSchema": {
        "type": "object",
        "properties": {"amount": {"type": "object"}, "payee": {"type": "string"}},
        "required": ["amount", "payee"],
    },
}
ARGS: dict[str, Any] = {"amount": {"value": "2140.00", "currency": "USD"}, "payee": "Lufthansa"}
REQUESTER = Requester(AGENT, DANA)


def human(name: str) -> str:
    return f"human://acme.com/{name}"


def charge_card(
    address: str = FINANCE,
    *,
    definition: Mapping[str, Any] | None = DEFINITION,
    price: Price | None = None,
) -> GatedTool:
    """The gated tool as the payments server declares it."""
    return GatedTool(
        "charge_card",
        address,
        action="approve.spend",
        amount="/amount",
        definition=definition,
        price=None if price is None else (lambda _args: price),
    )


def gateways() -> Keyring:
    """Trusts the acme gateway; knows the evil one's key, vouched for by nobody trusted."""
    return Keyring(
        [(GATEWAY_KEY.public, GATEWAY_ID), (EVIL_KEY.public, EVIL_GATEWAY)],
        trusted_issuers=[GATEWAY_ID],
    )


def directories() -> Keyring:
    return Keyring([(DIRECTORY_KEY.public, ISSUER)], trusted_issuers=[ISSUER])


def make_gate(
    store: Store, clock: ManualClock, tools: Sequence[GatedTool] | None = None, **options: Any
) -> ApprovalGate:
    return ApprovalGate(
        SERVER,
        tools if tools is not None else [charge_card()],
        gateways=gateways(),
        directories=directories(),
        used=UsedApprovals(store),
        clock=clock,
        **options,
    )


def terms(args: Mapping[str, Any] = ARGS, **changes: Any) -> dict[str, Any]:
    """The terms the gateway computes for a charge of ``args``."""
    body: dict[str, Any] = {
        "requestId": "pay-lufthansa-1",
        "server": SERVER,
        "tool": "charge_card",
        "callDigest": call_digest(SERVER, "charge_card", args),
        "toolDigest": tool_digest(DEFINITION),
        "requester": AGENT,
        "onBehalfOf": DANA,
        "address": FINANCE,
        "action": "approve.spend",
        "amount": dict(args["amount"]),
        "price": None,
        "validSeconds": 600,
    }
    body.update(changes)
    return body


def vote(
    name: str, on: Mapping[str, Any], decision: str = "approve", **bound: Any
) -> dict[str, Any]:
    """``name``'s own signed vote on terms ``on`` (``bound`` replaces a payload member)."""
    payload = {
        "askId": ASK_ID,
        "txnId": on["requestId"],
        "planDigest": digest(dict(on)),
        "groupId": "call",
        "human": human(name),
        **bound,
    }
    return sign_vote(KEYS[name], payload, decision, NOW)  # type: ignore[arg-type]


def card(name: str, limit: str = "10000", **changes: Any) -> dict[str, Any]:
    return person_card(name, limit, **changes)


@dataclass
class Approving:
    """What the gateway signs, each part replaceable by a planted violation."""

    approvers: list[str] = field(default_factory=lambda: ["bob"])
    terms: dict[str, Any] = field(default_factory=terms)
    votes: list[dict[str, Any]] | None = None  # default: each approver's vote
    cards: list[dict[str, Any]] | None = None  # default: each approver's card
    decision: str = "approve"
    decided_at: datetime = NOW
    valid_for: timedelta = timedelta(minutes=10)
    key: SigningKey = GATEWAY_KEY
    gateway: str = GATEWAY_ID


def approval(spec: Approving | None = None) -> dict[str, Any]:
    """The signed CallApproval ``spec`` describes."""
    spec = spec or Approving()
    names = spec.approvers
    votes = spec.votes if spec.votes is not None else [vote(n, spec.terms) for n in names]
    cards = spec.cards if spec.cards is not None else [card(n) for n in dict.fromkeys(names)]
    body = {
        "hatpVersion": "0.1",
        "kind": "call-approval",
        "approvalId": APPROVAL_ID,
        "askId": ASK_ID,
        "terms": spec.terms,
        "decision": spec.decision,
        "approvers": [human(n) for n in names] if spec.decision == "approve" else [],
        "reason": f"{len(names)} approved" if spec.decision == "approve" else "rejected",
        "withdrawn": False,
        "votes": votes,
        "cards": cards,
        "routing": {"kind": "routing", "note": "not read by the gate"},
        "gateway": spec.gateway,
        "decidedAt": format_time(spec.decided_at),
        "expiresAt": format_time(spec.decided_at + spec.valid_for),
    }
    return sign(body, spec.key)


def resign(doc: Mapping[str, Any], key: SigningKey = GATEWAY_KEY, **changes: Any) -> dict[str, Any]:
    """``doc`` with ``changes``, signed again (by a gateway that signs what it is handed)."""
    body = {k: v for k, v in copy.deepcopy(dict(doc)).items() if k != "signature"}
    body.update(changes)
    return sign(body, key)


def usd(value: str) -> Amount:
    return Amount(value=value, currency="USD")
