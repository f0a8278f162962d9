"""Who may allow a write: principals, approvals, and the authority an execution runs under.

A person approves a plan version's digest, directly (the caller's
authentication layer names them: :class:`Principal`) or through a Human
Gateway's signed Approval; neither the agent nor whom it acts for ever
approves their own plan. At execution the policy is asked again, and the
approval of this version's digest, or the policy's ALLOW, is the
:class:`Authority` the journal entry names (docs/spec.md §22).

Functions whose name ends in ``_txn`` run inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import ValidationError

from hatp import _checks
from hatp.errors import ApproverRefused, HatpError, NotApproved, WriteDenied
from hatp.evidence import Keyring, verify
from hatp.model import Approval, ApprovalDecision
from hatp.writes import _book
from hatp.writes._plan import CheckedPlan
from hatp.writes._policy import Policy, PolicyDecision, Verdict
from hatp.writes._tables import ApprovalRow, PlanRow, PlanStatus

__all__ = ["Principal"]


@dataclass(frozen=True)
class Principal:
    """Who the caller's authentication layer says is acting: a ``human`` or an ``agent``.

    Never built from a field of a plan: the agent writes the plan.

    Raises:
        ValueError: ``id`` is empty or ``kind`` is neither ``human`` nor ``agent``.
    """

    id: str
    kind: Literal["human", "agent"]

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a principal has a non-empty id")
        if self.kind not in ("human", "agent"):
            raise ValueError(f"a principal is a human or an agent, not {self.kind!r}")


@dataclass(frozen=True)
class Authority:
    """Who allowed an execution: an approval's approvers (``direct``, ``gateway``), or
    the ``policy`` (no approvers)."""

    approvers: tuple[str, ...]
    source: str


def denied(plan_id: str, version: int, decision: PolicyDecision) -> WriteDenied:
    """The refusal of a plan version the policy denies."""
    return WriteDenied(
        f"the write policy denies plan {plan_id} version {version}: " + "; ".join(decision.reasons),
        plan_id=plan_id,
        version=version,
        reasons=list(decision.reasons),
    )


def check_human(approver: Principal) -> None:
    """[WRITE-HUMAN]: only a person approves.

    Raises:
        ApproverRefused: reason ``NOT_HUMAN``.
    """
    if approver.kind != "human" and _checks.is_on("WRITE-HUMAN"):
        raise ApproverRefused(
            f"{approver.id} is an {approver.kind} principal: only a person approves a write",
            reason="NOT_HUMAN",
            rule="WRITE-HUMAN",
            approver=approver.id,
        )


def check_separation(row: PlanRow, approvers: tuple[str, ...]) -> None:
    """[WRITE-SOD]: neither the plan's proposer nor whom it acts for approves it.

    Raises:
        ApproverRefused: reason ``SELF_APPROVAL``.
    """
    agent, principal = row.plan["proposedBy"], row.plan["onBehalfOf"]
    own = [a for a in approvers if a in (agent, principal)]
    if own and _checks.is_on("WRITE-SOD"):
        raise ApproverRefused(
            f"{own[0]} cannot approve plan {row.plan_id}: it was proposed by {agent} "
            f"on behalf of {principal}; another person must approve",
            reason="SELF_APPROVAL",
            rule="WRITE-SOD",
            approver=own[0],
        )


def verified_approval(approval: Mapping[str, Any], gateways: Keyring | None) -> Approval:
    """[WRITE-SIGNED]: an Approval, signed by a gateway trusted here as itself.

    Raises:
        ApproverRefused: reason ``SIGNATURE``.
    """
    try:
        parsed = Approval.model_validate(approval)
    except ValidationError as exc:
        raise ApproverRefused(
            f"not a gateway Approval: {exc.errors()[0]['msg']}",
            reason="SIGNATURE",
            rule="WRITE-SIGNED",
        ) from None
    if not _checks.is_on("WRITE-SIGNED"):
        return parsed
    if gateways is None:
        raise ApproverRefused(
            "no Human Gateway is trusted here: pass gateways= a keyring of their keys",
            reason="SIGNATURE",
            rule="WRITE-SIGNED",
        )
    try:
        signer = verify(approval, gateways)
    except HatpError as exc:
        raise ApproverRefused(
            f"the approval does not verify: {exc.message}",
            reason="SIGNATURE",
            rule="WRITE-SIGNED",
            detail=exc.to_dict(),
        ) from None
    if signer.issuer != parsed.gateway:
        raise ApproverRefused(
            f"the approval names gateway {parsed.gateway} but is signed by a key of "
            f"{signer.issuer}",
            reason="SIGNATURE",
            rule="WRITE-SIGNED",
        )
    return parsed


def signed_approvers(parsed: Approval, row: PlanRow) -> tuple[str, ...]:
    """The people a verified gateway Approval says approved this plan version.

    Raises:
        ApproverRefused: reason ``OTHER_PLAN`` ([WRITE-BOUND]), ``REJECTED``
            ([WRITE-SIGNED]), ``NOT_HUMAN`` ([WRITE-HUMAN]) or
            ``SELF_APPROVAL`` ([WRITE-SOD]).
    """
    if parsed.plan_digest != row.digest and _checks.is_on("WRITE-BOUND"):
        raise ApproverRefused(
            f"the approval is of plan digest {parsed.plan_digest}, not of plan "
            f"{row.plan_id} version {row.version} ({row.digest}): ask for this version",
            reason="OTHER_PLAN",
            rule="WRITE-BOUND",
            plan_digest=parsed.plan_digest,
            expected=row.digest,
        )
    refused = parsed.decision is not ApprovalDecision.APPROVE or parsed.withdrawn
    if refused and _checks.is_on("WRITE-SIGNED"):
        raise ApproverRefused(
            f"the gateway's approval decides {parsed.decision.value}"
            + (" (withdrawn)" if parsed.withdrawn else "")
            + ": a signed rejection is never an approval",
            reason="REJECTED",
            rule="WRITE-SIGNED",
        )
    if not parsed.approvers and _checks.is_on("WRITE-HUMAN"):
        raise ApproverRefused(
            "the gateway's approval names no person who approved",
            reason="NOT_HUMAN",
            rule="WRITE-HUMAN",
        )
    approvers = tuple(parsed.approvers)
    check_separation(row, approvers)
    return approvers


def store_approval_txn(
    conn: sa.Connection,
    row: PlanRow,
    approvers: tuple[str, ...],
    source: str,
    evidence: dict[str, Any] | None,
    now: datetime,
) -> None:
    """Store the approval (a version approved before keeps its first) and mark it approved."""
    if (
        _book.insert_approval_txn(
            conn, row.plan_id, row.version, row.digest, approvers, source, evidence, now
        )
        and row.status is PlanStatus.PROPOSED
    ):
        _book.set_plan_status_txn(conn, row.plan_id, row.version, PlanStatus.APPROVED, None, now)


def authority(
    policy: Policy, row: PlanRow, checked: CheckedPlan, approval: ApprovalRow | None
) -> Authority:
    """Step 1 of an execution: who allows this plan version to run now [WRITE-APPROVED].

    Raises:
        WriteDenied: the policy denies it now.
        NotApproved: it needs an approval of this version's digest and has none.
    """
    decision = policy.decide(checked)
    if decision.verdict is Verdict.DENY:
        raise denied(row.plan_id, row.version, decision)
    if approval is not None and approval.digest == row.digest:
        return Authority(approval.approvers, approval.source)
    if decision.verdict is Verdict.ALLOW:
        return Authority((), "policy")
    if _checks.is_on("WRITE-APPROVED"):
        raise NotApproved(
            f"plan {row.plan_id} version {row.version} needs a person's approval of "
            f"this version ({row.digest}) before it runs; an approval of another "
            "version does not carry over",
            plan_id=row.plan_id,
            version=row.version,
            digest=row.digest,
        )
    return Authority((), "unapproved")
