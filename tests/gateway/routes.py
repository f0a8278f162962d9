"""Plans for the gateway tests, and routing them through the acme directory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from directory.people import directory, signed
from hatp.clock import ManualClock
from hatp.directory import Directory
from hatp.evidence import Keyring, SigningKey, digest
from hatp.gateway import Routed, route
from hatp.model import Plan, parse_plan

GATEWAY_ID = "https://gateway.acme.com"
GATEWAY_KEY = SigningKey.from_seed(bytes([21]) * 32, "acme-gateway-1")
FINANCE = "human://acme.com/role/finance-approver"
START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)


def keyring() -> Keyring:
    """The verifier's keyring: trusts the acme gateway."""
    return Keyring([(GATEWAY_KEY.public, GATEWAY_ID)], trusted_issuers=[GATEWAY_ID])


def branch(
    branch_id: str, value: str | None, currency: str = "USD", settles: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A compensate branch costing ``value`` (none if ``None``)."""
    return {
        "branchId": branch_id,
        "participant": f"mcp://{branch_id}.example",
        "operation": "charge",
        "tier": "compensate",
        "args": {},
        "amount": None if value is None else {"value": value, "currency": currency},
        "settles": list(settles),
    }


def plan_doc(
    *branches: dict[str, Any],
    tolerance: str = "0",
    declared: dict[str, str] | None = None,
    on_behalf_of: str = "human://acme.com/dana",
) -> dict[str, Any]:
    """A plan with these branches and one approval group ``finance``."""
    return {
        "hatpVersion": "0.1",
        "txnId": "txn-gw-0001",
        "initiator": "agent://acme.com/travel-bot",
        "onBehalfOf": on_behalf_of,
        "branches": list(branches),
        "approvals": [
            {
                "groupId": "finance",
                "address": FINANCE,
                "requirement": {
                    "action": "approve.spend",
                    "tolerance": tolerance,
                    "amount": declared,
                },
            }
        ],
        "deadlines": {"decideBy": "2026-12-02T10:15:00.000Z"},
        "agentText": None,
    }


def post_directory() -> Directory:
    """The post's $25,000 request: alice (10,000), dana (50,000), erin (500)."""
    return directory(signed("alice", "10000"), signed("dana", "50000"), signed("erin", "500"))


def unvalidated(doc: dict[str, Any], **branch_amounts: str) -> Plan:
    """A plan object that skipped validation (as from a coordinator that skipped its
    checks): ``doc`` parsed, then branch amounts, or the tolerance, set unchecked."""
    plan = parse_plan(doc)
    tolerance = branch_amounts.pop("tolerance", None)
    branches = [
        b.model_copy(
            update={"amount": b.amount.model_copy(update={"value": branch_amounts[b.branch_id]})}
        )
        if b.branch_id in branch_amounts and b.amount is not None
        else b
        for b in plan.branches
    ]
    groups = plan.approvals
    if tolerance is not None:
        groups = [
            g.model_copy(
                update={"requirement": g.requirement.model_copy(update={"tolerance": tolerance})}
            )
            for g in groups
        ]
    return plan.model_copy(update={"branches": branches, "approvals": groups})


def route_plan(
    plan: dict[str, Any] | Plan, found: Directory | None = None, group: str = "finance"
) -> Routed:
    """Route approval group ``group`` of ``plan`` through ``found`` (the post's directory)."""
    wire = plan.to_wire() if isinstance(plan, Plan) else parse_plan(plan).to_wire()
    return route(
        plan,
        digest(wire),
        group,
        found or post_directory(),
        gateway_id=GATEWAY_ID,
        key=GATEWAY_KEY,
        clock=ManualClock(START),
    )
