"""A revision that fails half-way, for tests only: after t0003 changed hatp_txn.

Revision ID: t0004
Revises: t0003
"""

from __future__ import annotations

from alembic import op

revision = "t0004"
down_revision = "t0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE hatp_txn SET no_such_column = 1")


def downgrade() -> None:
    pass
