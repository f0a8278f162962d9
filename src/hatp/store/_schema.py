"""The tables of hatp, and how values cross into and out of them.

Times are stored as integer milliseconds since the Unix epoch (UTC), the
resolution of wire times, so the same instant compares the same on every
database. JSON values are stored as their RFC 8785 canonical text: what is
read back is byte for byte what was signed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

import orjson
import sqlalchemy as sa

from hatp.evidence import canonicalize

metadata = sa.MetaData()

#: A result row of any shape (SQLAlchemy types a row by its columns' types).
AnyRow: TypeAlias = sa.Row[*tuple[Any, ...]]

#: One row per transaction in the coordinator's decision log.
txn = sa.Table(
    "hatp_txn",
    metadata,
    sa.Column("txn_id", sa.Text, primary_key=True),
    sa.Column("plan", sa.Text, nullable=False),  # canonical JSON of the plan's normal form
    sa.Column("plan_digest", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),  # a TxnState value
    sa.Column("decision", sa.Text, nullable=True),  # a Decision value, once logged
    sa.Column("owner", sa.Text, nullable=True),  # the coordinator holding the lease
    sa.Column("fence", sa.BigInteger, nullable=False),
    sa.Column("lease_until", sa.BigInteger, nullable=True),
    sa.Column("head", sa.Text, nullable=True),  # digest of the last record event
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Index("ix_hatp_txn_state_created", "state", "created_at"),
)

#: The signed record events of each transaction, in order.
record_event = sa.Table(
    "hatp_record_event",
    metadata,
    sa.Column(
        "txn_id",
        sa.Text,
        sa.ForeignKey("hatp_txn.txn_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("event", sa.Text, nullable=False),  # canonical JSON of the signed event
)

#: A participant's durable state for each branch it was asked about.
branch = sa.Table(
    "hatp_branch",
    metadata,
    sa.Column("participant_id", sa.Text, primary_key=True),
    sa.Column("txn_id", sa.Text, primary_key=True),
    sa.Column("branch_id", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),  # a BranchState value
    sa.Column("tier", sa.Text, nullable=True),
    sa.Column("plan_digest", sa.Text, nullable=True),
    sa.Column("fence", sa.BigInteger, nullable=False),  # the highest fence seen
    sa.Column("plan", sa.Text, nullable=True),
    sa.Column("prepared", sa.Text, nullable=True),
    sa.Column("prepare_receipt", sa.Text, nullable=True),
    sa.Column("outcome_receipt", sa.Text, nullable=True),
    sa.Column("undo_token", sa.Text, nullable=True),
    sa.Column("lease_expires_at", sa.BigInteger, nullable=True),
    sa.Column("flags", sa.Text, nullable=False),  # canonical JSON array of notes
    sa.Column("undone_by", sa.Text, nullable=True),  # <txnId>/<branchId> of the undo branch
    sa.Index("ix_hatp_branch_expiry", "participant_id", "state", "lease_expires_at"),
)

#: The Human Gateway's asks (approval groups and questions), each with its whole state.
ask = sa.Table(
    "hatp_ask",
    metadata,
    sa.Column("ask_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),  # an AskKind value
    sa.Column("txn_id", sa.Text, nullable=False),  # the transaction's id, or the question's
    sa.Column("group_id", sa.Text, nullable=False),  # the approval group, or "question"
    sa.Column("plan_digest", sa.Text, nullable=False),  # the plan's digest, or the question's
    sa.Column("state", sa.Text, nullable=False),  # an AskState value
    sa.Column("decide_by", sa.BigInteger, nullable=False),
    sa.Column("next_due", sa.BigInteger, nullable=True),  # when the gateway next acts; open only
    sa.Column("doc", sa.Text, nullable=False),  # canonical JSON of the ask's whole state
    sa.Column("version", sa.BigInteger, nullable=False),  # bumped by every update
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("kind", "txn_id", "group_id", "plan_digest", name="uq_hatp_ask_subject"),
    sa.Index("ix_hatp_ask_due", "state", "next_due"),
)

#: A tool server's call approvals that were used, one row each, so each runs its call once.
used_approval = sa.Table(
    "hatp_used_approval",
    metadata,
    sa.Column("approval_id", sa.Text, primary_key=True),
    sa.Column("server", sa.Text, nullable=False),  # the server, tool and call digest the
    sa.Column("tool", sa.Text, nullable=False),  # first claim named; a later claim never
    sa.Column("call_digest", sa.Text, nullable=False),  # changes them
    sa.Column("used_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),  # the approval's own expiry
    sa.Column("outcome", sa.Text, nullable=True),  # a UseOutcome value, once the call ended
    sa.Column("detail", sa.Text, nullable=True),
    sa.Column("finished_at", sa.BigInteger, nullable=True),
    # Every gated call writes one row here, and its commit is on the call's path: one
    # b-tree (no rowid table, no index) keeps it one page. prune() scans, and runs rarely.
    sqlite_with_rowid=False,
)

#: A tool server's asks to the Human Gateway for calls made without an approval (stock
#: MCP clients): one open ask at most per call and requester, and every one asked before.
gate_ask = sa.Table(
    "hatp_gate_ask",
    metadata,
    sa.Column("call_key", sa.Text, primary_key=True),  # hex SHA-256 of the call and requester
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),  # 1, 2, ... per key
    sa.Column("request_id", sa.Text, nullable=False),  # the CallRequest's requestId
    sa.Column("server", sa.Text, nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("call_digest", sa.Text, nullable=False),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("on_behalf_of", sa.Text, nullable=False),
    sa.Column("ask_id", sa.Text, nullable=True),  # the gateway's, once it answered
    sa.Column("asked_at", sa.BigInteger, nullable=False),
    sa.Column("decide_by", sa.BigInteger, nullable=False),
    sa.Column("closed_at", sa.BigInteger, nullable=True),
    sa.Column("closed_why", sa.Text, nullable=True),
    # call_key while the ask is open, NULL once closed: unique, so a key has one open ask.
    sa.Column("open_key", sa.Text, nullable=True),
    sa.UniqueConstraint("request_id", name="uq_hatp_gate_ask_request"),
    sa.UniqueConstraint("open_key", name="uq_hatp_gate_ask_open"),
)

#: The Human Gateway's outbox: one row per notice to a person over a push channel (a
#: webhook, an e-mail), written in the transaction of the ask change that causes it.
outbox = sa.Table(
    "hatp_outbox",
    metadata,
    sa.Column("notice_id", sa.Text, primary_key=True),  # the idempotency key receivers see
    sa.Column("ask_id", sa.Text, nullable=False),
    sa.Column("human", sa.Text, nullable=False),
    sa.Column("channel", sa.Text, nullable=False),  # a channel type, e.g. "email"
    sa.Column("event", sa.Text, nullable=False),  # ask, escalation, withdrawal, ...
    sa.Column("doc", sa.Text, nullable=False),  # canonical JSON of the notice document
    sa.Column("state", sa.Text, nullable=False),  # pending, delivered, failed, superseded
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_at", sa.BigInteger, nullable=True),  # when to try next; pending only
    sa.Column("claimed_until", sa.BigInteger, nullable=True),  # a sender's claim on it
    sa.Column("last_error", sa.Text, nullable=True),  # reason: message, of the last failure
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("settled_at", sa.BigInteger, nullable=True),  # delivered, failed or superseded
    sa.Column("link_used_at", sa.BigInteger, nullable=True),  # its single-use link, once opened
    sa.Index("ix_hatp_outbox_due", "state", "next_at"),
    sa.Index("ix_hatp_outbox_ask", "ask_id"),
)

#: The coordinator's undo journal: which undo transaction takes back each committed step
#: of a transaction, written in the same store transaction as the undo's plan.
undo_claim = sa.Table(
    "hatp_undo_claim",
    metadata,
    sa.Column("txn_id", sa.Text, primary_key=True),  # the original transaction
    sa.Column("branch_id", sa.Text, primary_key=True),  # its committed step
    sa.Column("undo_txn_id", sa.Text, nullable=False),  # the undo transaction taking it back
    sa.Column("claimed_at", sa.BigInteger, nullable=False),
    sa.Index("ix_hatp_undo_claim_undo", "undo_txn_id"),
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def to_ms(moment: datetime) -> int:
    """Return ``moment`` as whole milliseconds since the epoch (rounded down).

    Raises:
        ValueError: ``moment`` is naive; stored times must say their zone.
    """
    if moment.tzinfo is None:
        raise ValueError("store times must be timezone-aware")
    return (moment - _EPOCH) // _MS


def from_ms(ms: int) -> datetime:
    """Return the UTC time ``ms`` milliseconds after the epoch."""
    return _EPOCH + ms * _MS


def lease_end(now: datetime, seconds: float) -> int:
    """Return the stored form of ``now + seconds``.

    Raises:
        ValueError: ``seconds`` is not positive, or ``now`` is naive.
    """
    if not seconds > 0:
        raise ValueError(f"a lease lasts a positive number of seconds, not {seconds!r}")
    return to_ms(now + timedelta(seconds=seconds))


def dump_json(value: Any) -> str:
    """Return the canonical JSON text stored for ``value``.

    Raises:
        InvalidJson: ``value`` has no canonical form.
    """
    return canonicalize(value).decode("utf-8")


def load_json(text: str) -> Any:
    """Read back a value written by :func:`dump_json` (trusted: our own writes)."""
    return orjson.loads(text)


def load_optional_json(text: str | None) -> Any:
    """Like :func:`load_json`, with SQL NULL read as ``None``."""
    return None if text is None else orjson.loads(text)


def dump_optional_json(value: Any) -> str | None:
    """Like :func:`dump_json`, with ``None`` stored as SQL NULL."""
    return None if value is None else dump_json(value)
