"""Wire types of a transaction: requests to participants, their signed receipts,
approvals, and the states a transaction and a branch pass through.

Every receipt and approval is a signed object (``signature`` over its RFC 8785
canonical form, docs/spec.md §5) and carries the plan digest, so one digest
binds everything a party said about one plan.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from hatp.model._base import Digest, JsonObject, PositiveSeconds, WireModel, WireTime
from hatp.model.effects import EffectPreview, ObservedEffect
from hatp.model.human import ASK_ID_PATTERN
from hatp.model.plan import Amount, Name, Tier
from hatp.model.signature import Signature

__all__ = [
    "Approval",
    "ApprovalDecision",
    "BranchState",
    "BranchStatus",
    "Decision",
    "HeldUntil",
    "HoldTerms",
    "OutcomeReceipt",
    "Preconditions",
    "PrepareReceipt",
    "Quote",
    "RenewReceipt",
    "TxnEvent",
    "TxnState",
    "UndoKind",
    "UndoOffer",
    "Vote",
]


class Vote(StrEnum):
    """A participant's phase-1 answer."""

    YES = "yes"
    NO = "no"


class Decision(StrEnum):
    """The coordinator's logged decision."""

    COMMIT = "commit"
    ABORT = "abort"


class TxnState(StrEnum):
    """Where a transaction stands in the coordinator's log.

    ``active``: preparing and asking, nothing decided (presumed abort).
    ``committing``: commit decided and logged; phase 2 running.
    ``in-doubt``: the final step gave no answer; retrying, holds kept.
    ``unwinding``: a phase-2 step failed after commit was decided; undoing.
    ``aborting``: abort decided and logged; releasing.
    ``committed`` / ``aborted``: finished.
    ``needs-recovery``: finished, but not whole: the final step answered after
    some holds lapsed; they were released and recovery was offered to a person.
    ``needs-attention``: finished, but not whole: aborted, yet a participant
    refused for certain to release or undo a branch; the outcome names every
    branch still held, for a person to resolve.
    """

    ACTIVE = "active"
    COMMITTING = "committing"
    IN_DOUBT = "in-doubt"
    UNWINDING = "unwinding"
    ABORTING = "aborting"
    COMMITTED = "committed"
    ABORTED = "aborted"
    NEEDS_RECOVERY = "needs-recovery"
    NEEDS_ATTENTION = "needs-attention"

    @property
    def finished(self) -> bool:
        """Whether nothing more will happen to the transaction."""
        return self in (
            TxnState.COMMITTED,
            TxnState.ABORTED,
            TxnState.NEEDS_RECOVERY,
            TxnState.NEEDS_ATTENTION,
        )


class BranchState(StrEnum):
    """Where one branch stands at its participant."""

    PREPARED = "prepared"  # voted yes; hold placed or dry run done
    REFUSED = "refused"  # voted no
    COMMITTED = "committed"
    ABORTED = "aborted"  # released, voided, or aborted before prepare
    COMPENSATED = "compensated"  # committed, then undone with its undo token
    UNKNOWN = "unknown"  # never heard of (status only)


class Preconditions(WireModel):
    """What a dry run saw: the version of each target, and the credential scope it acts under."""

    versions: dict[str, str] = Field(description="target name -> version seen at prepare")
    scope: str = Field(max_length=512, description="the credential scope the commit will use")


class PrepareReceipt(WireModel):
    """A participant's signed vote on one branch."""

    hatp_version: str
    kind: Literal["prepare"]
    txn_id: str
    branch_id: str
    participant: str
    plan_digest: Digest
    fence: int = Field(ge=0)
    attempt: int = Field(
        default=1, ge=1, description="1 for the prepare; n + 1 for a lost hold placed again"
    )
    vote: Vote = Field(strict=False)
    reason: str | None = Field(default=None, description="why the vote is no")
    tier: Tier = Field(strict=False)
    lease_expires_at: WireTime | None = Field(default=None, description="holds: the lease's end")
    hold_horizon: WireTime | None = Field(
        default=None, description="holds: the latest the hold can last, renewals included"
    )
    preconditions: Preconditions | None = Field(
        default=None, description="compensate and final: what the dry run saw"
    )
    cost: Amount | None = Field(default=None, description="what the participant will charge")
    preview: EffectPreview | None = Field(
        default=None, description="a yes vote: what commit will change, and how surely"
    )
    time: WireTime
    signature: Signature


class Quote(WireModel):
    """A participant's signed word on what a prepare of one branch would give now (§13).

    A quote places nothing and promises nothing: ``cost`` is what the
    participant would charge if the branch were prepared now, until
    ``validUntil``; ``leaseSeconds`` and ``holdSeconds`` (holds only) are the
    longest lease and the horizon a prepare now would grant. A ``cost`` above
    the branch's amount is allowed here: the coordinator compares, and the
    prepare votes no [PART-COST].
    """

    hatp_version: str
    kind: Literal["quote"]
    txn_id: str
    branch_id: str
    participant: str
    plan_digest: Digest
    fence: int = Field(ge=0)
    tier: Tier = Field(strict=False)
    cost: Amount | None = Field(
        default=None, description="what a prepare now would charge; null: not said"
    )
    valid_until: WireTime | None = Field(
        default=None, description="the cost holds until then; null: no expiry"
    )
    lease_seconds: PositiveSeconds | None = Field(
        default=None, description="holds: the longest lease a prepare now would grant"
    )
    hold_seconds: PositiveSeconds | None = Field(
        default=None,
        description="holds: how long a hold placed now could last, renewals included",
    )
    preview: EffectPreview | None = Field(
        default=None, description="what a prepare now and its commit would change"
    )
    time: WireTime
    signature: Signature


class HeldUntil(WireModel):
    """One hold's end as its prepare (or replace) receipt states it."""

    branch_id: str
    lease_expires_at: WireTime | None
    hold_horizon: WireTime | None


class HoldTerms(WireModel):
    """What people approve with the plan in holds-first and approval-first mode
    (docs/spec.md §14 [COORD-TERMS], [COORD-QUOTE]).

    The holds' end times, taken from the participants' signed prepare
    receipts (none in approval-first: nothing is placed before the
    approval), the approval deadline that fits inside them, and each step's
    effect preview as its participant signed it, in its yes vote
    (holds-first) or its quote (approval-first) [COORD-PREVIEW]. Votes and
    approvals carry its digest as ``termsDigest``, so they cover the
    previews people were shown.
    """

    kind: Literal["hold-terms"]
    plan_digest: Digest
    holds: list[HeldUntil]
    approve_by: WireTime
    previews: dict[str, EffectPreview] = Field(
        default_factory=dict,
        description="each step's effect preview, by branchId, from its signed prepare "
        "receipt (holds-first) or quote (approval-first)",
    )


class RenewReceipt(WireModel):
    """A participant's signed word that a hold's lease was renewed (docs/spec.md §13).

    ``leaseExpiresAt`` is the lease after the renewal: never earlier than
    before, never past ``holdHorizon``, the horizon of the prepare receipt.
    """

    hatp_version: str
    kind: Literal["renew"]
    txn_id: str
    branch_id: str
    participant: str
    plan_digest: Digest
    fence: int = Field(ge=0)
    lease_expires_at: WireTime = Field(description="when the hold ends unless committed or renewed")
    hold_horizon: WireTime = Field(description="the latest the hold can last, renewals included")
    time: WireTime
    signature: Signature


class UndoKind(StrEnum):
    """How a committed step can be taken back.

    ``compensate``: a compensate-tier step, undone with its undo token (operation
    :data:`COMPENSATION`). ``inverse``: the participant's declared inverse operation
    (a cancellation, a refund, a void), on its own terms. ``not-undoable``: it cannot
    be taken back, for the ``reason`` given.
    """

    COMPENSATE = "compensate"
    INVERSE = "inverse"
    NOT_UNDOABLE = "not-undoable"


class UndoOffer(WireModel):
    """A participant's signed word, in its commit receipt, on taking the step back.

    ``operation`` and ``tier`` are the undo branch's; ``args`` what it is sent
    (beyond :class:`StepRef`). ``fee``: what the participant keeps for undoing (a
    cancellation fee: a cost). ``refund``: the money the undo returns before any
    fee (a refund or void: money moving). ``undoBy``: the offer lapses then.
    """

    kind: UndoKind = Field(strict=False)
    operation: Name | None = Field(default=None, description="the operation that undoes it")
    tier: Tier | None = Field(default=None, strict=False, description="that operation's tier")
    args: JsonObject = Field(default_factory=dict, description="what the undo branch is sent")
    fee: Amount | None = Field(default=None, description="what the participant keeps for it")
    refund: Amount | None = Field(default=None, description="the money it returns, before fees")
    undo_by: WireTime | None = Field(default=None, description="the offer lapses at this time")
    reason: str | None = Field(
        default=None, max_length=1000, description="not-undoable: why it cannot be taken back"
    )

    @property
    def undoable(self) -> bool:
        """Whether the offer names a way back."""
        return self.kind is not UndoKind.NOT_UNDOABLE and self.operation is not None


class OutcomeReceipt(WireModel):
    """A participant's signed account of a phase-2 step (commit, abort or compensate)."""

    hatp_version: str
    kind: Literal["commit", "abort", "compensate"]
    txn_id: str
    branch_id: str
    participant: str
    plan_digest: Digest | None = Field(description="null only for an abort before any prepare")
    fence: int = Field(ge=0)
    outcome: BranchState = Field(strict=False)
    undo_token: str | None = Field(default=None, description="compensate tier: undoes the commit")
    effect: JsonObject | None = Field(default=None, description="what was done, for a person")
    observed: ObservedEffect | None = Field(
        default=None, description="a commit: what it changed, in the structure of its preview"
    )
    undo: UndoOffer | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="a commit: how the step can be taken back, and at what cost [PART-UNDO-OFFER]; "
        "written only on commit receipts",
    )
    time: WireTime
    signature: Signature


class ApprovalDecision(StrEnum):
    """A person's answer."""

    APPROVE = "approve"
    REJECT = "reject"


class Approval(WireModel):
    """A gateway's signed account of one approval group's decision on one plan.

    It carries the evidence the decision rests on: each person's own signed
    :class:`~hatp.model.HumanVote`, the directory-signed cards of the people
    who voted (their keys verify the votes), and the gateway's final signed
    routing record (who the address matched, and what happened to each).
    ``withdrawn`` is true when the deadline passed and the gateway withdrew
    its asks and voted no; ``reason`` says why the group was decided so.
    ``termsDigest`` (holds-first mode) is the digest of the HoldTerms the
    group was asked to approve with the plan, which every vote names too;
    absent from the wire when the ask had no terms.
    """

    hatp_version: str
    kind: Literal["approval"]
    ask_id: str = Field(pattern=ASK_ID_PATTERN)
    txn_id: str
    plan_digest: Digest
    group_id: str
    decision: ApprovalDecision = Field(strict=False)
    approvers: list[str] = Field(description="who approved (human://…), in vote order")
    reason: str = Field(max_length=1000)
    withdrawn: bool = False
    votes: list[JsonObject] = Field(description="the signed HumanVotes, in arrival order")
    cards: list[JsonObject] = Field(description="the signed Human Cards of the voters")
    routing: JsonObject = Field(description="the gateway's final signed routing record")
    gateway: str = Field(description="the gateway that asked and signs")
    terms_digest: Digest | None = Field(
        default=None, description="holds-first: the digest of the HoldTerms asked about"
    )
    decided_at: WireTime
    signature: Signature


class BranchStatus(WireModel):
    """A participant's answer to a status query; changes nothing."""

    txn_id: str
    branch_id: str
    participant: str
    state: BranchState = Field(strict=False)
    fence: int = Field(ge=0, description="the highest fencing token seen for this branch")
    receipt: JsonObject | None = Field(description="the last signed receipt, if any")
    flags: list[str] = Field(
        default_factory=list, description="refused requests that contradicted the outcome"
    )


class TxnEvent(StrEnum):
    """The event types of a transaction's record (docs/spec.md §13)."""

    PLANNED = "txn.planned"
    MODE = "txn.mode"
    TERMS = "txn.terms"
    PREPARED = "txn.prepared"
    REPLACED = "txn.replaced"
    PENDING = "txn.pending"
    APPROVAL = "txn.approval"
    RENEWED = "txn.renewed"
    DEADLINE = "txn.deadline"
    DECIDED = "txn.decided"
    TAKEN_OVER = "txn.taken-over"
    IN_DOUBT = "txn.in-doubt"
    UNWINDING = "txn.unwinding"
    COMMITTED = "txn.committed"
    EFFECT = "txn.effect"
    COMPENSATED = "txn.compensated"
    ABORTED = "txn.aborted"
    HELD = "txn.held"
    ESCALATED = "txn.escalated"
    LATE_ANSWER = "txn.late-answer"
    RECOVERY_OFFERED = "txn.recovery-offered"
    OUTCOME = "txn.outcome"
