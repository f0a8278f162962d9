"""hatp's schema revisions, run by Alembic from inside the installed package.

``env.py`` runs them on a connection the store hands it (``config.attributes
["connection"]``), inside the store's own schema transaction: the PostgreSQL
session settings, SQLite's pragmas and the schema lock all apply, and no
``alembic.ini`` is needed. ``versions/`` holds one file per revision,
``0001_baseline`` first (the tables hatp had when revisions began).

A new revision: write ``versions/NNNN_what.py`` by hand (``down_revision`` the
current head, an ``upgrade`` and a ``downgrade``; use ``op.batch_alter_table``
for anything SQLite cannot ``ALTER``), change ``hatp.store``'s tables to match,
and run ``tests/store/test_migrations.py``: it checks that the head builds
exactly the tables the code declares, on SQLite and PostgreSQL.
"""
