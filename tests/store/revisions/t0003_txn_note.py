"""A revision after hatp's own, for tests only: a column on hatp_txn, by copying the table.

SQLite cannot add a column under a constraint change in place, so Alembic's
batch mode copies the table and drops the old one; ``recreate="always"`` makes
it do so here, the path on which rows are lost if anything is wrong (hatp_txn's
drop would cascade to every record event were foreign keys on). Plus an index
on the gateway's asks by transaction and state.

Revision ID: t0003
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "t0003"
down_revision = "0004"
branch_labels = None
depends_on = None


def _recreate() -> str:
    # PostgreSQL alters in place; SQLite copies (the path that can lose rows).
    return "always" if op.get_bind().dialect.name == "sqlite" else "auto"


def upgrade() -> None:
    with op.batch_alter_table("hatp_txn", recreate=_recreate()) as batch:
        batch.add_column(sa.Column("note", sa.Text, nullable=True))
    op.create_index("ix_hatp_ask_txn_state", "hatp_ask", ["txn_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_hatp_ask_txn_state", table_name="hatp_ask")
    with op.batch_alter_table("hatp_txn", recreate=_recreate()) as batch:
        batch.drop_column("note")
