"""Pydantic types of the protocol; the JSON Schemas in ``schemas/`` come from them.

This package imports nothing above it, so an auditor can use it alone.
"""

from hatp.model._base import Digest, Kid, WireModel, WireTime
from hatp.model.findings import Finding, Result, VerificationReport
from hatp.model.keys import KeyringDocument, KeyringEntry, PublicJwk
from hatp.model.plan import (
    COMMIT_ORDER,
    AgentText,
    Amount,
    ApprovalGroup,
    Branch,
    Deadlines,
    Plan,
    Requirement,
    Tier,
    parse_plan,
)
from hatp.model.record import SEAL_EVENT, RecordEvent, TransactionRecord
from hatp.model.signature import Signature
from hatp.model.txn import (
    Approval,
    ApprovalDecision,
    BranchState,
    BranchStatus,
    Decision,
    OutcomeReceipt,
    Preconditions,
    PrepareReceipt,
    TxnEvent,
    TxnState,
    Vote,
)

__all__ = [
    "COMMIT_ORDER",
    "SEAL_EVENT",
    "AgentText",
    "Amount",
    "Approval",
    "ApprovalDecision",
    "ApprovalGroup",
    "Branch",
    "BranchState",
    "BranchStatus",
    "Deadlines",
    "Decision",
    "Digest",
    "Finding",
    "KeyringDocument",
    "KeyringEntry",
    "Kid",
    "OutcomeReceipt",
    "Plan",
    "Preconditions",
    "PrepareReceipt",
    "PublicJwk",
    "RecordEvent",
    "Requirement",
    "Result",
    "Signature",
    "Tier",
    "TransactionRecord",
    "TxnEvent",
    "TxnState",
    "VerificationReport",
    "Vote",
    "WireModel",
    "WireTime",
    "parse_plan",
]
