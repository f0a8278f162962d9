"""An undo plan's shape: every branch takes back one step of the transaction its reference
names, no step twice, with fresh consent [UNDO-PLAN]."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from hatp.errors import PlanInvalid
from hatp.model import parse_plan

REFERENCE = {
    "hatpVersion": "0.1",
    "kind": "undo-reference",
    "txnId": "trip-1",
    "head": "sha256:" + "A" * 43,
    "coordinator": "hatp://acme.com/coordinator",
    "kept": [{"branchId": "charge", "reason": "not undoable: final"}],
    "time": "2026-12-02T09:00:00.000Z",
    "signature": {"alg": "Ed25519", "kid": "k", "sig": "A" * 86},
}


def _branch(step: str, txn_id: str = "trip-1") -> dict[str, Any]:
    return {
        "branchId": step,
        "participant": "mcp://airline.example",
        "operation": "cancel_seat",
        "tier": "hold",
        "amount": {"value": "75.00", "currency": "USD"},
        "undoes": {"txnId": txn_id, "branchId": step},
    }


GOOD: dict[str, Any] = {
    "hatpVersion": "0.1",
    "txnId": "trip-1.undo-1",
    "initiator": "agent://acme.com/travel-bot",
    "onBehalfOf": "human://acme.com/alice",
    "branches": [_branch("seat"), _branch("room")],
    "approvals": [
        {
            "groupId": "finance",
            "address": "human://acme.com/role/finance-approver",
            "requirement": {"action": "approve.spend"},
        }
    ],
    "deadlines": {"decideBy": "2026-12-02T10:00:00.000Z"},
    "undoes": REFERENCE,
}


def test_an_undo_plan_keeps_its_reference_and_steps_in_what_is_signed_UNDO_PLAN() -> None:
    """[UNDO-PLAN] the reference and each branch's step are members of the plan's normal
    form (so of its digest); a plan without them writes neither."""
    plan = parse_plan(GOOD)
    wire = plan.to_wire()
    assert wire["undoes"] == REFERENCE
    assert [b["undoes"] for b in wire["branches"]] == [
        {"txnId": "trip-1", "branchId": "seat"},
        {"txnId": "trip-1", "branchId": "room"},
    ]
    plain = copy.deepcopy(GOOD)
    plain.pop("undoes")
    for branch in plain["branches"]:
        branch.pop("undoes")
    wire = parse_plan(plain).to_wire()
    assert "undoes" not in wire and all("undoes" not in b for b in wire["branches"])


def _drop_step(d: dict[str, Any]) -> None:
    d["branches"][1].pop("undoes")


CASES: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    ("a branch that undoes nothing", _drop_step, "/branches/1/undoes"),
    (
        "a branch undoing another transaction's step",
        lambda d: d["branches"].__setitem__(1, _branch("room", "trip-2")),
        "/branches/1/undoes",
    ),
    (
        "two branches undoing one step",
        lambda d: d["branches"][1]["undoes"].update(branchId="seat"),
        "/branches/1/undoes",
    ),
    ("an undo of itself", lambda d: d.update(txnId="trip-1"), "/undoes/txnId"),
    ("no one to approve it", lambda d: d.update(approvals=[]), "/approvals"),
]


@pytest.mark.parametrize(("why", "edit", "where"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_undo_plan_is_refused_UNDO_PLAN(
    why: str, edit: Callable[[dict[str, Any]], object], where: str
) -> None:
    """[UNDO-PLAN] refused PLAN_INVALID UNDO_SHAPE, naming where."""
    doc = copy.deepcopy(GOOD)
    edit(doc)
    with pytest.raises(PlanInvalid) as refused:
        parse_plan(doc)
    assert (refused.value.reason, refused.value.data["where"]) == ("UNDO_SHAPE", where), why
