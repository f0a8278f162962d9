"""The participant's checks that need no stored state (plan, cost, preconditions),
and the times they rest on: a hold's lease and horizon, a quote's terms.

Each check asks :func:`hatp._checks.is_on` with its requirement id before it
refuses, so the planted-violation tests can switch it off.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from hatp import _checks
from hatp.clock import format_time, parse_time
from hatp.errors import PlanInvalid, PreconditionChanged
from hatp.model import COMPENSATION, Amount, Branch, Plan, Preconditions
from hatp.participant._operation import Operation


def check_plan(
    plan: Plan, branch_id: str, participant_id: str, operations: Mapping[str, Operation]
) -> tuple[Branch, Operation]:
    """Return the branch this participant is asked to prepare, and its operation [PART-PLAN].

    Raises:
        PlanInvalid: reason ``SHAPE`` (no such branch), ``UNKNOWN_PARTICIPANT``,
            ``UNKNOWN_OPERATION``, ``UNDO_ONLY`` (an undo operation outside an undo
            plan) or ``TIER_MISMATCH``.
    """
    where = {"txn_id": plan.txn_id, "branch_id": branch_id}
    # A missing branch or operation leaves nothing to run: no switch for these.
    try:
        branch = plan.branch(branch_id)
    except KeyError:
        raise PlanInvalid(
            "SHAPE",
            f"branch {branch_id!r} is not in plan {plan.txn_id!r}; "
            f"its branches are {', '.join(b.branch_id for b in plan.branches)}",
            where="/branches",
            **where,
        ) from None
    index = plan.branches.index(branch)
    if branch.participant != participant_id and _checks.is_on("PART-PLAN"):
        raise PlanInvalid(
            "UNKNOWN_PARTICIPANT",
            f"branch {branch_id!r} names participant {branch.participant!r}, "
            f"but this is {participant_id!r}; send it to its own participant",
            where=f"/branches/{index}/participant",
            participant=participant_id,
            **where,
        )
    operation = operations.get(branch.operation)
    if operation is None:
        raise PlanInvalid(
            "UNKNOWN_OPERATION",
            f"{participant_id} offers no operation {branch.operation!r}; "
            f"it offers {', '.join(sorted(operations)) or 'none'}",
            where=f"/branches/{index}/operation",
            operation=branch.operation,
            **where,
        )
    if branch.undoes is None and _undo_only(operation, operations) and _checks.is_on("PART-PLAN"):
        raise PlanInvalid(
            "UNDO_ONLY",
            f"{branch.operation} takes back a committed step: it runs only in an undo plan "
            "(build one with the coordinator's undo)",
            where=f"/branches/{index}/operation",
            operation=branch.operation,
            **where,
        )
    if branch.tier is not operation.tier and _checks.is_on("PART-PLAN"):
        raise PlanInvalid(
            "TIER_MISMATCH",
            f"branch {branch_id!r} says {branch.operation} is tier {branch.tier.value}, "
            f"but {participant_id} declares it {operation.tier.value}; fix the plan's tier",
            where=f"/branches/{index}/tier",
            declared=operation.tier.value,
            **where,
        )
    return branch, operation


def _undo_only(operation: Operation, operations: Mapping[str, Operation]) -> bool:
    """Whether ``operation`` runs only in undo branches: the built-in compensation, or
    another operation's declared inverse."""
    return operation.name == COMPENSATION or any(
        other.inverse == operation.name for other in operations.values()
    )


def cost_problem(branch: Branch, cost: Amount | None) -> str | None:
    """Return why a reported cost is understated by the plan, or ``None`` [PART-COST].

    The participant is the one party that knows what it will charge, so it
    votes no when the branch's amount does not cover it.
    """
    if cost is None or not _checks.is_on("PART-COST"):
        return None
    amount = branch.amount
    if amount is None:
        problem = f"it costs {cost} but branch {branch.branch_id!r} declares no amount"
    elif amount.currency != cost.currency:
        problem = f"it costs {cost} but the branch's amount is {amount} (currencies differ)"
    elif cost.decimal > amount.decimal:
        problem = f"it costs {cost} but the branch's amount is only {amount}"
    else:
        return None
    return f"COST_UNDERSTATED: {problem}; put the real cost in the plan"


def lease(operation: Operation, asked: float | None, now: datetime) -> tuple[datetime, datetime]:
    """Return a hold's ``(leaseExpiresAt, holdHorizon)`` [PART-HOLD].

    The lease is what the operation asked for, capped at its longest lease and
    at its horizon. Both times are cut to the millisecond, so what is stored is
    exactly what the receipt says.
    """
    horizon = _wire(now + timedelta(seconds=operation.max_hold_seconds))
    return min(_wire(now + _lease_length(operation, asked)), horizon), horizon


def renewed_lease(
    operation: Operation,
    asked: float | None,
    now: datetime,
    current: datetime,
    horizon: datetime,
) -> datetime:
    """Return a hold's ``leaseExpiresAt`` after a renewal at ``now`` [PART-RENEW].

    The lease runs again for as long as prepare granted it (``asked``, the
    lease the operation asked for then, capped at its longest lease), but
    never past the horizon and never earlier than ``current``.
    """
    return max(current, min(_wire(now + _lease_length(operation, asked)), horizon))


def hold_terms(operation: Operation) -> tuple[float, float]:
    """Return the ``(leaseSeconds, holdSeconds)`` a hold prepared now could get [PART-QUOTE].

    The longest lease the operation grants (never past its horizon), and its
    horizon: what :func:`lease` gives a prepare that asks for the longest lease.
    """
    return min(operation.max_lease_seconds, operation.max_hold_seconds), operation.max_hold_seconds


def valid_until(now: datetime, seconds: float | None) -> datetime | None:
    """Return when a quoted cost stops holding (cut to the millisecond), or ``None``."""
    return None if seconds is None else _wire(now + timedelta(seconds=seconds))


def _lease_length(operation: Operation, asked: float | None) -> timedelta:
    seconds = min(asked or operation.max_lease_seconds, operation.max_lease_seconds)
    return timedelta(seconds=seconds)


def _wire(moment: datetime) -> datetime:
    return parse_time(format_time(moment))


def check_preconditions(
    prepared: Preconditions | None,
    other: Preconditions | None,
    *,
    source: str,
    **where: Any,
) -> None:
    """Refuse a commit whose preconditions differ from the dry run's [PART-PRECONDITION].

    ``source`` says where ``other`` came from: ``"request"`` (sent back by the
    coordinator) or ``"target"`` (re-read by the operation now).

    Raises:
        PreconditionChanged: ``data.changed`` maps each differing target to
            ``{"prepared": …, "now": …}``; ``data.scope`` the same for the scope.
    """
    if prepared == other or not _checks.is_on("PART-PRECONDITION"):
        return
    before = prepared.versions if prepared else {}
    after = other.versions if other else {}
    changed = {
        name: {"prepared": before.get(name), "now": after.get(name)}
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    }
    data: dict[str, Any] = {"changed": changed, "source": source, **where}
    scope_before = prepared.scope if prepared else None
    scope_after = other.scope if other else None
    if scope_before != scope_after:
        data["scope"] = {"prepared": scope_before, "now": scope_after}
    what = "the preconditions sent back" if source == "request" else "the target now"
    names = ", ".join([*changed, *(["scope"] if "scope" in data else [])])
    raise PreconditionChanged(
        f"{what} differ from what the dry run saw ({names}); nothing was done. "
        "Abort, and ask for a new approval on a new plan",
        **data,
    )
