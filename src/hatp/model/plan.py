"""The Plan: what an agent proposes to do, as one all-or-nothing transaction.

A plan names its branches (one operation on one participant each, with its
tier, arguments and amount), the approval groups it needs, and its
deadlines. Text the agent wrote is kept apart in ``agentText`` and never
drives a rule. :func:`parse_plan` is the only way in from the wire: it
refuses a bad plan with ``PLAN_INVALID`` and a precise ``reason``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hatp.errors import PLAN_REASONS, PlanInvalid
from hatp.model._base import JsonObject, WireModel, WireTime
from hatp.model.undo import StepRef, UndoReference
from hatp.version import require_supported

__all__ = [
    "COMMIT_ORDER",
    "AgentText",
    "Amount",
    "ApprovalGroup",
    "Branch",
    "Deadlines",
    "Escalation",
    "Mode",
    "OffSessionReauth",
    "PasskeyThreshold",
    "Plan",
    "Recovery",
    "Requirement",
    "Tier",
    "parse_plan",
]

#: A decimal string: digits, an optional fraction, an optional leading minus
#: (so that a negative amount is refused as negative, not as malformed).
_DECIMAL_RE = re.compile(r"-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,18})?")

BranchId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9._/-]{0,127}$")]
Address = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class Tier(StrEnum):
    """What an operation can guarantee (docs/spec.md §11).

    ``hold``: prepare places a hold with a lease; commit must succeed while
    it is live. ``compensate``: dry run at prepare; commit returns an undo
    token. ``final``: dry run at prepare; commit is irreversible.
    """

    HOLD = "hold"
    COMPENSATE = "compensate"
    FINAL = "final"


#: The order phase 2 commits the tiers in: compensate steps, the final step, the holds.
COMMIT_ORDER: tuple[Tier, ...] = (Tier.COMPENSATE, Tier.FINAL, Tier.HOLD)


def _decimal(text: str, *, negative_reason: str, what: str) -> Decimal:
    if not _DECIMAL_RE.fullmatch(text):
        raise PydanticCustomError(
            "AMOUNT_NOT_DECIMAL",
            "{what} '{text}' is not a decimal string like '420.00'",
            {"what": what, "text": text},
        )
    value = Decimal(text)
    if value < 0:
        raise PydanticCustomError(
            negative_reason, "{what} {text} is negative", {"what": what, "text": text}
        )
    return value


class Amount(WireModel):
    """Money: a non-negative decimal string and an ISO 4217 currency. Never a float."""

    value: str = Field(description="a non-negative decimal string, e.g. '420.00'")
    currency: str = Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code, e.g. 'USD'")

    @field_validator("value")
    @classmethod
    def _is_decimal(cls, value: str) -> str:
        _decimal(value, negative_reason="NEGATIVE_AMOUNT", what="amount")
        return value

    @property
    def decimal(self) -> Decimal:
        """The value as a :class:`~decimal.Decimal`."""
        return Decimal(self.value)

    def __str__(self) -> str:
        return f"{self.value} {self.currency}"


class Branch(WireModel):
    """One step of a plan: one operation on one participant."""

    branch_id: BranchId
    participant: Address = Field(description="the participant's id, e.g. mcp://airline.example")
    operation: Name
    tier: Tier = Field(strict=False)
    args: JsonObject = Field(default_factory=dict)
    amount: Amount | None = Field(default=None, description="what this step costs, if anything")
    settles: list[BranchId] = Field(
        default_factory=list,
        description="branches whose amounts this branch pays (so they are not counted twice)",
    )
    undoes: StepRef | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="an undo plan's branch: the original step it takes back; written only "
        "when present",
    )


class PasskeyThreshold(WireModel):
    """``{"above": amount}``: a passkey is needed when the group's amount is above it."""

    above: Amount


def _passkey_problem(value: Any, errors: list[Any]) -> str:
    """What is wrong with a malformed ``passkey``: of a threshold object, its first problem."""
    if not isinstance(value, Mapping):
        return f"{value!r} is neither"
    error = next((e for e in errors if e["loc"][:1] == ("PasskeyThreshold",)), errors[0])
    where = "/".join(str(p) for p in error["loc"][1:])
    return f"{where + ': ' if where else ''}{error['msg']}"


class Requirement(WireModel):
    """What an approval group must approve: an action, a tolerance over the plan's totals,
    and optionally the amount the agent declares (never trusted: the gateway
    computes its own and refuses a declared amount below it)."""

    action: Name
    tolerance: str = Field(
        default="0", description="a non-negative decimal fraction: '0.02' allows 2% over"
    )
    amount: Amount | None = Field(
        default=None,
        description="the agent-declared amount; at least the plan's total plus tolerance",
    )
    passkey: bool | PasskeyThreshold = Field(
        default=False,
        description="true: every approve vote is signed by the approver's passkey (only "
        "people with one are asked); {above}: so when the group's amount in any currency is "
        "above it (another currency than the threshold's always is); false: no passkey",
    )

    @field_validator("tolerance")
    @classmethod
    def _tolerance_is_decimal(cls, value: str) -> str:
        _decimal(value, negative_reason="NEGATIVE_TOLERANCE", what="tolerance")
        return value

    @field_validator("passkey", mode="wrap")
    @classmethod
    def _passkey_form(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            # One reason for every malformed form, naming the three there are.
            detail = _passkey_problem(value, exc.errors())
            message = (
                'requirement.passkey is true, false or {"above": {"value", "currency"}} '
                f"(a non-negative decimal string and an ISO 4217 code): {detail}"
            )
            raise PydanticCustomError("PASSKEY", "{msg}", {"msg": message}) from None

    def passkey_needed(self, amounts: Mapping[str, Decimal]) -> bool:
        """Whether approve votes must carry a passkey assertion, for a group that must
        cover ``amounts`` (per currency: the plan's totals plus tolerance, as the gateway
        computes them). Currencies are never converted: an amount in another currency
        than the threshold's needs a passkey, whatever its size."""
        rule = self.passkey
        if isinstance(rule, bool):
            return rule
        limit = rule.above
        return any(
            currency != limit.currency or value > limit.decimal
            for currency, value in amounts.items()
        )


#: The least a step's effect preview must say, per tier [PLAN-PREVIEWS]: ``none`` <
#: ``predicted`` < ``bounded`` (predicted with an amount bound) < ``exact``.
PreviewMinimum = Literal["none", "predicted", "bounded", "exact"]


class PreviewPolicy(WireModel):
    """What people must be shown of each step before they approve, by tier
    (docs/spec.md §11 [PLAN-PREVIEWS]); a tier not named needs nothing (``none``)."""

    minimum: dict[Literal["hold", "compensate", "final"], PreviewMinimum] = Field(
        default_factory=dict, description="the least certainty each tier's previews must have"
    )

    def required(self, tier: Tier) -> PreviewMinimum:
        """The least a ``tier`` step's preview must say."""
        return self.minimum.get(tier.value, "none")

    @property
    def demands(self) -> bool:
        """Whether any tier needs more than ``none``: previews must reach people first."""
        return any(level != "none" for level in self.minimum.values())

    def merged(self, other: PreviewPolicy) -> PreviewPolicy:
        """The policy asking, of each tier, the more of what this one and ``other`` ask."""
        tiers = sorted(set(self.minimum) | set(other.minimum))
        return PreviewPolicy(
            minimum={
                tier: max(
                    self.minimum.get(tier, "none"),
                    other.minimum.get(tier, "none"),
                    key=_PREVIEW_ORDER.index,
                )
                for tier in tiers
            }
        )


#: :data:`PreviewMinimum` from least to most.
_PREVIEW_ORDER: tuple[PreviewMinimum, ...] = ("none", "predicted", "bounded", "exact")


class ApprovalGroup(WireModel):
    """One approval the plan needs: who is asked (an address) and what they approve.

    ``previews``: what this group requires to be shown of each step before it
    is asked, on top of the plan's own policy [PLAN-PREVIEWS]; written only
    when present.
    """

    group_id: BranchId
    address: Address = Field(description="e.g. human://acme.com/role/finance-approver")
    requirement: Requirement
    previews: PreviewPolicy | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="what each step's effect preview must say before this group is asked; "
        "written only when present",
    )


class Deadlines(WireModel):
    """When the plan stops waiting: by ``decideBy`` every vote and approval is in, or it aborts."""

    decide_by: WireTime


class Mode(StrEnum):
    """How phase 1 fits the people's decision time inside the holds (docs/spec.md §14).

    ``parallel``: prepare and ask at once. ``approval-first``: people approve
    quoted prices first; the holds are placed after and must match the quotes.
    ``holds-first``: the holds are placed first; their end times and an
    approval deadline inside them are terms people approve with the plan.
    ``auto``: the coordinator chooses parallel or approval-first from the clock.
    """

    AUTO = "auto"
    PARALLEL = "parallel"
    APPROVAL_FIRST = "approval-first"
    HOLDS_FIRST = "holds-first"


class Escalation(WireModel):
    """Who is brought in when the final step stays in doubt, and how early.

    An in-doubt final step escalates ``leadSeconds`` before the first hold
    ends, to ``address`` (``null``: the person the plan acts for).
    """

    address: Address | None = Field(
        default=None, description="who is escalated to; null: the plan's onBehalfOf"
    )
    lead_seconds: int = Field(
        ge=0, le=31_536_000, description="how long before the first hold ends to escalate"
    )


class OffSessionReauth(WireModel):
    """Whether the payer consented to being re-authorized off-session, up to what, under what."""

    consented: bool
    up_to: Amount | None = Field(default=None, description="the most a re-authorization may be")
    mandate: str | None = Field(
        default=None, min_length=1, max_length=256, description="the saved mandate it uses"
    )

    @model_validator(mode="after")
    def _complete(self) -> OffSessionReauth:
        if self.consented and (self.up_to is None or self.mandate is None):
            raise PydanticCustomError(
                "RECOVERY_INCOMPLETE",
                "a consented off-session re-authorization names both upTo and mandate",
                {"where": "/recovery/offSessionReauth"},
            )
        if not self.consented and (self.up_to is not None or self.mandate is not None):
            raise PydanticCustomError(
                "RECOVERY_INCOMPLETE",
                "without consent there is no cap or mandate: drop upTo and mandate, "
                "or set consented to true",
                {"where": "/recovery/offSessionReauth"},
            )
        return self


class Recovery(WireModel):
    """What the payer agreed, when the plan was signed, to a hold that lapses."""

    off_session_reauth: OffSessionReauth


class AgentText(WireModel):
    """Text the agent wrote. Shown labelled as agent-written; never drives a rule."""

    summary: str = Field(max_length=4000)


class Plan(WireModel):
    """A transaction proposal. Its digest (``planDigest``) binds every vote, receipt and approval.

    The plan's normal form is :meth:`to_wire`: every member present, defaults
    written out, absent optional members as ``null``, except members added
    after 0.1 (``previews``, here and in an approval group), written only when
    present so that an earlier plan keeps the digest it was signed under. The
    plan digest is the digest of that form.
    """

    hatp_version: str
    txn_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
    initiator: Annotated[str, StringConstraints(pattern=r"^agent://[!-~]{1,500}$")]
    on_behalf_of: Annotated[str, StringConstraints(pattern=r"^human://[!-~]{1,500}$")]
    branches: list[Branch] = Field(min_length=1, max_length=64)
    approvals: list[ApprovalGroup] = Field(default_factory=list, max_length=16)
    deadlines: Deadlines
    mode: Mode = Field(default=Mode.AUTO, strict=False)
    escalation: Escalation | None = None
    recovery: Recovery | None = None
    agent_text: AgentText | None = None
    previews: PreviewPolicy | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="what each step's effect preview must say before people approve; "
        "written only when present",
    )
    undoes: UndoReference | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="an undo plan: the coordinator's signed reference to the original "
        "record; written only when present",
    )

    @model_validator(mode="after")
    def _rules(self) -> Plan:
        _check_branches(self.branches)
        _check_undo(self)
        if self.preview_policy.demands and self.mode is Mode.PARALLEL:
            raise PydanticCustomError(
                "PREVIEW_MODE",
                "a plan that requires effect previews cannot run parallel: people would be "
                "asked before any step previewed; set mode to approval-first (quotes preview "
                "each step first), holds-first, or auto",
                {"where": "/mode"},
            )
        ids = [g.group_id for g in self.approvals]
        if len(ids) != len(set(ids)):
            raise PydanticCustomError(
                "DUPLICATE_GROUP", "two approval groups share an id", {"where": "/approvals"}
            )
        return self

    @property
    def preview_policy(self) -> PreviewPolicy:
        """What every step's preview must say before anyone is asked [PLAN-PREVIEWS]: of
        each tier, the most the plan's policy and any approval group's policy ask."""
        policy = self.previews or PreviewPolicy()
        for group in self.approvals:
            if group.previews is not None:
                policy = policy.merged(group.previews)
        return policy

    def branch(self, branch_id: str) -> Branch:
        """Return the branch with this id.

        Raises:
            KeyError: no such branch.
        """
        for branch in self.branches:
            if branch.branch_id == branch_id:
                return branch
        raise KeyError(branch_id)

    def totals(self) -> dict[str, Decimal]:
        """Return what the plan spends per currency, each payment counted once.

        A branch settled by another is paid through that branch, so only
        branches that no other branch settles are added up. Currencies are
        never converted.
        """
        settled = {s for b in self.branches for s in b.settles}
        out: dict[str, Decimal] = {}
        for branch in self.branches:
            if branch.amount is not None and branch.branch_id not in settled:
                currency = branch.amount.currency
                out[currency] = out.get(currency, Decimal(0)) + branch.amount.decimal
        return out


def _check_branches(branches: list[Branch]) -> None:
    by_id: dict[str, Branch] = {}
    for index, branch in enumerate(branches):
        if branch.branch_id in by_id:
            raise PydanticCustomError(
                "DUPLICATE_BRANCH",
                "branch id '{id}' is used twice",
                {"id": branch.branch_id, "where": f"/branches/{index}/branchId"},
            )
        by_id[branch.branch_id] = branch
    finals = [b.branch_id for b in branches if b.tier is Tier.FINAL]
    if len(finals) > 1:
        raise PydanticCustomError(
            "SECOND_FINAL",
            "a plan has at most one final step; {ids} are all final (make all but one "
            "compensate or hold, or split the plan)",
            {"ids": ", ".join(finals), "where": "/branches"},
        )
    settled_by: dict[str, str] = {}
    for index, branch in enumerate(branches):
        _check_settles(branch, f"/branches/{index}", by_id, settled_by)
    _check_no_cycle(by_id)


def _check_undo(plan: Plan) -> None:
    # An undo plan's branches each take back one step of the original; any other
    # plan's branches take back nothing [UNDO-PLAN].
    seen: dict[str, str] = {}
    for index, branch in enumerate(plan.branches):
        where = f"/branches/{index}/undoes"
        if plan.undoes is None:
            if branch.undoes is not None:
                raise PydanticCustomError(
                    "UNDO_SHAPE",
                    "branch '{id}' undoes a step, but the plan has no undoes reference; "
                    "build undo plans with the coordinator's undo",
                    {"id": branch.branch_id, "where": where},
                )
            continue
        ref = branch.undoes
        if ref is None or ref.txn_id != plan.undoes.txn_id:
            raise PydanticCustomError(
                "UNDO_SHAPE",
                "every branch of an undo plan names the step of {txn} it takes back; "
                "branch '{id}' does not",
                {"id": branch.branch_id, "txn": plan.undoes.txn_id, "where": where},
            )
        if ref.branch_id in seen:
            raise PydanticCustomError(
                "UNDO_SHAPE",
                "branches '{first}' and '{id}' both take back step '{step}'",
                {
                    "id": branch.branch_id,
                    "first": seen[ref.branch_id],
                    "step": ref.branch_id,
                    "where": where,
                },
            )
        seen[ref.branch_id] = branch.branch_id
    if plan.undoes is None:
        return
    if plan.undoes.txn_id == plan.txn_id:
        raise PydanticCustomError(
            "UNDO_SHAPE", "an undo plan cannot undo itself", {"where": "/undoes/txnId"}
        )
    if not plan.approvals:
        raise PydanticCustomError(
            "UNDO_SHAPE",
            "an undo plan needs fresh consent: at least one approval group",
            {"where": "/approvals"},
        )


def _check_settles(
    branch: Branch, where: str, by_id: dict[str, Branch], settled_by: dict[str, str]
) -> None:
    covered = Decimal(0)
    for position, target_id in enumerate(branch.settles):
        ctx = {"id": branch.branch_id, "target": target_id, "where": f"{where}/settles/{position}"}
        if target_id == branch.branch_id:
            raise PydanticCustomError("SETTLES_SELF", "branch '{id}' settles itself", ctx)
        target = by_id.get(target_id)
        if target is None:
            raise PydanticCustomError(
                "UNKNOWN_SETTLES", "branch '{id}' settles '{target}', which is not in the plan", ctx
            )
        if target_id in settled_by:
            raise PydanticCustomError(
                "SETTLED_TWICE",
                "branch '{target}' is settled by both '{first}' and '{id}'",
                {**ctx, "first": settled_by[target_id]},
            )
        settled_by[target_id] = branch.branch_id
        if target.amount is None:
            continue
        if branch.amount is None or branch.amount.currency != target.amount.currency:
            raise PydanticCustomError(
                "SETTLES_CURRENCY",
                "branch '{id}' settles '{target}' but has no amount in {currency}",
                {**ctx, "currency": target.amount.currency},
            )
        covered += target.amount.decimal
    if branch.amount is not None and covered > branch.amount.decimal:
        raise PydanticCustomError(
            "SETTLES_UNDERSTATED",
            "branch '{id}' pays {amount} but settles branches worth {covered}",
            {
                "id": branch.branch_id,
                "amount": str(branch.amount),
                "covered": str(covered),
                "where": f"{where}/amount",
            },
        )


def _check_no_cycle(by_id: dict[str, Branch]) -> None:
    # Each branch is settled at most once (checked before), so following
    # "settled by" from any branch is a path; a loop shows up as a repeat.
    payer = {t: b.branch_id for b in by_id.values() for t in b.settles}
    for start in payer:
        seen = {start}
        node = payer.get(start)
        while node is not None:
            if node in seen:
                raise PydanticCustomError(
                    "SETTLES_CYCLE",
                    "settles loops back through branch '{id}'",
                    {"id": node, "where": "/branches"},
                )
            seen.add(node)
            node = payer.get(node)


_TYPE_REASONS = {
    ("amount", "value"): "AMOUNT_NOT_DECIMAL",
    ("tier",): "UNKNOWN_TIER",
    ("mode",): "UNKNOWN_MODE",
}


def parse_plan(doc: Mapping[str, Any] | Plan) -> Plan:
    """Parse and check a plan from its wire form.

    Raises:
        PlanInvalid: with ``data.reason`` (a key of :data:`hatp.errors.PLAN_REASONS`)
            and ``data.where`` (a JSON Pointer).
        VersionUnsupported: the plan names a protocol version this build does not know.
    """
    if isinstance(doc, Plan):
        return doc
    if not isinstance(doc, Mapping):
        raise PlanInvalid("SHAPE", "a plan is a JSON object", where="")
    require_supported(doc, "plan")
    try:
        return Plan.model_validate(doc)
    except ValidationError as exc:
        raise _plan_error(exc) from None
    except (InvalidOperation, RecursionError) as exc:  # pragma: no cover - defensive
        raise PlanInvalid("SHAPE", f"the plan cannot be read: {exc}", where="") from None


def _plan_error(exc: ValidationError) -> PlanInvalid:
    errors = exc.errors()
    # Prefer one of our named rules over a generic shape error.
    error = next((e for e in errors if e["type"] in PLAN_REASONS), errors[0])
    loc = tuple(str(p) for p in error["loc"])
    ctx = error.get("ctx") or {}
    where = str(ctx["where"]) if "where" in ctx else "/" + "/".join(loc) if loc else ""
    reason = str(error["type"])
    if reason not in PLAN_REASONS:
        reason = next(
            (r for suffix, r in _TYPE_REASONS.items() if loc[-len(suffix) :] == suffix), "SHAPE"
        )
    message = error["msg"]
    if reason == "SHAPE" or reason in _TYPE_REASONS.values():
        message = f"{where or 'the plan'}: {message}"
    return PlanInvalid(reason, message, where=where)
