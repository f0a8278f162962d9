"""Gate asks: a tool server's asks to the Human Gateway for calls made without an approval.

Adds ``hatp_gate_ask`` (hatp.store.GateAsks), as a frozen copy (its own
MetaData), never the code's current table: later revisions may change that.
Unlike the baseline it creates the table unconditionally: no hatp before this
revision made it, so a table of that name already there is not hatp's, and the
upgrade fails (and changes nothing) rather than adopt it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_tables = sa.MetaData()
T, C = sa.Table, sa.Column
Text, Int, Big = sa.Text, sa.Integer, sa.BigInteger

T(
    "hatp_gate_ask",
    _tables,
    C("call_key", Text, primary_key=True),
    C("seq", Int, primary_key=True, autoincrement=False),
    C("request_id", Text, nullable=False),
    C("server", Text, nullable=False),
    C("tool", Text, nullable=False),
    C("call_digest", Text, nullable=False),
    C("agent", Text, nullable=False),
    C("on_behalf_of", Text, nullable=False),
    C("ask_id", Text, nullable=True),
    C("asked_at", Big, nullable=False),
    C("decide_by", Big, nullable=False),
    C("closed_at", Big, nullable=True),
    C("closed_why", Text, nullable=True),
    C("open_key", Text, nullable=True),
    sa.UniqueConstraint("request_id", name="uq_hatp_gate_ask_request"),
    sa.UniqueConstraint("open_key", name="uq_hatp_gate_ask_open"),
)


def upgrade() -> None:
    _tables.create_all(op.get_bind(), checkfirst=False)


def downgrade() -> None:
    _tables.drop_all(op.get_bind(), checkfirst=False)
