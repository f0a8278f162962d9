"""Opening a store: one base class, one subclass per database, picked by URL.

Every failure of the database (cannot connect, refused a statement, locked
for too long) leaves this module as :class:`~hatp.errors.StoreUnavailable`,
with the driver's exception as its ``__cause__``; nothing above the store
layer sees a SQLAlchemy or driver exception.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, cast

import psycopg
import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.sql.compiler import SQLCompiler

from hatp.errors import StoreUnavailable
from hatp.store._schema import metadata

#: How long SQLite waits for another connection's write lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 15_000
#: How long to wait for a PostgreSQL server to answer a connection attempt.
POSTGRES_CONNECT_TIMEOUT_S = 10
# The advisory lock that serializes table creation across processes ("hatp").
_SCHEMA_LOCK = 0x68617470
# PostgreSQL error codes a CREATE loses a race with: duplicate table, duplicate
# object, unique violation (on the catalog's type names).
_CREATE_RACE_CODES = frozenset({"42P07", "42710", "23505"})
# Driver errors, and the connection pool running dry.
_UNAVAILABLE = (exc.DBAPIError, exc.TimeoutError)
# The same, raised by the drivers themselves (on the driver_transaction path).
_DRIVER_ERRORS = (sqlite3.Error, psycopg.Error, *_UNAVAILABLE)

URL_HELP = (
    "use sqlite:///path/to/hatp.db (or a plain file path) or "
    "postgresql+psycopg://user@host:port/database"
)


class Store:
    """A database holding hatp's durable state; open one with :func:`open_store`.

    ``url`` is the full URL (it may hold a password: do not log it; ``repr``
    hides it). ``dialect`` is ``"sqlite"`` or ``"postgresql"``.
    """

    dialect: ClassVar[str]
    _hint: ClassVar[str]

    def __init__(self, url: URL) -> None:
        self.url = url.render_as_string(hide_password=False)
        self._shown = url.render_as_string(hide_password=True)
        self._opened = False
        self._engine = self._make_engine(url)
        try:
            self._create_tables()
        except BaseException:
            self._engine.dispose()
            raise
        self._opened = True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._shown}>"

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Run the ``with`` block as one database transaction.

        Commits when the block ends, rolls back when it raises. hatp errors
        and every other exception pass through unchanged after the rollback.

        Raises:
            StoreUnavailable: the database could not be reached, or refused a
                statement or the commit; nothing of the block was recorded.
        """
        try:
            with self._engine.begin() as conn:
                yield conn
        except _UNAVAILABLE as error:
            raise self._unavailable(error) from error

    @contextmanager
    def driver_transaction(self) -> Iterator[Any]:
        """Run the ``with`` block as one transaction on a pooled connection's own
        DB-API cursor, for the few statements on a hot path (:class:`DriverStatement`).

        The same guarantees as :meth:`transaction` (``BEGIN IMMEDIATE`` on
        SQLite, the same durability, commit at the end, rollback on an
        exception), without SQLAlchemy's per-statement execution machinery,
        which costs more than the insert and the commit themselves.

        Raises:
            StoreUnavailable: as :meth:`transaction`.
        """
        try:
            conn = self._engine.raw_connection()
        except _UNAVAILABLE as error:
            raise self._unavailable(error) from error
        try:
            cursor = conn.cursor()
            try:
                self._driver_begin(cursor)
                yield cursor
                conn.commit()
            except BaseException:
                with contextlib.suppress(*_DRIVER_ERRORS):
                    conn.rollback()
                raise
            finally:
                cursor.close()
        except _DRIVER_ERRORS as error:
            raise self._unavailable(error) from error
        finally:
            conn.close()

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._engine.dispose()

    def _make_engine(self, url: URL) -> Engine:
        raise NotImplementedError

    def _driver_begin(self, cursor: Any) -> None:
        """Open a driver_transaction (psycopg opens one by itself at the first statement)."""

    def _lock_schema(self, conn: Connection) -> None:
        """Serialize table creation with other processes (SQLite: BEGIN IMMEDIATE did)."""

    def _create_tables(self) -> None:
        # checkfirst reads the catalog: done once here, never per transaction.
        with self.transaction() as conn:
            self._lock_schema(conn)
            metadata.create_all(conn, checkfirst=True)

    def _unavailable(self, error: Exception) -> StoreUnavailable:
        detail = _detail(error)
        if self._opened:
            what = "a store transaction failed, so nothing of it was recorded"
        else:
            what = "cannot open the store"
        return StoreUnavailable(
            f"{what} at {self._shown}: {detail}. {self._hint}",
            url=self._shown,
            dialect=self.dialect,
            detail=detail,
        )


class SqliteStore(Store):
    """A store in one SQLite file: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``."""

    dialect = "sqlite"
    _hint = (
        "Check that the directory exists and this process may write there, that the file "
        "is an SQLite database, and that no other process holds it locked for "
        f"{SQLITE_BUSY_TIMEOUT_MS // 1000} seconds or more"
    )

    def _make_engine(self, url: URL) -> Engine:
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine

    def _driver_begin(self, cursor: Any) -> None:
        cursor.execute(_BEGIN_IMMEDIATE)  # as _sqlite_on_begin does for Core transactions


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take BEGIN away from the sqlite3 module (it would issue a deferred BEGIN
    # only before writes); _sqlite_on_begin issues our own.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another opener may hold.
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _switch_to_wal(cursor)
        # FULL: in WAL mode, NORMAL may lose the last commits on power loss.
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    # On a brand-new file, two openers can meet half-way: one holds a shared
    # lock while the other, already creating tables, waits to commit. SQLite
    # then answers "database is locked" at once instead of waiting (waiting
    # would deadlock), so the busy timeout does not help; a short retry does.
    for attempt in range(1, _WAL_ATTEMPTS + 1):
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == _WAL_ATTEMPTS:
                raise
            time.sleep(0.005 * attempt)


_WAL_ATTEMPTS = 40


_BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"


def _sqlite_on_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock at once, so a transaction that reads then
    # writes cannot fail half-way on a lock upgrade; busy_timeout queues it.
    conn.exec_driver_sql(_BEGIN_IMMEDIATE)


class PostgresStore(Store):
    """A store in a PostgreSQL database, through psycopg 3, ``synchronous_commit=on``."""

    dialect = "postgresql"
    _hint = (
        "Check that the server is running and reachable from here, and that the URL "
        "(postgresql+psycopg://user@host:port/database) names an existing user and database"
    )

    def _make_engine(self, url: URL) -> Engine:
        # Set at connection start-up, so no session can commit without waiting for its WAL flush.
        options = " ".join(o for o in (_query_text(url.query, "options"), _SYNC_COMMIT) if o)
        connect_args: dict[str, Any] = {"options": options}
        if "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
        return sa.create_engine(url, connect_args=connect_args)

    def _lock_schema(self, conn: Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK)))

    def _create_tables(self) -> None:
        try:
            super()._create_tables()
        except StoreUnavailable as error:
            # Every hatp process takes the advisory lock, but anything creating
            # the tables without it (a hand-run script) can still win the race;
            # the loser's CREATE fails on the name just taken, and a second
            # look finds the tables there.
            cause = error.__cause__
            code = getattr(getattr(cause, "orig", None), "sqlstate", None)
            if code not in _CREATE_RACE_CODES:
                raise
            super()._create_tables()


_SYNC_COMMIT = "-c synchronous_commit=on"


def _query_text(query: Mapping[str, str | tuple[str, ...]], key: str) -> str:
    value = query.get(key, "")
    return value if isinstance(value, str) else " ".join(value)


def dialect_insert(dialect: str, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """Return a bare ``INSERT`` on ``table`` that can take ``ON CONFLICT`` for ``dialect``."""
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


# Statements are built once per (dialect, table) and executed with a dict of
# values: building one afresh per call costs more than running it.
@functools.cache
def insert_or_ignore(dialect: str, table: sa.Table) -> sa.Insert:
    """Return ``INSERT .. ON CONFLICT DO NOTHING`` on ``table`` for ``dialect``.

    Execute it with a dict of column values; the columns are those the dict names.
    """
    return dialect_insert(dialect, table).on_conflict_do_nothing()


@functools.cache
def upsert(dialect: str, table: sa.Table) -> sa.Insert:
    """Return ``INSERT .. ON CONFLICT (primary key) DO UPDATE`` setting every other column.

    Execute it with a dict holding a value for every column of ``table``.
    """
    stmt = dialect_insert(dialect, table)
    keys = [c.name for c in table.primary_key.columns]
    changes = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys}
    return stmt.on_conflict_do_update(index_elements=keys, set_=changes)


class DriverStatement:
    """A Core statement compiled once for one dialect, to run on a driver's cursor.

    SQLAlchemy writes the SQL; :meth:`Store.driver_transaction` runs it. Bind
    parameters are passed by name (:meth:`params` puts them in the driver's
    order where it takes them by position).
    """

    def __init__(self, dialect: str, statement: sa.ClauseElement) -> None:
        compiled = cast(SQLCompiler, statement.compile(dialect=_DIALECTS[dialect]()))
        self.sql = compiled.string
        self._order = tuple(compiled.positiontup or ()) if compiled.positional else None

    def params(self, values: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        """Return ``values`` as the driver takes them for this statement."""
        if self._order is None:
            return values
        return [values[name] for name in self._order]


_DIALECTS: dict[str, Callable[[], sa.Dialect]] = {
    "sqlite": sqlite.pysqlite.dialect,
    "postgresql": postgresql.psycopg.dialect,
}
_STORES: dict[str, type[Store]] = {"sqlite": SqliteStore, "postgresql": PostgresStore}
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def open_store(url: str | os.PathLike[str]) -> Store:
    """Open (and on first use set up) the store at ``url``.

    ``url`` is ``sqlite:///path.db`` or a plain file path (SQLite), or
    ``postgresql://…`` / ``postgresql+psycopg://…`` (PostgreSQL through
    psycopg 3). The tables are created if missing; two processes opening the
    same new database at once is safe.

    Returns:
        A :class:`Store`; close it with :meth:`Store.close`.

    Raises:
        StoreUnavailable: the URL names no database hatp can use, or the
            database cannot be reached or set up; the message says what to fix.
    """
    parsed = _parse_url(url)
    return _STORES[parsed.get_backend_name()](parsed)


def _parse_url(url: str | os.PathLike[str]) -> URL:
    if not isinstance(url, str):
        return _sqlite_file_url(os.fspath(url))
    text = url.strip()
    if not text:
        raise _bad_url(url, "the URL is empty")
    if "://" not in text:
        return _sqlite_file_url(text)
    try:
        parsed = make_url(text)
    except (exc.ArgumentError, ValueError) as error:
        raise _bad_url(url, f"it is not a database URL ({error})") from error
    # Split by hand: get_driver_name() would load the dialect to find its default.
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise _bad_url(url, f"this build talks to SQLite through sqlite3, not {driver}")
        if parsed.query:
            # Driver options here (timeout, isolation_level, uri) would undo
            # the settings [STORE-DURABLE] and [STORE-ATOMIC] rest on.
            raise _bad_url(url, "SQLite URLs take no ?options: hatp sets its own")
        return _sqlite_file_url(parsed.database or "")
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise _bad_url(url, f"this build talks to PostgreSQL through psycopg 3, not {driver}")
        if not parsed.database:
            raise _bad_url(url, "the URL names no database")
        return parsed.set(drivername="postgresql+psycopg")
    raise _bad_url(url, f"hatp stores its state in SQLite or PostgreSQL, not {backend}")


def _sqlite_file_url(path: str) -> URL:
    if not path or path == ":memory:" or path.startswith("file:"):
        raise _bad_url(
            path or "sqlite://",
            "an in-memory or URI-named SQLite database does not outlive the process",
        )
    return URL.create("sqlite", database=os.path.abspath(path))


def _bad_url(url: object, why: str) -> StoreUnavailable:
    shown = _PASSWORD.sub(r"\1***@", str(url))
    return StoreUnavailable(f"cannot open a store at {shown!r}: {why}; {URL_HELP}", url=shown)


def _detail(error: Exception) -> str:
    """The driver's own words, on one line."""
    source = error.orig if isinstance(error, exc.DBAPIError) and error.orig else error
    lines = [line.strip() for line in str(source).splitlines() if line.strip()]
    text = " ".join(lines).rstrip(".") or type(source).__name__
    return text if len(text) <= 500 else text[:497] + "..."
