"""Alembic's environment for hatp's schema: online only, on the store's connection."""

from __future__ import annotations

from alembic import context

import hatp.store  # noqa: F401  (every table module registers on the one metadata)
from hatp.store._schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    # Offline SQL scripts would bypass the store's lock and settings.
    raise RuntimeError("hatp's migrations run through hatp.store (hatp db upgrade), not alone")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=context.config.attributes["version_table"],
    # SQLite cannot ALTER most things: batch mode copies the table instead.
    render_as_batch=True,
    # The store opened the one transaction every revision runs in.
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
