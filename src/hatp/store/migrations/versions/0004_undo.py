"""The undo journal (issue 26): who takes back each committed step.

Adds ``hatp_undo_claim`` (the coordinator's journal: the undo transaction taking
back each step of a committed transaction) and the participant's
``hatp_branch.undone_by`` (the undo branch that claimed a committed step). Both are
frozen copies here, never the code's current table. Existing rows keep every value;
``undone_by`` starts null (no step was ever taken back before this revision).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_tables = sa.MetaData()

sa.Table(
    "hatp_undo_claim",
    _tables,
    sa.Column("txn_id", sa.Text, primary_key=True),
    sa.Column("branch_id", sa.Text, primary_key=True),
    sa.Column("undo_txn_id", sa.Text, nullable=False),
    sa.Column("claimed_at", sa.BigInteger, nullable=False),
    sa.Index("ix_hatp_undo_claim_undo", "undo_txn_id"),
)


def upgrade() -> None:
    _tables.create_all(op.get_bind(), checkfirst=False)
    with op.batch_alter_table("hatp_branch") as batch:
        batch.add_column(sa.Column("undone_by", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hatp_branch") as batch:
        batch.drop_column("undone_by")
    _tables.drop_all(op.get_bind(), checkfirst=False)
