"""What an approval group must cover, worked out from the plan itself (docs/spec.md §18).

The Human Gateway checks authority against these amounts, never against a
number the agent wrote, and the offline verifier recomputes them to check a
routing record. Both use :func:`required_amounts`, which trusts nothing it is
handed: it re-reads the plan's wire form and refuses a negative amount or
tolerance itself ([GW-NEGATIVE]), before and apart from the plan parser, so
that a plan that skipped the coordinator's checks is still refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from hatp import _checks
from hatp.errors import AskInvalid, PlanInvalid, RequirementBelowTotal
from hatp.model.plan import Amount, ApprovalGroup, Branch, Plan, Requirement, parse_plan

__all__ = ["MINOR_UNIT", "RequiredAmount", "passkey_required", "recheck_plan", "required_amounts"]

#: Every currency is rounded to two decimals (cents); currencies with another
#: minor unit are still rounded to 0.01, which only ever asks for a little more.
MINOR_UNIT = Decimal("0.01")
_NEGATIVE = re.compile(r"-(0|[1-9][0-9]*)(\.[0-9]+)?")


@dataclass(frozen=True, slots=True)
class RequiredAmount:
    """One currency of a group's requirement: the plan's total, the tolerance, and
    what an approver must cover (``with_tolerance``)."""

    total: Decimal
    tolerance: Decimal
    with_tolerance: Decimal


def recheck_plan(plan: Mapping[str, Any] | Plan) -> Plan:
    """Refuse a negative amount or tolerance from the plan's wire form, then parse it.

    The check reads the raw members, so it holds even for a plan object that
    was never validated. [GW-NEGATIVE]

    Raises:
        PlanInvalid: reason ``NEGATIVE_AMOUNT`` or ``NEGATIVE_TOLERANCE`` with
            ``data.rule = GW-NEGATIVE``; any other reason from :func:`parse_plan`.
    """
    if not _checks.is_on("GW-NEGATIVE"):
        return parse_plan(plan)
    if isinstance(plan, Plan):
        # The few members the check reads, not the whole wire form (dumped only for a
        # plan whose members are not of their types).
        _refuse_negatives(_money_members(plan) or plan.to_wire())
        return plan
    if isinstance(plan, Mapping):
        _refuse_negatives(plan)
    return parse_plan(plan)


def _money_members(plan: Plan) -> dict[str, Any] | None:
    """The members of ``plan``'s wire form that :func:`_refuse_negatives` reads, taken
    from its fields; ``None`` when a field is not of its type (a plan object that was
    never validated), for the whole wire form to be read instead."""
    branches: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    if not isinstance(plan.branches, list | tuple) or not isinstance(plan.approvals, list | tuple):
        return None
    for branch in plan.branches:
        if not isinstance(branch, Branch) or not _is_amount(branch.amount):
            return None
        branches.append({"amount": _amount_member(branch.amount)})
    for group in plan.approvals:
        requirement = group.requirement if isinstance(group, ApprovalGroup) else None
        if (
            not isinstance(requirement, Requirement)
            or type(requirement.tolerance) is not str
            or not _is_amount(requirement.amount)
        ):
            return None
        groups.append(
            {
                "requirement": {
                    "tolerance": requirement.tolerance,
                    "amount": _amount_member(requirement.amount),
                }
            }
        )
    return {"branches": branches, "approvals": groups}


def _is_amount(amount: object) -> bool:
    return amount is None or (isinstance(amount, Amount) and type(amount.value) is str)


def _amount_member(amount: Amount | None) -> dict[str, Any] | None:
    return None if amount is None else {"value": amount.value}


def _refuse_negatives(doc: Mapping[str, Any]) -> None:
    branches = doc.get("branches")
    for index, branch in enumerate(branches if isinstance(branches, list) else []):
        amount = branch.get("amount") if isinstance(branch, Mapping) else None
        _refuse(amount, "NEGATIVE_AMOUNT", f"/branches/{index}/amount/value", "amount")
    groups = doc.get("approvals")
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        requirement = group.get("requirement") if isinstance(group, Mapping) else None
        if not isinstance(requirement, Mapping):
            continue
        where = f"/approvals/{index}/requirement"
        _refuse(requirement, "NEGATIVE_TOLERANCE", f"{where}/tolerance", "tolerance")
        _refuse(requirement.get("amount"), "NEGATIVE_AMOUNT", f"{where}/amount/value", "amount")


def _refuse(holder: Any, reason: str, where: str, member: str) -> None:
    key = "value" if member == "amount" else member
    value = holder.get(key) if isinstance(holder, Mapping) else None
    if isinstance(value, str) and _NEGATIVE.fullmatch(value) and Decimal(value) != 0:
        raise PlanInvalid(
            reason,
            f"{where}: {member} {value} is negative; the gateway does not route it",
            where=where,
            rule="GW-NEGATIVE",
        )


def required_amounts(plan: Mapping[str, Any] | Plan, group_id: str) -> dict[str, RequiredAmount]:
    """Return, per currency the plan spends, what approval group ``group_id`` must cover.

    ``with_tolerance`` is ``total * (1 + tolerance)``, rounded up to the next
    :data:`MINOR_UNIT` when it has more than two decimals. [GW-AMOUNT]

    Raises:
        PlanInvalid: the plan is invalid; a negative amount or tolerance is
            refused by this function itself ([GW-NEGATIVE]).
        RequirementBelowTotal: the group declares an amount below
            ``with_tolerance`` in its currency, or in a currency the plan does
            not spend ([GW-BELOW-TOTAL]).
        AskInvalid: the plan has no approval group ``group_id`` (``UNKNOWN_GROUP``).
    """
    parsed = recheck_plan(plan)
    group = _group(parsed, group_id)
    tolerance = Decimal(group.requirement.tolerance)
    required = {
        currency: RequiredAmount(total, tolerance, _round_up(total * (1 + tolerance)))
        for currency, total in sorted(parsed.totals().items())
    }
    declared = group.requirement.amount
    if declared is not None and _checks.is_on("GW-BELOW-TOTAL"):
        need = required.get(declared.currency)
        if need is None or Decimal(declared.value) < need.with_tolerance:
            raise RequirementBelowTotal(
                _below_message(group, str(declared), required),
                declared=declared.to_wire(),
                required=[
                    {"value": str(r.with_tolerance), "currency": c} for c, r in required.items()
                ],
            )
    return required


def passkey_required(plan: Plan, group_id: str) -> bool:
    """Whether approval group ``group_id``'s approve votes must carry the approver's
    passkey assertion: its ``requirement.passkey``, a threshold held to what the group
    must cover (the plan's totals plus tolerance per currency, as [GW-AMOUNT]).

    Raises:
        AskInvalid: the plan has no approval group ``group_id`` (``UNKNOWN_GROUP``).
    """
    group = _group(plan, group_id)
    tolerance = Decimal(group.requirement.tolerance)
    amounts = {c: _round_up(t * (1 + tolerance)) for c, t in plan.totals().items()}
    return group.requirement.passkey_needed(amounts)


def _group(plan: Plan, group_id: str) -> ApprovalGroup:
    for group in plan.approvals:
        if group.group_id == group_id:
            return group
    raise AskInvalid(
        f"the plan has no approval group {group_id!r}; its groups: "
        + (", ".join(g.group_id for g in plan.approvals) or "none"),
        reason="UNKNOWN_GROUP",
        group_id=group_id,
    )


def _round_up(value: Decimal) -> Decimal:
    # Only values finer than the minor unit are rounded, so 25000 stays 25000.
    if value == value.quantize(MINOR_UNIT, rounding=ROUND_CEILING):
        return value
    return value.quantize(MINOR_UNIT, rounding=ROUND_CEILING)


def _below_message(group: ApprovalGroup, declared: str, required: dict[str, RequiredAmount]) -> str:
    spends = ", ".join(f"{r.with_tolerance} {c}" for c, r in required.items()) or "nothing"
    return (
        f"approval group {group.group_id!r} declares {declared}, but the plan needs up to "
        f"{spends} (totals plus tolerance); declare at least that, or leave the amount out"
    )
