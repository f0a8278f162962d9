"""The baseline: every table hatp had when schema revisions began.

A frozen copy (its own MetaData), never the code's current tables: later
revisions change those. It creates only the tables that are missing, so
``hatp db upgrade`` also completes a database an older hatp made before some
of these tables existed (the ones present are checked first: hatp.store).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_tables = sa.MetaData()
T, C, Ix = sa.Table, sa.Column, sa.Index
Text, Int, Big = sa.Text, sa.Integer, sa.BigInteger

T(
    "hatp_txn",
    _tables,
    C("txn_id", Text, primary_key=True),
    C("plan", Text, nullable=False),
    C("plan_digest", Text, nullable=False),
    C("state", Text, nullable=False),
    C("decision", Text, nullable=True),
    C("owner", Text, nullable=True),
    C("fence", Big, nullable=False),
    C("lease_until", Big, nullable=True),
    C("head", Text, nullable=True),
    C("created_at", Big, nullable=False),
    C("updated_at", Big, nullable=False),
    Ix("ix_hatp_txn_state_created", "state", "created_at"),
)
T(
    "hatp_record_event",
    _tables,
    C("txn_id", Text, sa.ForeignKey("hatp_txn.txn_id", ondelete="CASCADE"), primary_key=True),
    C("seq", Int, primary_key=True, autoincrement=False),
    C("event", Text, nullable=False),
)
T(
    "hatp_branch",
    _tables,
    C("participant_id", Text, primary_key=True),
    C("txn_id", Text, primary_key=True),
    C("branch_id", Text, primary_key=True),
    C("state", Text, nullable=False),
    C("tier", Text, nullable=True),
    C("plan_digest", Text, nullable=True),
    C("fence", Big, nullable=False),
    C("plan", Text, nullable=True),
    C("prepared", Text, nullable=True),
    C("prepare_receipt", Text, nullable=True),
    C("outcome_receipt", Text, nullable=True),
    C("undo_token", Text, nullable=True),
    C("lease_expires_at", Big, nullable=True),
    C("flags", Text, nullable=False),
    Ix("ix_hatp_branch_expiry", "participant_id", "state", "lease_expires_at"),
)
T(
    "hatp_ask",
    _tables,
    C("ask_id", Text, primary_key=True),
    C("kind", Text, nullable=False),
    C("txn_id", Text, nullable=False),
    C("group_id", Text, nullable=False),
    C("plan_digest", Text, nullable=False),
    C("state", Text, nullable=False),
    C("decide_by", Big, nullable=False),
    C("next_due", Big, nullable=True),
    C("doc", Text, nullable=False),
    C("version", Big, nullable=False),
    C("created_at", Big, nullable=False),
    C("updated_at", Big, nullable=False),
    sa.UniqueConstraint("kind", "txn_id", "group_id", "plan_digest", name="uq_hatp_ask_subject"),
    Ix("ix_hatp_ask_due", "state", "next_due"),
)
T(
    "hatp_used_approval",
    _tables,
    C("approval_id", Text, primary_key=True),
    C("server", Text, nullable=False),
    C("tool", Text, nullable=False),
    C("call_digest", Text, nullable=False),
    C("used_at", Big, nullable=False),
    C("expires_at", Big, nullable=False),
    C("outcome", Text, nullable=True),
    C("detail", Text, nullable=True),
    C("finished_at", Big, nullable=True),
    sqlite_with_rowid=False,
)
T(
    "hatp_lease_epoch",
    _tables,
    C("resource", Text, primary_key=True),
    C("epoch", Big, nullable=False),
)
T(
    "hatp_lease",
    _tables,
    C("lease_id", Text, primary_key=True),
    C("resource", Text, nullable=False),
    C("lease_digest", Text, nullable=False),
    C("lease", Text, nullable=False),
    C("mutation", Text, nullable=False),
    C("pre_image", Text, nullable=False),
    C("status", Text, nullable=False),
    C("expires_at", Big, nullable=False),
    C("post_image_hash", Text, nullable=True),
    C("commit_receipt", Text, nullable=True),
    C("recovery_receipt", Text, nullable=True),
    C("updated_at", Big, nullable=False),
    Ix("ix_hatp_lease_resource", "resource"),
)
T(
    "hatp_lease_rejection",
    _tables,
    C("seq", Int, primary_key=True, autoincrement=True),
    C("resource", Text, nullable=False),
    C("lease_id", Text, nullable=True),
    C("reason", Text, nullable=False),
    C("at", Big, nullable=False),
    C("receipt", Text, nullable=False),
    Ix("ix_hatp_lease_rejection_resource", "resource", "seq"),
)
T(
    "hatp_lease_escrow_told",
    _tables,
    C("lease_id", Text, primary_key=True),
    C("told_at", Big, nullable=False),
)
T(
    "hatp_passkey_nonce",
    _tables,
    C("nonce", Text, primary_key=True),
    C("ask_id", Text, nullable=False),
    C("human", Text, nullable=False),
    C("vote_digest", Text, nullable=False),
    C("used_at", Big, nullable=False),
)
T(
    "hatp_passkey_count",
    _tables,
    C("human", Text, primary_key=True),
    C("credential_id", Text, primary_key=True),
    C("sign_count", Big, nullable=False),
    C("updated_at", Big, nullable=False),
)
T(
    "hatp_web_challenge",
    _tables,
    C("challenge", Text, primary_key=True),
    C("purpose", Text, nullable=False),
    C("subject", Text, nullable=False),
    C("expires_at", Big, nullable=False),
    C("used_at", Big, nullable=True),
)
T(
    "hatp_web_session",
    _tables,
    C("token_digest", Text, primary_key=True),
    C("human", Text, nullable=False),
    C("credential_id", Text, nullable=False),
    C("created_at", Big, nullable=False),
    C("expires_at", Big, nullable=False),
    C("ended_at", Big, nullable=True),
)
T(
    "hatp_web_invite",
    _tables,
    C("token_digest", Text, primary_key=True),
    C("human", Text, nullable=False),
    C("created_at", Big, nullable=False),
    C("expires_at", Big, nullable=False),
    C("used_at", Big, nullable=True),
    C("kid", Text, nullable=True),
)


def upgrade() -> None:
    # checkfirst: only the missing tables (and their indexes) are created.
    _tables.create_all(op.get_bind(), checkfirst=True)


def downgrade() -> None:
    _tables.drop_all(op.get_bind())
