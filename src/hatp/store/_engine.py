"""Opening a store: one base class, one subclass per database, picked by URL.

Every failure of the database (cannot connect, refused a statement, locked
for too long, a statement or lock timeout) leaves this module as
:class:`~hatp.errors.StoreUnavailable`, with the driver's exception as its
``__cause__``, and is logged; nothing above the store layer sees a
SQLAlchemy or driver exception. Every wait is bounded (:class:`StoreLimits`),
and async code reaches the store through :meth:`Store.call`, off its event
loop.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import re
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar, cast

import psycopg
import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import QueuePool

from hatp.errors import StoreUnavailable
from hatp.store._driver import DriverSession
from hatp.store._migrate import SHIPPED, Migrations, SchemaMode, SchemaStatus, prepare_txn
from hatp.store._offloop import TIMED_OUT, Lane, StoreLimits, Workers, caller_gave_up

_T = TypeVar("_T")
_log = logging.getLogger(__name__)
# The advisory lock that serializes schema changes across processes ("hatp").
_SCHEMA_LOCK = 0x68617470
# PostgreSQL error codes a CREATE loses a race with: duplicate table, duplicate
# object, unique violation (on the catalog's type names).
_CREATE_RACE_CODES = frozenset({"42P07", "42710", "23505"})
# Driver errors, and the connection pool running dry.
_UNAVAILABLE = (exc.DBAPIError, exc.TimeoutError)
# The same, raised by the drivers themselves (on the driver_transaction path).
_DRIVER_ERRORS = (sqlite3.Error, psycopg.Error, *_UNAVAILABLE)

#: How many pooled connections the driver path keeps checked out while idle, for its
#: next transaction (see ``Store._raw``); the pool's overflow grows by as many.
_KEPT = 2
# SQLAlchemy's QueuePool defaults, which hatp's pools otherwise keep.
_POOL_SIZE = 5
_OVERFLOW = 10

URL_HELP = (
    "use sqlite:///path/to/hatp.db (or a plain file path) or "
    "postgresql+psycopg://user@host:port/database"
)


class Store:
    """A database holding hatp's durable state; open one with :func:`open_store`.

    ``url`` is the full URL (it may hold a password: do not log it; ``repr``
    hides it). ``dialect`` is ``"sqlite"`` or ``"postgresql"``. ``limits``
    bounds every wait it makes. ``schema`` is what opening found and did to the
    database's schema revision ([STORE-SCHEMA]).
    """

    dialect: ClassVar[str]

    def __init__(
        self,
        url: URL,
        limits: StoreLimits | None = None,
        *,
        migrations: Migrations = SHIPPED,
        mode: SchemaMode = SchemaMode.OPEN,
    ) -> None:
        self.url = url.render_as_string(hide_password=False)
        self.limits = limits or StoreLimits()
        self._shown = url.render_as_string(hide_password=True)
        self._opened = False
        self._workers = Workers(self.limits.workers, f"hatp-store-{self.dialect}")
        # Pooled connections the driver path keeps between its transactions (_raw).
        self._kept: list[Any] = []
        self._kept_lock = threading.Lock()
        self._closing = False
        self._engine = self._make_engine(url)
        try:
            self.schema = self._open_schema(migrations, mode)
        except BaseException:
            self._engine.dispose()
            raise
        self._opened = True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._shown}>"

    async def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run ``fn(*args, **kwargs)``, a function that uses this store, on one of the
        store's worker threads, off the event loop; return what it returns.

        This is how async code uses a store: the loop goes on serving while the
        database works, or does not answer. The wait is bounded by
        ``limits.call_seconds``, the wait for a free worker included. A call
        given up on does not start, and once started begins and commits no
        transaction (:meth:`transaction`).

        Raises:
            StoreUnavailable: no answer within ``limits.call_seconds`` (nothing
                was recorded, unless a commit was already on its way), or what
                ``fn`` raises.
        """
        return await self._call(None, fn, args, kwargs)

    def lane(self) -> Lane:
        """A lane of calls through :meth:`call_in`: they run one at a time, in the order
        they were made, as they would on the event loop; each waits at most
        ``limits.call_seconds`` from when it was made, its turn included."""
        return Lane()

    async def call_in(self, lane: Lane, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """:meth:`call`, after the calls made before it in ``lane`` (:meth:`lane`).

        Raises:
            StoreUnavailable: as :meth:`call`.
        """
        return await self._call(lane, fn, args, kwargs)

    async def _call(
        self,
        lane: Lane | None,
        fn: Callable[..., _T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> _T:
        seconds = self.limits.call_seconds
        answer = await self._workers.call(seconds, lane, fn, args, kwargs)
        if answer is TIMED_OUT:
            name = getattr(fn, "__qualname__", type(fn).__name__)
            _log.warning("store %s: %s gave no answer within %s s", self._shown, name, seconds)
            raise self._failed(f"no answer within {seconds:g} s", timeout=seconds)
        return cast(_T, answer)

    def ping(self) -> None:
        """Read one row of the log's table in a short transaction of its own that takes
        no write lock: that the database answers and holds hatp's tables.

        Raises:
            StoreUnavailable: it does not.
        """
        with self._raw() as conn:
            cursor = conn.cursor()
            try:
                cursor.execute(_PING)
                cursor.fetchall()
            finally:
                cursor.close()
            conn.rollback()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Run the ``with`` block as one database transaction.

        Commits when the block ends, rolls back when it raises. hatp errors
        and every other exception pass through unchanged after the rollback.

        Raises:
            StoreUnavailable: the database could not be reached, or refused a
                statement or the commit, or the async caller of :meth:`call`
                stopped waiting; nothing of the block was recorded.
        """
        self._refuse_if_given_up()
        try:
            with self._engine.begin() as conn:
                self._refuse_if_given_up()  # SQLite's BEGIN may have waited for the lock
                yield conn
                self._refuse_if_given_up()
        except _DRIVER_ERRORS as error:  # DriverSession.of and BEGIN run on the driver
            raise self._unavailable(error) from error

    @contextmanager
    def driver_transaction(self) -> Iterator[Any]:
        """Run the ``with`` block as one transaction on a pooled connection's own
        DB-API cursor, for the few statements on a hot path
        (:class:`~hatp.store._driver.DriverStatement`).

        The same guarantees as :meth:`transaction` (``BEGIN IMMEDIATE`` on
        SQLite, the same durability, commit at the end, rollback on an
        exception), without SQLAlchemy's per-statement execution machinery,
        which costs more than the insert and the commit themselves.

        Raises:
            StoreUnavailable: as :meth:`transaction`.
        """
        with self._driver_connection() as conn:
            cursor = conn.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    @contextmanager
    def driver_session(self) -> Iterator[DriverSession]:
        """Run the ``with`` block as one transaction whose Core statements run on the
        driver (:class:`~hatp.store._driver.DriverSession`): :meth:`driver_transaction`
        for code written with SQLAlchemy Core.

        Raises:
            StoreUnavailable: as :meth:`transaction`.
        """
        with self._driver_connection() as conn:
            yield DriverSession(conn, self.dialect)

    @contextmanager
    def read_session(self) -> Iterator[DriverSession]:
        """Run the ``with`` block as one read-only transaction whose statements run on
        the driver: what it reads is one consistent snapshot, and it takes no write
        lock (on SQLite a deferred ``BEGIN``: in WAL mode readers neither wait for a
        writer nor hold one up). It writes nothing: a statement that would is refused.

        Raises:
            StoreUnavailable: the database could not be reached, or refused a
                statement, or the async caller of :meth:`call` stopped waiting.
        """
        with self._driver_connection(read_only=True) as conn:
            yield DriverSession(conn, self.dialect, read_only=True)

    @contextmanager
    def _driver_connection(self, *, read_only: bool = False) -> Iterator[Any]:
        with self._raw() as conn:
            try:
                self._driver_begin(conn, read_only)
                self._refuse_if_given_up()
                yield conn
                self._refuse_if_given_up()
                if read_only:
                    conn.rollback()  # nothing to flush: it wrote nothing
                else:
                    conn.commit()
            except BaseException:
                with contextlib.suppress(*_DRIVER_ERRORS):
                    conn.rollback()
                raise

    @contextmanager
    def _raw(self) -> Iterator[Any]:
        """A pooled connection's own DB-API connection; a driver error inside the block
        leaves it as :class:`StoreUnavailable`.

        A block that ends normally has ended its transaction, and its connection is
        kept for the next block (up to ``_KEPT`` of them, idle, still checked out of
        the pool): on SQLite the pool's checkout and check-in cost about 25-35 µs of
        the 190 µs a gated call's claim takes (docs/design-notes.md). A block
        that raised gives its connection back to the pool, which resets it, as
        before. A kept connection the server has dropped meanwhile is not used
        (:meth:`_reusable`): the pool replaces it.
        """
        self._refuse_if_given_up()
        conn = self._take()
        done = False
        try:
            yield conn
            done = True
        except _DRIVER_ERRORS as error:
            raise self._unavailable(error) from error
        finally:
            if done:
                self._keep(conn)
            else:
                conn.close()

    def _take(self) -> Any:
        """A kept connection that is still good, else one checked out of the pool."""
        while True:
            with self._kept_lock:
                conn = self._kept.pop() if self._kept else None
            if conn is None:
                break
            if self._reusable(conn.dbapi_connection):
                return conn
            conn.invalidate()  # closed now; the pool makes a new one in its place
            conn.close()
        try:
            return self._engine.raw_connection()
        except _UNAVAILABLE as error:
            raise self._unavailable(error) from error

    def _keep(self, conn: Any) -> None:
        with self._kept_lock:
            if not self._closing and len(self._kept) < _KEPT:
                self._kept.append(conn)
                return
        conn.close()

    def _reusable(self, dbapi_connection: Any) -> bool:
        """Whether a connection kept idle may run the next transaction."""
        return True

    def close(self) -> None:
        """Let the worker threads end (waiting up to ``limits.call_seconds`` for a call
        still running, whose caller may have given up on it), then close every pooled
        connection. The store must not be used afterwards."""
        self._workers.close(self.limits.call_seconds)
        with self._kept_lock:
            self._closing = True
            kept, self._kept = self._kept, []
        for conn in kept:
            conn.close()
        self._engine.dispose()

    def _advice(self) -> str:
        """What to check when the database fails (the end of a StoreUnavailable message)."""
        raise NotImplementedError

    def _make_engine(self, url: URL) -> Engine:
        raise NotImplementedError

    def _driver_begin(self, conn: Any, read_only: bool) -> None:
        """Open a driver transaction on the DB-API connection ``conn`` (psycopg opens
        one by itself at the first statement)."""

    def _lock_schema(self, conn: Connection) -> None:
        """Serialize schema changes with other processes (SQLite: BEGIN IMMEDIATE did)."""

    def _open_schema(self, migrations: Migrations, mode: SchemaMode) -> SchemaStatus:
        # The catalog is read once here, never per transaction; looking and changing
        # are one transaction under the lock, so two openers cannot both upgrade.
        try:
            with self._engine.connect() as conn:
                self._before_schema(conn)
                try:
                    with conn.begin():
                        self._lock_schema(conn)
                        return prepare_txn(conn, migrations, mode, self._shown)
                finally:
                    self._after_schema(conn)
        except _DRIVER_ERRORS as error:  # the pragmas go through the driver itself
            raise self._unavailable(error) from error

    def _before_schema(self, conn: Connection) -> None:
        """Set the connection up for schema changes, outside any transaction."""

    def _after_schema(self, conn: Connection) -> None:
        """Undo :meth:`_before_schema` before the connection goes back to the pool."""

    def _refuse_if_given_up(self) -> None:
        if caller_gave_up():
            raise self._failed("its caller stopped waiting for it")

    def _unavailable(self, error: Exception) -> StoreUnavailable:
        detail = _detail(error)
        _log.warning("store %s: %s", self._shown, detail)
        return self._failed(detail)

    def _failed(self, detail: str, **data: Any) -> StoreUnavailable:
        if self._opened:
            what = "a store transaction failed, so nothing of it was recorded"
        else:
            what = "cannot open the store"
        return StoreUnavailable(
            f"{what} at {self._shown}: {detail}. {self._advice()}",
            url=self._shown,
            dialect=self.dialect,
            detail=detail,
            **data,
        )


class SqliteStore(Store):
    """A store in one SQLite file: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``.

    Its connections are pooled and used from any thread (the worker threads of
    :meth:`Store.call` among them), one thread at a time: the pool hands a
    connection to one checkout at a time, so sqlite3's same-thread check is off.
    """

    dialect = "sqlite"

    def _advice(self) -> str:
        return (
            "Check that the directory exists and this process may write there, that the "
            "file is an SQLite database, and that no other process holds it locked for "
            f"{self.limits.busy_seconds:g} seconds or more"
        )

    def _make_engine(self, url: URL) -> Engine:
        # No pre-ping: a connection to a file does not go stale the way a server's does.
        busy = self.limits.busy_seconds
        engine = sa.create_engine(
            url,
            poolclass=QueuePool,
            pool_size=_POOL_SIZE,
            max_overflow=_OVERFLOW + _KEPT,
            pool_timeout=self.limits.checkout_seconds,
            connect_args={"timeout": busy, "check_same_thread": False},
        )
        event.listen(engine, "connect", functools.partial(_sqlite_on_connect, round(busy * 1000)))
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine

    def _driver_begin(self, conn: Any, read_only: bool) -> None:
        # A writer takes the lock at once, as _sqlite_on_begin does for Core transactions.
        conn.execute(_BEGIN_DEFERRED if read_only else _BEGIN_IMMEDIATE)

    def _before_schema(self, conn: Connection) -> None:
        # A revision that SQLite cannot ALTER copies the table and drops the old one;
        # with foreign keys on, that drop would cascade (hatp_txn's drop deletes every
        # record event). The pragma is ignored inside a transaction: set it before.
        _pragma(conn, "PRAGMA foreign_keys = OFF")

    def _after_schema(self, conn: Connection) -> None:
        try:
            _pragma(conn, "PRAGMA foreign_keys = ON")
        except sqlite3.Error:
            _log.warning("store %s: foreign keys not restored: connection dropped", self._shown)
            conn.invalidate()  # never pooled without them
            raise


def _pragma(conn: Connection, statement: str) -> None:
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def _sqlite_on_connect(busy_ms: int, dbapi_connection: Any, _record: Any) -> None:
    # Take BEGIN away from the sqlite3 module (it would issue a deferred BEGIN
    # only before writes); _sqlite_on_begin issues our own.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another opener may hold.
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
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
_BEGIN_DEFERRED = "BEGIN"


def _sqlite_on_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock at once, so a transaction that reads then
    # writes cannot fail half-way on a lock upgrade; busy_timeout queues it.
    # Issued on the driver: through SQLAlchemy it would cost a statement's
    # execution machinery in every transaction. Store.transaction maps a
    # driver error to StoreUnavailable as it does SQLAlchemy's.
    conn.connection.dbapi_connection.execute(_BEGIN_IMMEDIATE)  # type: ignore[union-attr]


class PostgresStore(Store):
    """A store in a PostgreSQL database, through psycopg 3, ``synchronous_commit=on``,
    every session's statements, lock waits and idle transactions bounded
    (:class:`StoreLimits`), and each pooled connection checked before use."""

    dialect = "postgresql"

    def _advice(self) -> str:
        return (
            "Check that the server is running and reachable from here, and that the URL "
            "(postgresql+psycopg://user@host:port/database) names an existing user and "
            "database"
        )

    def _make_engine(self, url: URL) -> Engine:
        # Set at connection start-up, so no session can commit without waiting for its
        # WAL flush, and none waits without end on a statement, a lock or an idle peer.
        limits = self.limits
        session = (
            _SYNC_COMMIT,
            f"-c statement_timeout={_ms(limits.statement_seconds)}",
            f"-c lock_timeout={_ms(limits.lock_seconds)}",
            f"-c idle_in_transaction_session_timeout={_ms(limits.idle_in_transaction_seconds)}",
        )
        options = " ".join(o for o in (_query_text(url.query, "options"), *session) if o)
        connect_args: dict[str, Any] = {"options": options}
        if "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = max(1, math.ceil(limits.connect_seconds))
        engine = sa.create_engine(
            url,
            connect_args=connect_args,
            pool_size=_POOL_SIZE,
            max_overflow=_OVERFLOW + _KEPT,
            pool_timeout=limits.checkout_seconds,
        )
        # A connection the server closed (a restart, an idle-in-transaction timeout,
        # pg_terminate_backend) is replaced at checkout instead of failing the
        # transaction that drew it [STORE-PRE-PING].
        event.listen(engine, "checkout", _replace_if_dropped)
        return engine

    def _reusable(self, dbapi_connection: Any) -> bool:
        return _dropped(dbapi_connection) is None

    def _lock_schema(self, conn: Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK)))

    def _open_schema(self, migrations: Migrations, mode: SchemaMode) -> SchemaStatus:
        try:
            return super()._open_schema(migrations, mode)
        except StoreUnavailable as error:
            # Every hatp process takes the advisory lock, but anything creating
            # the tables without it (a hand-run script) can still win the race;
            # the loser's CREATE fails on the name just taken, and a second
            # look finds the tables there.
            cause = error.__cause__
            code = getattr(getattr(cause, "orig", None), "sqlstate", None)
            if code not in _CREATE_RACE_CODES:
                raise
            return super()._open_schema(migrations, mode)


def _replace_if_dropped(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Have the pool replace a connection leaving it that the server dropped.

    Hand-written in place of SQLAlchemy's ``pool_pre_ping``, which asks the server at
    every checkout: a round trip costing as much as the one insert that claims a gated
    call's approval. A pooled connection is idle, so the server has nothing to say
    on it unless it is ending it (a terminated backend is sent an error, then its
    socket is closed). So only a connection psycopg knows is closed, or whose socket
    has something to read, is looked at: pinged, and replaced if the ping fails.

    Raises:
        sqlalchemy.exc.DisconnectionError: the connection is gone; the pool drops it
            and checks out another.
    """
    dropped = _dropped(dbapi_connection)
    if dropped is not None:
        raise exc.DisconnectionError(dropped)


def _dropped(dbapi_connection: Any) -> str | None:
    """Why the server dropped this idle psycopg connection, or ``None`` if it is live
    (see :func:`_replace_if_dropped`); logged."""
    if dbapi_connection.closed:
        why = "the server closed the connection"
    elif not _has_input(dbapi_connection.fileno()):
        return None  # nothing sent: the connection is as it was left
    else:
        try:
            dbapi_connection.execute(_PING_SQL)
            dbapi_connection.rollback()
            return None  # it answered: still live
        except psycopg.Error as error:
            why = str(error)
    _log.info("a pooled PostgreSQL connection was dropped by the server; replacing it")
    return why


def _has_input(fd: int) -> bool:
    """Whether the socket ``fd`` has something to read (or was closed), without waiting."""
    if hasattr(select, "poll"):  # any descriptor number, unlike select()
        ready = select.poll()
        ready.register(fd, select.POLLIN)
        return bool(ready.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)  # where there is no poll (Windows)
    return bool(readable)


_PING_SQL = "SELECT 1"
_SYNC_COMMIT = "-c synchronous_commit=on"
# What Store.ping reads: one row at most, no lock a writer waits for.
_PING = "SELECT txn_id FROM hatp_txn LIMIT 1"


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


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


_STORES: dict[str, type[Store]] = {"sqlite": SqliteStore, "postgresql": PostgresStore}
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def open_store(
    url: str | os.PathLike[str],
    *,
    limits: StoreLimits | None = None,
    migrations: Migrations = SHIPPED,
) -> Store:
    """Open (and on first use set up) the store at ``url``.

    ``url`` is ``sqlite:///path.db`` or a plain file path (SQLite), or
    ``postgresql://…`` / ``postgresql+psycopg://…`` (PostgreSQL through
    psycopg 3). A database with none of hatp's tables is brought to the newest
    schema revision; one made before revisions began is stamped with the
    baseline; two processes opening the same new database at once is safe
    ([STORE-SCHEMA]). ``limits`` bounds every wait the store makes (default
    :class:`StoreLimits`). ``migrations``: the revisions known (default hatp's own).

    Returns:
        A :class:`Store`; close it with :meth:`Store.close`.

    Raises:
        StoreUnavailable: the URL names no database hatp can use, or the
            database cannot be reached or set up; the message says what to fix.
        SchemaMismatch: the database is at an older revision, or some of its
            tables are missing (run ``hatp db upgrade``), or at a revision this
            hatp does not know (upgrade hatp), or it holds a table of hatp's name
            that is not hatp's.
    """
    parsed = _parse_url(url)
    return _STORES[parsed.get_backend_name()](parsed, limits, migrations=migrations)


def upgrade_store(
    url: str | os.PathLike[str],
    *,
    limits: StoreLimits | None = None,
    migrations: Migrations = SHIPPED,
) -> SchemaStatus:
    """Bring the database at ``url`` to the newest revision of ``migrations``, in one
    transaction under the schema lock (``hatp db upgrade``): a fresh database is
    created, one made before revisions began stamped (its missing tables created),
    one behind upgraded; one at the newest is left as it is.

    Returns:
        What was found, and the revision before and after.

    Raises:
        StoreUnavailable: as :func:`open_store`; nothing was changed.
        SchemaMismatch: the database is at a revision this hatp does not know, or
            holds a table of hatp's name that is not hatp's; nothing was changed.
    """
    return _schema(url, limits, migrations, SchemaMode.UPGRADE)


def schema_status(
    url: str | os.PathLike[str],
    *,
    limits: StoreLimits | None = None,
    migrations: Migrations = SHIPPED,
) -> SchemaStatus:
    """Report the schema revision of the database at ``url`` and how it stands against
    ``migrations``, changing nothing (``hatp db current``).

    Raises:
        StoreUnavailable: as :func:`open_store`.
        SchemaMismatch: it holds a table of hatp's name that is not hatp's.
    """
    return _schema(url, limits, migrations, SchemaMode.LOOK)


def _schema(
    url: str | os.PathLike[str],
    limits: StoreLimits | None,
    migrations: Migrations,
    mode: SchemaMode,
) -> SchemaStatus:
    parsed = _parse_url(url)
    store = _STORES[parsed.get_backend_name()](parsed, limits, migrations=migrations, mode=mode)
    store.close()
    return store.schema


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
