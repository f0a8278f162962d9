"""A participant's durable state for each branch it was asked about.

The participant SDK locks a branch's row, does the operation's own writes
and saves the row, all in one transaction it opens with
:meth:`Store.transaction`; the methods that take a ``conn`` run inside that
transaction and never commit ([STORE-ATOMIC]).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hatp.model.plan import Tier
from hatp.model.txn import BranchState
from hatp.store._driver import DriverSession
from hatp.store._engine import Store, dialect_insert, upsert
from hatp.store._schema import (
    branch,
    dump_json,
    dump_optional_json,
    from_ms,
    load_json,
    load_optional_json,
    to_ms,
)


@dataclass(frozen=True)
class BranchRow:
    """One branch as a participant holds it; change it with ``dataclasses.replace``.

    ``fence`` is the highest fencing token seen for the branch; ``flags``
    the notes about refused requests that contradicted its outcome.
    """

    participant_id: str
    txn_id: str
    branch_id: str
    state: BranchState = BranchState.UNKNOWN
    tier: Tier | None = None
    plan_digest: str | None = None
    fence: int = 0
    plan: dict[str, Any] | None = None
    prepared: dict[str, Any] | None = None
    prepare_receipt: dict[str, Any] | None = None
    outcome_receipt: dict[str, Any] | None = None
    undo_token: str | None = None
    lease_expires_at: datetime | None = None
    flags: tuple[str, ...] = ()
    #: ``<txnId>/<branchId>`` of the undo branch taking this committed step back
    #: (claimed at its prepare, kept once it commits, cleared if it aborts).
    undone_by: str | None = None

    def _key(self) -> tuple[str, str, str]:
        return self.participant_id, self.txn_id, self.branch_id

    @classmethod
    def _from_row(cls, row: Any) -> BranchRow:
        return cls(
            participant_id=row.participant_id,
            txn_id=row.txn_id,
            branch_id=row.branch_id,
            state=BranchState(row.state),
            tier=None if row.tier is None else Tier(row.tier),
            plan_digest=row.plan_digest,
            fence=row.fence,
            plan=load_optional_json(row.plan),
            prepared=load_optional_json(row.prepared),
            prepare_receipt=load_optional_json(row.prepare_receipt),
            outcome_receipt=load_optional_json(row.outcome_receipt),
            undo_token=row.undo_token,
            lease_expires_at=None
            if row.lease_expires_at is None
            else from_ms(row.lease_expires_at),
            flags=tuple(load_json(row.flags)),
            undone_by=row.undone_by,
        )

    def _values(self) -> dict[str, Any]:
        return {name: encode(getattr(self, name)) for name, encode in _ENCODE.items()}

    def _changes(self, before: BranchRow) -> dict[str, Any]:
        """The stored values of the columns where this row differs from ``before``.

        JSON members count as changed unless they are the very same object:
        equal Python values can have different canonical forms (``1`` and ``True``).
        """
        changes = {}
        for name in _CHANGEABLE:
            new, old = getattr(self, name), getattr(before, name)
            if new is old or (name not in _JSON_MEMBERS and new == old):
                continue
            changes[name] = _ENCODE[name](new)
        return changes


def _enum_value(value: BranchState | Tier | None) -> str | None:
    return None if value is None else value.value


def _plain(value: Any) -> Any:
    return value


def _optional_ms(value: datetime | None) -> int | None:
    return None if value is None else to_ms(value)


def _flags(value: tuple[str, ...]) -> str:
    return dump_json(list(value))


#: How each field of a BranchRow is stored, in column order.
_ENCODE: dict[str, Callable[[Any], Any]] = {
    "participant_id": _plain,
    "txn_id": _plain,
    "branch_id": _plain,
    "state": _enum_value,
    "tier": _enum_value,
    "plan_digest": _plain,
    "fence": _plain,
    "plan": dump_optional_json,
    "prepared": dump_optional_json,
    "prepare_receipt": dump_optional_json,
    "outcome_receipt": dump_optional_json,
    "undo_token": _plain,
    "lease_expires_at": _optional_ms,
    "flags": _flags,
    "undone_by": _plain,
}
_KEYS = ("participant_id", "txn_id", "branch_id")
_CHANGEABLE = tuple(name for name in _ENCODE if name not in _KEYS)
_JSON_MEMBERS = frozenset({"plan", "prepared", "prepare_receipt", "outcome_receipt"})
_BLANK = {"state": BranchState.UNKNOWN.value, "fence": 0, "flags": dump_json([])}

# Built once and executed with parameters; lock and save run them on the
# driver (hatp.store._driver), inside the caller's Core transaction. The key's
# parameters are named apart from the columns: an UPDATE sets the columns its
# parameters name.
_IS_BRANCH = sa.and_(*(branch.c[key] == sa.bindparam(f"k_{key}") for key in _KEYS))
_GET = sa.select(branch).where(_IS_BRANCH)
_UPDATE = sa.update(branch).where(_IS_BRANCH)
_EXPIRED = (
    sa.select(branch)
    .where(
        branch.c.participant_id == sa.bindparam("participant_id"),
        branch.c.state == BranchState.PREPARED.value,
        branch.c.tier == Tier.HOLD.value,
        branch.c.lease_expires_at <= sa.bindparam("now"),
    )
    .order_by(branch.c.lease_expires_at, branch.c.txn_id, branch.c.branch_id)
    .with_for_update(skip_locked=True)
)


@functools.cache
def _lock_statement(dialect: str) -> sa.Insert:
    # One statement: insert the blank row, or "update" the existing one to
    # itself, which on PostgreSQL locks it as an UPDATE does; RETURNING gives
    # the row as it now stands either way.
    stmt = dialect_insert(dialect, branch)
    return stmt.on_conflict_do_update(
        index_elements=list(_KEYS), set_={"participant_id": stmt.excluded.participant_id}
    ).returning(*branch.c)


def _key(participant_id: str, txn_id: str, branch_id: str) -> dict[str, str]:
    return {"k_participant_id": participant_id, "k_txn_id": txn_id, "k_branch_id": branch_id}


class BranchStore:
    """A participant's per-branch state, kept in a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def lock(
        self, conn: sa.Connection, participant_id: str, txn_id: str, branch_id: str
    ) -> BranchRow:
        """Return the branch's row, locked until the caller's transaction ends.

        A branch never seen before gets a blank row (state ``unknown``, fence 0).
        Runs inside the caller's transaction, as one statement. On PostgreSQL
        the row is locked as an ``UPDATE`` locks it (no other transaction can
        lock, update or ``SELECT .. FOR UPDATE`` it until this one ends); on
        SQLite the transaction already holds the database.

        Raises:
            StoreUnavailable: (when the caller's transaction ends) the database failed.
        """
        values = {
            "participant_id": participant_id,
            "txn_id": txn_id,
            "branch_id": branch_id,
            **_BLANK,
        }
        session = DriverSession.of(conn)
        return BranchRow._from_row(session.execute(_lock_statement(session.dialect), values).one())

    def save(self, conn: sa.Connection, row: BranchRow, *, locked: BranchRow | None = None) -> None:
        """Write ``row`` in the caller's transaction (it is durable once that commits).

        ``locked``: the same branch as :meth:`lock` returned it (or as last
        saved) in this transaction. Given, only the columns that differ from
        it are written, and nothing at all if none does; a JSON member counts
        as unchanged only when it is the same object, so do not change those
        in place.
        """
        session = DriverSession.of(conn)
        if locked is None or locked._key() != row._key():
            session.execute(upsert(session.dialect, branch), row._values())
            return
        changes = row._changes(locked)
        if changes:
            session.execute(_UPDATE, {**changes, **_key(*row._key())})

    def flag(self, participant_id: str, txn_id: str, branch_id: str, note: str) -> None:
        """Append ``note`` to the branch's flags, in a transaction of its own.

        Raises:
            StoreUnavailable: the database failed; nothing was written.
        """
        with self._store.transaction() as conn:
            row = self.lock(conn, participant_id, txn_id, branch_id)
            self.save(conn, replace(row, flags=(*row.flags, note)), locked=row)

    def get(self, participant_id: str, txn_id: str, branch_id: str) -> BranchRow | None:
        """Return the branch's row, or ``None`` if it was never written. Changes nothing.

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.read_session() as session:
            row = session.execute(_GET, _key(participant_id, txn_id, branch_id)).first()
        return None if row is None else BranchRow._from_row(row)

    def read(
        self, conn: sa.Connection, participant_id: str, txn_id: str, branch_id: str
    ) -> BranchRow | None:
        """Return the branch's row as the caller's transaction sees it (``None``: never
        written); locks nothing."""
        session = DriverSession.of(conn)
        row = session.execute(_GET, _key(participant_id, txn_id, branch_id)).first()
        return None if row is None else BranchRow._from_row(row)

    def expired_holds(
        self, conn: sa.Connection, participant_id: str, now: datetime
    ) -> list[BranchRow]:
        """Return the prepared holds whose lease ended at or before ``now``, soonest first.

        Runs inside the caller's transaction and locks the rows it returns. On
        PostgreSQL, rows another transaction has locked (a commit in flight)
        are skipped: that transaction settles them.
        """
        found = conn.execute(_EXPIRED, {"participant_id": participant_id, "now": to_ms(now)})
        return [BranchRow._from_row(row) for row in found.all()]
