"""The Human Gateway's outbox: notices to people over push channels (webhook, e-mail).

Adds ``hatp_outbox`` (hatp.store.Outbox), as a frozen copy (its own MetaData),
never the code's current table: later revisions may change that. Created
unconditionally, as 0002 does: a table of that name already there is not hatp's,
and the upgrade fails (and changes nothing) rather than adopt it.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_tables = sa.MetaData()
T, C = sa.Table, sa.Column
Text, Int, Big = sa.Text, sa.Integer, sa.BigInteger

T(
    "hatp_outbox",
    _tables,
    C("notice_id", Text, primary_key=True),
    C("ask_id", Text, nullable=False),
    C("human", Text, nullable=False),
    C("channel", Text, nullable=False),
    C("event", Text, nullable=False),
    C("doc", Text, nullable=False),
    C("state", Text, nullable=False),
    C("attempts", Int, nullable=False),
    C("next_at", Big, nullable=True),
    C("claimed_until", Big, nullable=True),
    C("last_error", Text, nullable=True),
    C("created_at", Big, nullable=False),
    C("settled_at", Big, nullable=True),
    C("link_used_at", Big, nullable=True),
    sa.Index("ix_hatp_outbox_due", "state", "next_at"),
    sa.Index("ix_hatp_outbox_ask", "ask_id"),
)


def upgrade() -> None:
    _tables.create_all(op.get_bind(), checkfirst=False)


def downgrade() -> None:
    _tables.drop_all(op.get_bind(), checkfirst=False)
