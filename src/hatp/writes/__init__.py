"""Approval-bound transactional writes to a SQL system of record (docs/spec.md §22).

An agent proposes a :class:`WritePlan`: typed corrections from an allowlist
(a :class:`Registry` of :class:`RecordSet` and :class:`Correction` types the
operator wrote), the snapshot of the records it reasoned from and the
postcondition that must hold afterwards. No SQL travels in a plan. A
deterministic :class:`Policy` says ALLOW, DENY or REQUIRE_APPROVAL. An
approval is stored against the plan id, version and digest; the approver is
a :class:`Principal` the caller's authentication layer hands in, or a Human
Gateway's signed approval. :meth:`Writes.execute` reserves the execution key
derived from plan id + version, then, in one transaction in the same
database as the data: checks the records still equal the snapshot, applies
the corrections, checks the postcondition, completes the key and appends
the journal entry. A replay returns the stored result; a dead worker's key
is classified from the live records. A :class:`Proposal` carries the plan's
exact effect preview, which :func:`hatp.gateway.write_preview_lines` shows
to the approver as the Human Gateway shows a step's. :class:`WriteOperation` makes a write
a compensate-tier branch of a hatp transaction.
"""

from hatp.writes._corrections import Correction, Registry
from hatp.writes._executor import (
    DryRun,
    ExecutionStatus,
    Principal,
    Proposal,
    WriteOutcome,
    Writes,
    WriteStatus,
    derive_key,
)
from hatp.writes._participant import WriteOperation
from hatp.writes._plan import (
    Change,
    CheckedPlan,
    CorrectionItem,
    WritePlan,
    check_plan,
    diff,
    draft_plan,
    expected_state,
    format_diff,
    write_plan_digest,
)
from hatp.writes._policy import Policy, PolicyDecision, TypeRule, Verdict
from hatp.writes._records import RecordName, RecordSet, read_records
from hatp.writes._tables import ApprovalRow, JournalEntry, KeyRow, KeyState, PlanRow, PlanStatus
from hatp.writes._undo import undo_plan

__all__ = [
    "ApprovalRow",
    "Change",
    "CheckedPlan",
    "Correction",
    "CorrectionItem",
    "DryRun",
    "ExecutionStatus",
    "JournalEntry",
    "KeyRow",
    "KeyState",
    "PlanRow",
    "PlanStatus",
    "Policy",
    "PolicyDecision",
    "Principal",
    "Proposal",
    "RecordName",
    "RecordSet",
    "Registry",
    "TypeRule",
    "Verdict",
    "WriteOperation",
    "WriteOutcome",
    "WritePlan",
    "WriteStatus",
    "Writes",
    "check_plan",
    "derive_key",
    "diff",
    "draft_plan",
    "expected_state",
    "format_diff",
    "read_records",
    "undo_plan",
    "write_plan_digest",
]
