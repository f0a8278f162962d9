"""hatp's bookkeeping tables for approval-bound writes, and their rows as Python sees them.

Four tables in the user's own database, beside the system of record they
account for, so the mark that a plan ran and the journal entry that says
who allowed it commit in the same transaction as the write itself
([WRITE-ONCE], docs/spec.md §22). They have a :class:`~sqlalchemy.MetaData`
of their own (:data:`metadata`): hatp's store tables are not created in the
user's database, nor these in hatp's. Times are integer milliseconds since
the epoch and JSON values their RFC 8785 canonical text. The SQL on them is
:mod:`hatp.writes._book`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from hatp.store._schema import from_ms, load_json

__all__ = [
    "ApprovalRow",
    "JournalEntry",
    "KeyRow",
    "KeyState",
    "PlanRow",
    "PlanStatus",
    "create_tables_txn",
    "metadata",
    "write_approval",
    "write_journal",
    "write_key",
    "write_plan",
]

metadata = sa.MetaData()

#: Every version of every plan proposed, with the policy's verdict and where it stands.
write_plan = sa.Table(
    "hatp_write_plan",
    metadata,
    sa.Column("plan_id", sa.Text, primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("digest", sa.Text, nullable=False),  # write_plan_digest of the plan
    sa.Column("plan", sa.Text, nullable=False),  # canonical JSON of the wire form
    sa.Column("verdict", sa.Text, nullable=False),  # a Verdict value
    sa.Column("status", sa.Text, nullable=False),  # a PlanStatus value
    sa.Column("detail", sa.Text, nullable=True),  # the error code of the last failure
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

#: The approval of a plan version: who (from the caller's authentication, or a
#: gateway's signed Approval), of which digest. At most one per version.
write_approval = sa.Table(
    "hatp_write_approval",
    metadata,
    sa.Column("plan_id", sa.Text, primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("digest", sa.Text, nullable=False),  # the plan digest approved
    sa.Column("approver", sa.Text, nullable=False),  # canonical JSON array of principal ids
    sa.Column("source", sa.Text, nullable=False),  # "direct" or "gateway"
    sa.Column("evidence", sa.Text, nullable=True),  # canonical JSON of the signed Approval
    sa.Column("approved_at", sa.BigInteger, nullable=False),
)

#: One execution key per approved plan version: reserved under a lease, then
#: completed (with its result) in the transaction that writes.
write_key = sa.Table(
    "hatp_write_key",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),  # derive_key(plan_id, version)
    sa.Column("plan_id", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),  # a KeyState value
    sa.Column("owner", sa.Text, nullable=True),  # the worker holding the reservation
    sa.Column("fence", sa.BigInteger, nullable=False),  # bumped by every (re)reservation
    sa.Column("lease_until", sa.BigInteger, nullable=True),
    sa.Column("result", sa.Text, nullable=True),  # canonical JSON, once completed or failed
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

#: The journal: one entry per executed key, committed with the write it records.
write_journal = sa.Table(
    "hatp_write_journal",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.Text, nullable=False, unique=True),
    sa.Column("plan_id", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("digest", sa.Text, nullable=False),
    sa.Column("approver", sa.Text, nullable=False),  # canonical JSON array of principal ids
    sa.Column("source", sa.Text, nullable=False),  # "direct", "gateway", "policy" or "undo"
    sa.Column("result", sa.Text, nullable=False),  # canonical JSON
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Index("ix_hatp_write_journal_plan", "plan_id", "version"),
)

# The advisory lock that serializes creating these tables across processes ("hwri").
_SCHEMA_LOCK = 0x68777269


class PlanStatus(StrEnum):
    """Where a plan version stands."""

    PROPOSED = "proposed"
    APPROVED = "approved"
    EXECUTED = "executed"
    FAILED = "failed"
    COMPENSATED = "compensated"  # executed, then undone by its inverse (a compensated branch)


class KeyState(StrEnum):
    """The states of an execution key."""

    RESERVED = "reserved"
    COMPLETED = "completed"
    FAILED = "failed"  # the last attempt was refused and rolled back: may be reserved again


@dataclass(frozen=True)
class PlanRow:
    """One plan version as the bookkeeping holds it."""

    plan_id: str
    version: int
    digest: str
    plan: dict[str, Any]
    verdict: str
    status: PlanStatus
    detail: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def _from_row(cls, row: Any) -> PlanRow:
        return cls(
            plan_id=row.plan_id,
            version=row.version,
            digest=row.digest,
            plan=load_json(row.plan),
            verdict=row.verdict,
            status=PlanStatus(row.status),
            detail=row.detail,
            created_at=from_ms(row.created_at),
            updated_at=from_ms(row.updated_at),
        )


@dataclass(frozen=True)
class ApprovalRow:
    """The approval of one plan version: its approvers, how it came, the digest approved."""

    plan_id: str
    version: int
    digest: str
    approvers: tuple[str, ...]
    source: str
    evidence: dict[str, Any] | None
    approved_at: datetime

    @classmethod
    def _from_row(cls, row: Any) -> ApprovalRow:
        return cls(
            plan_id=row.plan_id,
            version=row.version,
            digest=row.digest,
            approvers=tuple(load_json(row.approver)),
            source=row.source,
            evidence=None if row.evidence is None else load_json(row.evidence),
            approved_at=from_ms(row.approved_at),
        )


@dataclass(frozen=True)
class KeyRow:
    """One execution key: its state, who holds it until when, and its result."""

    key: str
    plan_id: str
    version: int
    state: KeyState
    owner: str | None
    fence: int
    lease_until: datetime | None
    result: dict[str, Any] | None
    updated_at: datetime

    @classmethod
    def _from_row(cls, row: Any) -> KeyRow:
        return cls(
            key=row.key,
            plan_id=row.plan_id,
            version=row.version,
            state=KeyState(row.state),
            owner=row.owner,
            fence=row.fence,
            lease_until=None if row.lease_until is None else from_ms(row.lease_until),
            result=None if row.result is None else load_json(row.result),
            updated_at=from_ms(row.updated_at),
        )


@dataclass(frozen=True)
class JournalEntry:
    """One journal entry: which plan version ran under which key, allowed by whom, with
    what result. ``source`` is ``direct`` or ``gateway`` (an approval) or ``policy``
    (the policy allowed it without one; ``approvers`` is then empty), or ``undo`` for
    the undo of an executed version (``approvers``: the execution's)."""

    seq: int
    key: str
    plan_id: str
    version: int
    digest: str
    approvers: tuple[str, ...]
    source: str
    result: dict[str, Any]
    at: datetime

    @classmethod
    def _from_row(cls, row: Any) -> JournalEntry:
        return cls(
            seq=row.seq,
            key=row.key,
            plan_id=row.plan_id,
            version=row.version,
            digest=row.digest,
            approvers=tuple(load_json(row.approver)),
            source=row.source,
            result=load_json(row.result),
            at=from_ms(row.at),
        )


def create_tables_txn(conn: sa.Connection) -> None:
    """Create the bookkeeping tables that are missing (serialized across processes)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK)))
    metadata.create_all(conn, checkfirst=True)
