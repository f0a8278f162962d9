"""The store's schema revisions (Alembic), and what opening a store does with them.

Opening a store looks, under the schema lock and inside one transaction, at
the revision its database records in ``hatp_schema_version``:

- none, and none of hatp's tables: a fresh database, brought to the head;
- none, and every table of the baseline, as the baseline has it: a database
  made before revisions began, stamped with the baseline (nothing changes);
- none, and some of them: refused (``PARTIAL``) unless upgrading, which creates
  the missing ones; a table whose columns differ: always refused (``DIFFERENT``);
- the head: used as it is;
- an older one: refused (``BEHIND``) unless upgrading;
- one this hatp does not know: refused (``NEWER``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from hatp.errors import SchemaMismatch

__all__ = [
    "BASELINE",
    "SHIPPED",
    "VERSION_TABLE",
    "Found",
    "Migrations",
    "SchemaMode",
    "SchemaStatus",
    "prepare_txn",
]

_log = logging.getLogger(__name__)

#: Where a database records its revision (not ``alembic_version``: the database may be
#: shared with an application that has its own).
VERSION_TABLE = "hatp_schema_version"
#: The revision of the tables hatp had when revisions began.
BASELINE = "0001"
_SHIPPED = Path(__file__).with_name("migrations")
# Alembic's ``context`` and ``op`` are module-wide proxies: one run at a time per
# process. Taken inside the schema lock, never around it, so it cannot deadlock.
_ALEMBIC = threading.Lock()


class SchemaMode(StrEnum):
    """What opening a store may do to its schema."""

    OPEN = "open"  # create a fresh database; refuse one behind or partial
    UPGRADE = "upgrade"  # also bring one behind or partial to the head
    LOOK = "look"  # change nothing, refuse nothing but a foreign table


class Found(StrEnum):
    """What a database held when a store looked at it."""

    EMPTY = "empty"  # none of hatp's tables
    UNVERSIONED = "unversioned"  # the baseline's tables, no revision recorded
    PARTIAL = "partial"  # some of the baseline's tables, no revision recorded
    BEHIND = "behind"  # an older revision than this hatp's head
    CURRENT = "current"  # this hatp's head
    NEWER = "newer"  # a revision this hatp does not know


@dataclass(frozen=True)
class SchemaStatus:
    """A store's schema as opening found it and left it.

    ``found`` says what was there; ``before`` is the revision recorded then (``None``
    when none was), ``after`` the one recorded now, ``head`` this hatp's newest.
    """

    found: Found
    before: str | None
    after: str | None
    head: str


class Migrations:
    """The revisions a store's schema can be at: hatp's own (``versions/`` in this
    package) and those in ``more`` directories (a deployment's own, or a test's),
    each revising one before it."""

    def __init__(self, *more: str | os.PathLike[str]) -> None:
        self._more = tuple(os.fspath(path) for path in more)

    def config(self, conn: Connection | None = None) -> Config:
        """An Alembic configuration of these revisions, running on ``conn``."""
        config = Config()
        config.set_main_option("script_location", str(_SHIPPED))
        config.set_main_option("path_separator", "os")
        locations = (str(_SHIPPED / "versions"), *self._more)
        config.set_main_option("version_locations", os.pathsep.join(locations))
        config.attributes["connection"] = conn
        config.attributes["version_table"] = VERSION_TABLE
        return config

    @functools.cached_property
    def script(self) -> ScriptDirectory:
        """The revision files, read once."""
        return ScriptDirectory.from_config(self.config())

    @functools.cached_property
    def head(self) -> str:
        """The newest revision.

        Raises:
            SchemaMismatch: the revisions do not form one line.
        """
        heads = self.script.get_heads()
        if len(heads) != 1:
            raise SchemaMismatch(
                f"the schema revisions have {len(heads)} heads ({', '.join(heads)}), not one: "
                "give each revision the one before it as down_revision",
                reason="HEADS",
                heads=sorted(heads),
            )
        return heads[0]

    def knows(self, revision: str) -> bool:
        """Whether ``revision`` is one of these."""
        try:
            return self.script.get_revision(revision) is not None
        except CommandError:
            return False

    @functools.cached_property
    def baseline(self) -> sa.MetaData:
        """The baseline's tables, as its revision file freezes them."""
        tables: sa.MetaData = self.script.get_revision(BASELINE).module._tables
        return tables


#: hatp's own revisions, read once per process.
SHIPPED = Migrations()


def prepare_txn(
    conn: Connection, migrations: Migrations, mode: SchemaMode, shown: str
) -> SchemaStatus:
    """Look at the schema of the database ``conn`` is in a transaction on (holding the
    schema lock), and do what ``mode`` allows (this module's docstring).

    Returns:
        What was found, and the revision before and after.

    Raises:
        SchemaMismatch: the database is not at the head, and ``mode`` does not allow
            bringing it there (``data.reason``: ``NEWER``, ``BEHIND``, ``PARTIAL``), or
            it holds a table of hatp's name that is not hatp's (``DIFFERENT``).
    """
    head = migrations.head
    before = _recorded(conn)
    if before is None:
        found = _unversioned(conn, migrations, shown)
    elif not migrations.knows(before):
        found = Found.NEWER
    else:
        found = Found.CURRENT if before == head else Found.BEHIND
    if mode is SchemaMode.LOOK or found is Found.CURRENT:
        return SchemaStatus(found, before, before, head)
    if found is Found.NEWER or (mode is SchemaMode.OPEN and found in _NEEDS_UPGRADE):
        raise _refusal(found, before, head, shown)
    if mode is SchemaMode.OPEN and found is Found.UNVERSIONED and head != BASELINE:
        raise _refusal(Found.BEHIND, BASELINE, head, shown)  # stamping alone would not do
    config = migrations.config(conn)
    with _ALEMBIC:
        if found is Found.UNVERSIONED:
            command.stamp(config, BASELINE)
        command.upgrade(config, "head")
    after = _recorded(conn)
    _log.info("store %s: schema %s -> %s (%s)", shown, before or "none", after, found.value)
    return SchemaStatus(found, before, after, head)


_NEEDS_UPGRADE = (Found.BEHIND, Found.PARTIAL)


def _recorded(conn: Connection) -> str | None:
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _unversioned(conn: Connection, migrations: Migrations, shown: str) -> Found:
    """EMPTY, UNVERSIONED or PARTIAL, after checking the tables that are there."""
    inspector = sa.inspect(conn)
    baseline = migrations.baseline
    present = set(inspector.get_table_names()) & set(baseline.tables)
    for name in sorted(present):
        have = {column["name"] for column in inspector.get_columns(name)}
        want = set(baseline.tables[name].columns.keys())
        if have != want:
            _log.warning("store %s: table %s is not hatp's baseline table", shown, name)
            raise SchemaMismatch(
                f"the database at {shown} has a table {name} with columns "
                f"{', '.join(sorted(have))}, where hatp's has {', '.join(sorted(want))}: it "
                "was not made by hatp, or was changed by hand. Point hatp at a database of "
                "its own (or another PostgreSQL schema)",
                reason="DIFFERENT",
                url=shown,
                table=name,
            )
    if not present:
        return Found.EMPTY
    return Found.UNVERSIONED if present == set(baseline.tables) else Found.PARTIAL


def _refusal(found: Found, before: str | None, head: str, shown: str) -> SchemaMismatch:
    upgrade = f"run: hatp db upgrade --db {shown}"
    messages = {
        Found.NEWER: (
            f"the database at {shown} is at schema revision {before}, which this hatp does "
            f"not know (its newest is {head}): this hatp is older than the database: "
            "upgrade hatp"
        ),
        Found.BEHIND: (
            f"the database at {shown} is at schema revision {before}, behind this hatp's "
            f"{head}: {upgrade} (back it up first)"
        ),
        Found.PARTIAL: (
            f"the database at {shown} holds some of hatp's tables but not all, and records "
            f"no schema revision (an older hatp made it): {upgrade}"
        ),
    }
    _log.warning("store %s: refused: schema %s (%s, head %s)", shown, before, found.value, head)
    return SchemaMismatch(
        messages[found], reason=found.value.upper(), url=shown, revision=before, head=head
    )
