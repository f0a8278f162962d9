"""Records on the allowlist: named sets of rows, and reading them as JSON.

A :class:`RecordSet` puts rows of one table on the allowlist: the set's
``name``, the ``table``, the ``key`` column that names a row and the
``columns`` a snapshot holds. One row is the record ``"<set>/<key>"``
(e.g. ``"inventory/SKU-1"``). :func:`read_records` reads records' live
columns, as a snapshot and a postcondition hold them: JSON values only
(``int``, ``str``, ``bool``, ``None``; a ``Decimal`` as its text), never a
float, so that comparing and digesting them is exact.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from hatp.store._driver import DriverStatement, run_in

__all__ = [
    "RecordName",
    "RecordSet",
    "is_state_value",
    "json_value",
    "read_records",
    "same_state",
    "split_record",
]

#: A record's name: ``"<set>/<key>"``.
RecordName = str

_SET_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_INT_KEY = re.compile(r"-?(0|[1-9][0-9]{0,18})")
_MAX_KEY = 256


@dataclass(frozen=True)
class RecordSet:
    """A named set of records on the allowlist: rows of ``table`` keyed by ``key``.

    ``columns`` are the columns a snapshot holds for each record, in the order
    a diff shows them (the key column need not be among them: it is in the
    record's name).

    Raises:
        ValueError: the name is not ``[a-z][a-z0-9_]*``, ``key`` is not a
            unique column of the table, or a column is not in it.
    """

    name: str
    table: sa.Table
    key: str
    columns: Sequence[str]

    def __post_init__(self) -> None:
        if not _SET_NAME.fullmatch(self.name):
            raise ValueError(f"record set name {self.name!r} is not [a-z][a-z0-9_]* (64 at most)")
        if self.key not in self.table.c:
            raise ValueError(f"record set {self.name}: {self.table.name} has no column {self.key}")
        if not self.table.c[self.key].unique and not self.table.c[self.key].primary_key:
            raise ValueError(f"record set {self.name}: key column {self.key} is not unique")
        object.__setattr__(self, "columns", tuple(self.columns))
        if not self.columns or len(set(self.columns)) != len(self.columns):
            raise ValueError(f"record set {self.name}: name its columns, each once")
        for column in self.columns:
            if column not in self.table.c:
                raise ValueError(
                    f"record set {self.name}: {self.table.name} has no column {column}"
                )

    def record(self, key: object) -> RecordName:
        """The name of the record whose key is ``key``."""
        return f"{self.name}/{key}"

    def key_value(self, text: str) -> Any:
        """The key column's value for the key text of a record name.

        Raises:
            ValueError: the text is not a key of this set (empty, too long, or
                not an integer for an integer key).
        """
        if not text or len(text) > _MAX_KEY:
            raise ValueError(f"record key {text!r} is empty or longer than {_MAX_KEY}")
        if _python_type(self.table.c[self.key]) is int:
            if not _INT_KEY.fullmatch(text):
                raise ValueError(f"record key {text!r} of {self.name} is not an integer")
            return int(text)
        return text


def split_record(name: RecordName) -> tuple[str, str]:
    """Split ``"<set>/<key>"`` into the set's name and the key text.

    Raises:
        ValueError: there is no ``/``, or either side is empty.
    """
    set_name, slash, key = name.partition("/")
    if not slash or not set_name or not key:
        raise ValueError(f"record name {name!r} is not <set>/<key>")
    return set_name, key


def json_value(value: object) -> Any:
    """A column value as a snapshot holds it: JSON scalars, ``Decimal`` as text.

    Raises:
        TypeError: a float, or a type with no exact JSON form.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(
        f"a record column holds a {type(value).__name__}; snapshots hold int, str, bool, "
        "None or Decimal (as text), never a float"
    )


def is_state_value(columns: object) -> bool:
    """Whether ``columns`` is a record's state: ``None``, or ``{str: int|str|bool|None}``."""
    if columns is None:
        return True
    return isinstance(columns, dict) and all(
        isinstance(k, str) and (v is None or type(v) in (bool, int, str))
        for k, v in columns.items()
    )


def same_state(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two states (``{record: columns | None}``) are equal, types included.

    Plain ``==`` would take ``True`` for ``1`` and ``1`` for ``1.0``; a
    snapshot or postcondition must match the records exactly.
    """
    same: bool = _strict(a) == _strict(b)
    return same


def _strict(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return (type(value).__name__, value)


def read_records(
    conn: sa.Connection,
    sets: Mapping[str, RecordSet],
    names: Iterable[RecordName],
    *,
    lock: bool,
) -> dict[RecordName, dict[str, Any] | None]:
    """Read the live columns of each named record, in the caller's transaction.

    Returns ``{name: {column: value}}``, ``None`` for a record with no row,
    in the order of the sorted names. With ``lock`` the rows are read ``FOR
    UPDATE`` on PostgreSQL, in key order (SQLite's ``BEGIN IMMEDIATE``
    already holds the database's write lock).

    Raises:
        ValueError: a name is malformed or names a set not in ``sets``.
        TypeError: a column holds a value with no exact JSON form.
    """
    wanted: dict[str, dict[Any, RecordName]] = {}
    for name in sorted(set(names)):
        set_name, key = split_record(name)
        if set_name not in sets:
            raise ValueError(f"record {name!r} is in no record set on the allowlist")
        wanted.setdefault(set_name, {})[sets[set_name].key_value(key)] = name
    found: dict[RecordName, dict[str, Any] | None] = {}
    for set_name in sorted(wanted):
        found.update(_read_set(conn, sets[set_name], wanted[set_name], lock=lock))
    return {name: found[name] for name in sorted(found)}


def _read_set(
    conn: sa.Connection, record_set: RecordSet, keys: Mapping[Any, RecordName], *, lock: bool
) -> dict[RecordName, dict[str, Any] | None]:
    reading = _reading(
        record_set, conn.dialect, len(keys), lock and conn.dialect.name == "postgresql"
    )
    rows: dict[RecordName, dict[str, Any] | None] = dict.fromkeys(keys.values())
    for row in reading.rows(run_in(conn, reading.statement, reading.params(keys))):
        rows[keys[row[0]]] = {c: json_value(row[i]) for c, i in reading.places}
    return rows


class _Reading:
    """The statement reading ``count`` records of a set by key, compiled once, and how
    its values pass between the driver and Python as SQLAlchemy would pass them (the
    types' bind and result processors: a SQLite ``Boolean`` read as ``bool``, a
    ``Numeric`` as ``Decimal``, a type decorator's own conversion)."""

    def __init__(
        self, record_set: RecordSet, dialect: sa.Dialect, count: int, for_update: bool
    ) -> None:
        table = record_set.table
        others = [c for c in record_set.columns if c != record_set.key]
        key = table.c[record_set.key]
        selected = [key, *(table.c[c] for c in others)]
        names = [f"key_{n}" for n in range(count)]
        query = (
            sa.select(*selected)
            .where(key.in_([sa.bindparam(name, type_=key.type) for name in names]))
            .order_by(key)
        )
        if for_update:
            query = query.with_for_update()
        self.statement = DriverStatement(dialect.name, query)
        self._names = names
        self._bind = key.type.dialect_impl(dialect).bind_processor(dialect)
        self._types = [c.type.dialect_impl(dialect) for c in selected]
        self._dialect = dialect
        self._results: list[Callable[[Any], Any] | None] | None = None  # at the first rows
        self.places = tuple(
            (c, 0 if c == record_set.key else 1 + others.index(c)) for c in record_set.columns
        )

    def params(self, keys: Iterable[Any]) -> dict[str, Any]:
        bind = self._bind
        return {
            name: value if bind is None else bind(value)
            for name, value in zip(self._names, keys, strict=True)
        }

    def rows(self, found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The driver's rows with each value as SQLAlchemy would have returned it."""
        if not found:
            return found
        if self._results is None:
            # Some processors look at the driver's type of the column (psycopg's
            # numeric or float), known once the statement has returned rows.
            codes = self.statement.type_codes or (None,) * len(self._types)
            self._results = [
                kind.result_processor(self._dialect, code)
                for kind, code in zip(self._types, codes, strict=True)
            ]
        if not any(self._results):
            return found
        converts = self._results
        return [
            tuple(v if f is None else f(v) for f, v in zip(converts, row, strict=True))
            for row in found
        ]


@functools.lru_cache(maxsize=256)
def _reading(record_set: RecordSet, dialect: sa.Dialect, count: int, for_update: bool) -> _Reading:
    """How to read ``count`` records of a set, built once: a statement built per read costs
    SQLAlchemy more than running it (and runs on the driver, below SQLAlchemy's execution
    machinery, as the writes' bookkeeping does)."""
    return _Reading(record_set, dialect, count, for_update)


def _python_type(column: sa.Column[Any]) -> type | None:
    try:
        kind: type = column.type.python_type
    except NotImplementedError:
        return None
    return kind
