"""A system of record's own data, as leases see it: resources with a JSON state.

A lease digests a resource's state, and a recovery writes one back, so the
system of record says how to read and write a resource inside its own
database transaction (:class:`Resources`). :class:`TableResources` does it
for rows of one of its tables: the resource ``"<kind>/<key>"`` is the row
whose key column is ``key``, and its state the named columns, as JSON
scalars (never a float, so digests are exact).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import Connection

from hatp.errors import MutationInvalid, ResourceUnknown

__all__ = ["Resources", "State", "TableResources"]

#: A resource's state: a JSON object.
State = dict[str, Any]

# A resource id as a lease carries it (printable ASCII, no spaces), and an integer key
# as resource() writes it: no leading zeros, no "-0", within 64 bits.
_RESOURCE_ID = re.compile(r"[!-~]{1,512}")
_INTEGER_KEY = re.compile(r"0|-?[1-9][0-9]{0,18}")


class Resources(Protocol):
    """How a system of record reads and writes its resources in its own transaction."""

    def read_txn(self, conn: Connection, resource: str, *, lock: bool) -> State:
        """Return the resource's state now; with ``lock``, hold it until ``conn`` ends.

        Raises:
            ResourceUnknown: there is no such resource.
        """
        ...

    def write_txn(self, conn: Connection, resource: str, state: State) -> None:
        """Replace the resource's state with ``state``, in ``conn``'s transaction.

        Raises:
            MutationInvalid: ``state`` is not a state this resource can hold.
        """
        ...


@dataclass(frozen=True)
class TableResources:
    """Rows of ``table`` as resources ``"<kind>/<key>"``: the row whose ``key`` column is
    the key, and its state the ``columns`` (the key column may be among them, unchanged).
    Each row has one id, as :meth:`resource` writes it (an integer key in decimal, with
    no leading zeros); any other spelling is unknown.

    Raises:
        ValueError: ``kind`` is empty or holds a ``/``, ``key`` is not a unique
            column of the table, or a column is not in it.
    """

    kind: str
    table: sa.Table
    key: str
    columns: Sequence[str]

    def __post_init__(self) -> None:
        if not self.kind or "/" in self.kind:
            raise ValueError(f"resource kind {self.kind!r} is empty or holds a '/'")
        column = self.table.c.get(self.key)
        if column is None or not (column.unique or column.primary_key):
            raise ValueError(f"{self.table.name}.{self.key} is not a unique column")
        object.__setattr__(self, "columns", tuple(self.columns))
        missing = [c for c in self.columns if c not in self.table.c]
        if not self.columns or missing or len(set(self.columns)) != len(self.columns):
            raise ValueError(f"name the columns of {self.table.name} a state holds, each once")

    def resource(self, key: object) -> str:
        """The resource id of the row whose key is ``key``."""
        return f"{self.kind}/{key}"

    def read_txn(self, conn: Connection, resource: str, *, lock: bool) -> State:
        """The row's columns, read ``FOR UPDATE`` on PostgreSQL with ``lock``.

        Raises:
            ResourceUnknown: the id is not ``"<kind>/<key>"`` of a row of the table.
            TypeError: a column holds a value with no exact JSON form (a float).
        """
        query = sa.select(*(self.table.c[c] for c in self.columns)).where(
            self.table.c[self.key] == self._key_of(resource)
        )
        if lock and conn.dialect.name == "postgresql":
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise self._unknown(resource)
        return {c: _json_value(v) for c, v in zip(self.columns, row, strict=True)}

    def write_txn(self, conn: Connection, resource: str, state: State) -> None:
        """Write ``state``'s columns into the row.

        Raises:
            ResourceUnknown: there is no such row.
            MutationInvalid: ``state`` does not name exactly the columns, or
                changes the key.
        """
        key = self._key_of(resource)
        if set(state) != set(self.columns):
            raise MutationInvalid(
                f"a state of {self.kind} names exactly {sorted(self.columns)}, not {sorted(state)}",
                resource=resource,
            )
        if self.key in state and state[self.key] != key:
            raise MutationInvalid(
                f"a mutation never changes the key of {resource}", resource=resource
            )
        done = conn.execute(
            sa.update(self.table).where(self.table.c[self.key] == key).values(**state)
        )
        if done.rowcount != 1:
            raise self._unknown(resource)

    def _key_of(self, resource: str) -> Any:
        # One row has one resource id (the one resource() writes): "ticket/04711" naming
        # row 4711 too would give it a second epoch, and leases fenced on either would
        # not fence the other.
        kind, slash, text = resource.partition("/")
        if kind != self.kind or not slash or not _RESOURCE_ID.fullmatch(resource):
            raise self._unknown(resource)
        try:
            python_type = self.table.c[self.key].type.python_type
        except NotImplementedError:
            return text
        if python_type is int:
            if not _INTEGER_KEY.fullmatch(text) or not -(2**63) <= int(text) < 2**63:
                raise self._unknown(resource)
            return int(text)
        return text

    def _unknown(self, resource: str) -> ResourceUnknown:
        return ResourceUnknown(
            f"no resource {resource!r} here: resources are {self.kind}/<{self.key}> of rows of "
            f"{self.table.name}",
            resource=resource,
        )


def _json_value(value: object) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(
        f"a resource column holds a {type(value).__name__}; states hold int, str, bool, "
        "None or Decimal (as text), never a float"
    )
