"""Hot-path statements run on the DB-API driver, below SQLAlchemy's execution machinery.

SQLAlchemy Core writes every statement hatp runs, and the schema is one
:class:`~sqlalchemy.MetaData` for both databases. For the few statements on
every transaction's path (the decision log, the gateway's asks, a
participant's branch row), SQLAlchemy's per-execution work (an execution
context, parameter processing, a result object, events) costs more than the
driver's own execution; so those statements are compiled once per dialect and
run on the connection's DB-API cursor (:class:`DriverSession`), as the gate's
single-use claim and the approval-bound writes already were. Nothing about
the transaction changes: the same connection, the same ``BEGIN``, the same
commit. Written by hand because SQLAlchemy offers no cheaper way to run a
compiled statement repeatedly (its compiled cache still builds the rest per
execution).

Only statements over plain columns (text and integers, as every hatp table
has) run here: their values need no conversion on the way in or out.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import psycopg
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = [
    "INTEGRITY_ERRORS",
    "DriverResult",
    "DriverSession",
    "DriverStatement",
    "compiled",
    "run_in",
]

#: A unique or foreign-key violation, from either driver or from SQLAlchemy.
INTEGRITY_ERRORS = (sqlite3.IntegrityError, psycopg.IntegrityError, exc.IntegrityError)


class DriverStatement:
    """A Core statement compiled once for one dialect, to run on a driver's cursor.

    SQLAlchemy writes the SQL; the driver runs it. Bind parameters are passed
    by name (:meth:`params` puts them in the driver's order where it takes
    them by position, and adds the values the statement itself carries, such
    as the ``1`` of ``fence + 1``). ``keys``: for an ``INSERT`` or an
    ``UPDATE`` without ``.values()``, the columns it writes.

    Raises:
        ValueError: the statement has an expanding (``IN``) parameter, which
            needs compiling per execution.
    """

    def __init__(
        self, dialect: str, statement: sa.ClauseElement, keys: Iterable[str] | None = None
    ) -> None:
        compiled = cast(
            SQLCompiler,
            statement.compile(
                dialect=_DIALECTS[dialect](),
                column_keys=None if keys is None else list(keys),
            ),
        )
        if any(bind.expanding for bind in compiled.binds.values()):
            raise ValueError("a statement with an IN list cannot be compiled once")
        self.sql = compiled.string
        self._order = tuple(compiled.positiontup or ()) if compiled.positional else None
        self._fixed = {
            name: bind.value
            for name, bind in compiled.binds.items()
            if not bind.required and bind.callable is None
        }
        self.row_type: Callable[..., tuple[Any, ...]] | None = None  # set at first result
        #: The driver's type code of each column it returns (``cursor.description``), set
        #: by :func:`run_in` at first result.
        self.type_codes: tuple[Any, ...] | None = None

    def params(self, values: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        """Return ``values`` as the driver takes them for this statement."""
        if self._fixed:
            values = {**self._fixed, **values}
        if self._order is None:
            return values
        return [values[name] for name in self._order]


# Bounded: a statement built per call (a search with a limit, a time) compiles each
# time and must not pile up; the few built at import stay.
@functools.lru_cache(maxsize=512)
def compiled(
    dialect: str, statement: sa.ClauseElement, keys: frozenset[str] | None = None
) -> DriverStatement:
    """``statement`` compiled for ``dialect``, once for a statement built at import."""
    return DriverStatement(dialect, statement, keys)


class DriverResult:
    """The rows a statement returned, read in full as it ran (a statement with
    ``RETURNING`` must be read to its end before its transaction commits)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def first(self) -> Any | None:
        """The first row (its columns by name and by position), or ``None``."""
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        """The only row.

        Raises:
            LookupError: there is not exactly one.
        """
        if len(self._rows) != 1:
            raise LookupError(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def all(self) -> list[Any]:
        """Every row."""
        return self._rows

    def scalar(self) -> Any | None:
        """The first column of the first row, or ``None`` when there is no row."""
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self._rows]


class DriverSession:
    """The statements of one open transaction, run on its DB-API connection.

    Open one with :meth:`hatp.store.Store.driver_session` (a transaction of its
    own) or :meth:`of` (inside a :meth:`~hatp.store.Store.transaction`, beside
    the Core statements of an operation). ``dialect`` is the store's.
    """

    __slots__ = ("_connection", "_read_only", "dialect")

    def __init__(self, connection: Any, dialect: str, *, read_only: bool = False) -> None:
        self._connection = connection
        self._read_only = read_only
        self.dialect = dialect

    @classmethod
    def of(cls, conn: sa.Connection) -> DriverSession:
        """The transaction ``conn`` has open, for statements run on its driver."""
        return cls(conn.connection.dbapi_connection, conn.dialect.name)

    def execute(
        self,
        statement: sa.ClauseElement,
        params: Mapping[str, Any] | None = None,
        *,
        keys: Iterable[str] | None = None,
    ) -> DriverResult:
        """Run ``statement`` with ``params``; its rows, if it returns any.

        ``keys``: for an ``INSERT`` or an ``UPDATE`` without ``.values()``, the
        columns it writes (default: every parameter given).
        """
        params = params or {}
        writes = self._writable(statement)
        written = frozenset(params if keys is None else keys) if writes else None
        stmt = compiled(self.dialect, statement, written)
        cursor = self._connection.cursor()
        try:
            cursor.execute(stmt.sql, stmt.params(params))
            if cursor.description is None:
                return DriverResult([])
            if stmt.row_type is None:
                names = [column[0] for column in cursor.description]
                stmt.row_type = namedtuple("Row", names, rename=True)  # type: ignore[misc]
            make = stmt.row_type
            return DriverResult([make(*row) for row in cursor.fetchall()])
        finally:
            cursor.close()

    def executemany(self, statement: sa.ClauseElement, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run ``statement`` (an ``INSERT``) once per row; every row names the same columns."""
        self._writable(statement)
        if not rows:
            return
        stmt = compiled(self.dialect, statement, frozenset(rows[0]))
        cursor = self._connection.cursor()
        try:
            cursor.executemany(stmt.sql, [stmt.params(row) for row in rows])
        finally:
            cursor.close()

    def _writable(self, statement: sa.ClauseElement) -> bool:
        """Whether ``statement`` writes; refused in a read-only session if it does."""
        writes = isinstance(statement, sa.Insert | sa.Update | sa.Delete)
        if writes and self._read_only:
            raise TypeError("a read-only session runs no INSERT, UPDATE or DELETE")
        return writes


def run_in(
    conn: sa.Connection, statement: DriverStatement, values: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """Run ``statement`` on the driver's cursor of ``conn``, in the transaction it has open.

    Returns the rows it returns (none for a statement that returns none), as the driver
    gives them. A driver error leaves as SQLAlchemy's ``DBAPIError`` subclass for it, the
    driver's own exception as ``orig``, exactly as if ``conn.execute`` had run it.
    """
    base = conn.dialect.loaded_dbapi.Error
    cursor = conn.connection.cursor()
    try:
        cursor.execute(statement.sql, statement.params(values))
        if cursor.description is None:
            return []
        if statement.type_codes is None:
            statement.type_codes = tuple(column[1] for column in cursor.description)
        return list(cursor.fetchall())
    except base as error:
        raise sa.exc.DBAPIError.instance(statement.sql, dict(values), error, base) from error
    finally:
        cursor.close()


_DIALECTS: dict[str, Callable[[], sa.Dialect]] = {
    "sqlite": sqlite.pysqlite.dialect,
    "postgresql": postgresql.psycopg.dialect,
}
