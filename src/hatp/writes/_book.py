"""The SQL of hatp's write bookkeeping (the tables are :mod:`hatp.writes._tables`).

Times are integer milliseconds since the epoch and JSON values their
RFC 8785 canonical text, as in :mod:`hatp.store` (whose helpers these are).
Functions whose name ends in ``_txn`` run inside the caller's transaction
and commit nothing themselves.

The statements an execution runs (reading the plan and its approval,
reserving, locking and completing the key, the journal entry, the plan's
status) go straight to the driver's cursor of the caller's connection
(:func:`_driver_rows`), in the caller's transaction, compiled once per
dialect (:class:`~hatp.store._driver.DriverStatement`): SQLAlchemy's
per-statement execution machinery costs more than each of these statements
itself. Nothing else changes: the same SQL, the same transaction, a
driver's error still leaves as SQLAlchemy's (so the store reports it as
``StoreUnavailable`` and the executor still recognises a serialization
failure or a deadlock by its SQLSTATE).
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hatp.store._driver import DriverStatement, run_in
from hatp.store._engine import dialect_insert
from hatp.store._schema import dump_json, to_ms
from hatp.writes._tables import (
    ApprovalRow,
    JournalEntry,
    KeyRow,
    KeyState,
    PlanRow,
    PlanStatus,
    write_approval,
    write_journal,
    write_key,
    write_plan,
)

__all__ = [
    "append_journal_txn",
    "complete_key_txn",
    "finish_key_txn",
    "get_approval_txn",
    "get_key_txn",
    "get_plan_and_approval_txn",
    "get_plan_txn",
    "insert_approval_txn",
    "insert_plan_txn",
    "journal_seq_txn",
    "journal_txn",
    "last_version_txn",
    "relax_commit_txn",
    "replace_plan_txn",
    "reserve_key_txn",
    "set_plan_status_txn",
    "take_key_txn",
]


# --- plans ---------------------------------------------------------------


def insert_plan_txn(
    conn: sa.Connection,
    plan_id: str,
    version: int,
    digest: str,
    plan: dict[str, Any],
    verdict: str,
    now: datetime,
) -> bool:
    """Store a new plan version as ``proposed``; ``False`` if that version is already stored."""
    at = to_ms(now)
    values = {
        "plan_id": plan_id,
        "version": version,
        "digest": digest,
        "plan": dump_json(plan),
        "verdict": verdict,
        "status": PlanStatus.PROPOSED.value,
        "detail": None,
        "created_at": at,
        "updated_at": at,
    }
    return conn.execute(_insert_ignoring(conn.dialect.name, "plan"), values).first() is not None


def replace_plan_txn(
    conn: sa.Connection,
    plan_id: str,
    version: int,
    digest: str,
    plan: dict[str, Any],
    verdict: str,
    now: datetime,
) -> None:
    """Overwrite a stored version's content. Only the WRITE-VERSION switch-off test gets here:
    it is what a store that lets an approved version change would do."""
    conn.execute(
        sa.update(write_plan)
        .where(write_plan.c.plan_id == plan_id, write_plan.c.version == version)
        .values(digest=digest, plan=dump_json(plan), verdict=verdict, updated_at=to_ms(now))
    )


def get_plan_txn(conn: sa.Connection, plan_id: str, version: int) -> PlanRow | None:
    """The stored plan version, or ``None``."""
    rows = _driver_rows(conn, "get_plan", {"plan_id": plan_id, "version": version})
    return PlanRow._from_row(_PlanFields(*rows[0])) if rows else None


def last_version_txn(conn: sa.Connection, plan_id: str) -> int | None:
    """The highest version of ``plan_id`` stored, or ``None`` for a new plan id."""
    found: int | None = conn.execute(_LAST_VERSION, {"plan_id": plan_id}).scalar()
    return found


def get_plan_and_approval_txn(
    conn: sa.Connection, plan_id: str, version: int
) -> tuple[PlanRow | None, ApprovalRow | None]:
    """The stored plan version and its approval (each ``None`` if missing), in one SELECT."""
    rows = _driver_rows(conn, "get_plan_and_approval", {"plan_id": plan_id, "version": version})
    return _plan_and_approval(rows[0]) if rows else (None, None)


def _plan_and_approval(row: Sequence[Any]) -> tuple[PlanRow, ApprovalRow | None]:
    """A row of the plan's columns then the approval's (all NULL when it has none)."""
    width = len(write_plan.columns)
    plan, approval = row[:width], row[width:]
    # approval's primary key column is NOT NULL: NULL there means no approval row.
    return PlanRow._from_row(_PlanFields(*plan)), (
        None if approval[0] is None else ApprovalRow._from_row(_ApprovalFields(*approval))
    )


def get_plan_and_reserve_txn(
    conn: sa.Connection,
    plan_id: str,
    version: int,
    key: str,
    owner: str,
    lease_until: int,
    now: datetime,
) -> tuple[PlanRow | None, ApprovalRow | None, bool | None]:
    """:func:`get_plan_and_approval_txn`, and on PostgreSQL also what :func:`reserve_key_txn`
    does with ``relax`` (the key of the stored version reserved at fence 1, the commit not
    waiting for the disk if it was), in the same round trip. The third value says whether
    the reservation was made; ``None`` on SQLite, where nothing was tried (a statement
    there costs no round trip).

    For :meth:`~hatp.writes.Writes.execute` only: it reserves before the plan is checked,
    so a refusal must roll the transaction back, as every refusal of step 1 does.
    """
    if conn.dialect.name != "postgresql":
        return (*get_plan_and_approval_txn(conn, plan_id, version), None)
    values = _reservation(key, plan_id, version, owner, lease_until, now)
    rows = _driver_rows(conn, "get_plan_and_reserve_pg", values)
    if not rows:
        return None, None, False
    plan, approval = _plan_and_approval(rows[0][:-1])
    return plan, approval, bool(rows[0][-1])


def set_plan_status_txn(
    conn: sa.Connection,
    plan_id: str,
    version: int,
    status: PlanStatus,
    detail: str | None,
    now: datetime,
) -> None:
    """Set a plan version's status and the detail of its last failure (``None`` clears it)."""
    _driver_rows(conn, "set_status", _status_values(plan_id, version, status, detail, now))


def _status_values(
    plan_id: str, version: int, status: PlanStatus, detail: str | None, now: datetime
) -> dict[str, Any]:
    return {
        "k_plan_id": plan_id,
        "k_version": version,
        "status": status.value,
        "detail": detail,
        "updated_at": to_ms(now),
    }


# --- approvals -----------------------------------------------------------


def insert_approval_txn(
    conn: sa.Connection,
    plan_id: str,
    version: int,
    digest: str,
    approvers: tuple[str, ...],
    source: str,
    evidence: dict[str, Any] | None,
    now: datetime,
) -> bool:
    """Store the approval of a plan version; ``False`` if it has one already (kept)."""
    values = {
        "plan_id": plan_id,
        "version": version,
        "digest": digest,
        "approver": dump_json(list(approvers)),
        "source": source,
        "evidence": None if evidence is None else dump_json(evidence),
        "approved_at": to_ms(now),
    }
    return conn.execute(_insert_ignoring(conn.dialect.name, "approval"), values).first() is not None


def get_approval_txn(conn: sa.Connection, plan_id: str, version: int) -> ApprovalRow | None:
    """The approval of the plan version, or ``None``."""
    rows = _driver_rows(conn, "get_approval", {"plan_id": plan_id, "version": version})
    return ApprovalRow._from_row(_ApprovalFields(*rows[0])) if rows else None


# --- execution keys ------------------------------------------------------


def reserve_key_txn(
    conn: sa.Connection,
    key: str,
    plan_id: str,
    version: int,
    owner: str,
    lease_until: int,
    now: datetime,
    *,
    relax: bool = False,
) -> bool:
    """Reserve a key never reserved before, at fence 1: one ``INSERT .. ON CONFLICT DO
    NOTHING`` on the primary key, so of any number of racing reservations exactly one
    returns ``True`` (PostgreSQL makes the others wait for it to commit).

    With ``relax``, a reservation made also does what :func:`relax_commit_txn` does, in
    the same statement (on PostgreSQL ``RETURNING`` calls ``set_config(
    'synchronous_commit', 'off', true)``, which it evaluates only for the row inserted):
    only for a transaction that will have written nothing else when it commits."""
    values = _reservation(key, plan_id, version, owner, lease_until, now)
    which = "reserve_key_relaxed" if relax and conn.dialect.name == "postgresql" else "reserve_key"
    return bool(_driver_rows(conn, which, values))


def _reservation(
    key: str, plan_id: str, version: int, owner: str, lease_until: int, now: datetime
) -> dict[str, Any]:
    """The key row of a fresh reservation: ``reserved`` at fence 1, no result."""
    return {
        "key": key,
        "plan_id": plan_id,
        "version": version,
        "state": KeyState.RESERVED.value,
        "owner": owner,
        "fence": 1,
        "lease_until": lease_until,
        "result": None,
        "updated_at": to_ms(now),
    }


def get_key_txn(conn: sa.Connection, key: str, *, lock: bool = False) -> KeyRow | None:
    """The key's row, or ``None``; ``lock`` holds it (``FOR UPDATE`` on PostgreSQL; SQLite's
    ``BEGIN IMMEDIATE`` already holds the whole database) until the transaction ends."""
    rows = _driver_rows(conn, "get_key_locked" if lock else "get_key", {"key": key})
    return KeyRow._from_row(_KeyFields(*rows[0])) if rows else None


def take_key_txn(
    conn: sa.Connection, key: str, fence: int, owner: str, lease_until: int, now: datetime
) -> int | None:
    """Reserve a key again (failed, or reserved under a lease that ran out) if its fence is
    still ``fence``: the fence moves up by one, fencing out every earlier holder. Returns
    the new fence, or ``None`` if someone else took it first."""
    params = {
        "k_key": key,
        "k_fence": fence,
        "state": KeyState.RESERVED.value,
        "owner": owner,
        "lease_until": lease_until,
        "updated_at": to_ms(now),
    }
    rows = _driver_rows(conn, "take_key", params)
    return int(rows[0][0]) if rows else None


def finish_key_txn(
    conn: sa.Connection,
    key: str,
    fence: int,
    state: KeyState,
    result: dict[str, Any],
    now: datetime,
) -> bool:
    """Mark the key ``completed`` or ``failed`` with its result and release it, if it is
    still reserved at ``fence``; ``False`` (nothing changed) if a takeover fenced us out."""
    return bool(_driver_rows(conn, "finish_key", _finish_values(key, fence, state, result, now)))


def _finish_values(
    key: str, fence: int, state: KeyState, result: dict[str, Any] | str, now: datetime
) -> dict[str, Any]:
    return {
        "k_key": key,
        "k_fence": fence,
        "k_state": KeyState.RESERVED.value,
        "state": state.value,
        "result": result if isinstance(result, str) else dump_json(result),
        "updated_at": to_ms(now),
    }


def complete_key_txn(
    conn: sa.Connection,
    key: str,
    fence: int,
    plan_id: str,
    version: int,
    digest: str,
    approvers: tuple[str, ...],
    source: str,
    result: dict[str, Any],
    status: PlanStatus,
    now: datetime,
) -> int | None:
    """The bookkeeping of an executed key, in the caller's transaction: mark the key
    ``completed`` with ``result`` if it is still reserved at ``fence``, append its journal
    entry and set the plan version's ``status``. Returns the entry's ``seq``, or ``None``
    (nothing written) if a takeover fenced us out.

    The three statements of :func:`finish_key_txn`, :func:`append_journal_txn` and
    :func:`set_plan_status_txn`, with the result's canonical JSON made once for both the
    key and the journal entry.
    """
    text = dump_json(result)
    if conn.dialect.name == "postgresql":
        # One round trip: the same three statements as data-modifying CTEs of one
        # statement (one snapshot; the entry and the status only if the key was ours).
        values = {
            **_finish_values(key, fence, KeyState.COMPLETED, text, now),
            **_journal_values(key, plan_id, version, digest, approvers, source, text, now),
            "status": status.value,
        }
        rows = _driver_rows(conn, "complete_key_pg", values)
        return int(rows[0][0]) if rows else None
    if not _driver_rows(
        conn, "finish_key", _finish_values(key, fence, KeyState.COMPLETED, text, now)
    ):
        return None
    values = _journal_values(key, plan_id, version, digest, approvers, source, text, now)
    seq = int(_driver_rows(conn, "append_journal", values)[0][0])
    _driver_rows(conn, "set_status", _status_values(plan_id, version, status, None, now))
    return seq


def relax_commit_txn(conn: sa.Connection) -> None:
    """Let the caller's transaction commit without waiting for its WAL to reach the disk.

    For the reservation transaction of :meth:`~hatp.writes.Writes.execute` only, and only
    when it did nothing but read and reserve (see the executor's module docstring for why a
    lost reservation is harmless). PostgreSQL: ``SET LOCAL synchronous_commit = off``,
    which lasts until this transaction ends: the connection goes back to the pool with
    ``synchronous_commit = on`` and every later commit on it, including the write's, waits
    for the disk as before; a later durable commit flushes the WAL up to itself, this
    reservation included. SQLite: nothing (its synchronous level cannot change inside a
    transaction, and this transaction began before it knew it only reserves): the
    reservation commits with ``synchronous=FULL`` as every other.
    """
    if conn.dialect.name == "postgresql":
        _driver_rows(conn, "relax_commit", {})


# --- journal -------------------------------------------------------------


def append_journal_txn(
    conn: sa.Connection,
    key: str,
    plan_id: str,
    version: int,
    digest: str,
    approvers: tuple[str, ...],
    source: str,
    result: dict[str, Any],
    now: datetime,
) -> int:
    """Append the journal entry of an executed key; return its ``seq``."""
    values = _journal_values(key, plan_id, version, digest, approvers, source, result, now)
    return int(_driver_rows(conn, "append_journal", values)[0][0])


def _journal_values(
    key: str,
    plan_id: str,
    version: int,
    digest: str,
    approvers: tuple[str, ...],
    source: str,
    result: dict[str, Any] | str,
    now: datetime,
) -> dict[str, Any]:
    return {
        "key": key,
        "plan_id": plan_id,
        "version": version,
        "digest": digest,
        "approver": dump_json(list(approvers)),
        "source": source,
        "result": result if isinstance(result, str) else dump_json(result),
        "at": to_ms(now),
    }


def journal_txn(conn: sa.Connection, plan_id: str | None = None) -> list[JournalEntry]:
    """The journal in ``seq`` order, of one plan id or of all."""
    query = sa.select(write_journal).order_by(write_journal.c.seq)
    if plan_id is not None:
        query = query.where(write_journal.c.plan_id == plan_id)
    return [JournalEntry._from_row(row) for row in conn.execute(query)]


def journal_seq_txn(conn: sa.Connection, key: str) -> int | None:
    """The ``seq`` of the key's journal entry, or ``None``."""
    rows = _driver_rows(conn, "journal_seq", {"key": key})
    return int(rows[0][0]) if rows else None


# --- statements, built once ----------------------------------------------

_TABLES = {"plan": write_plan, "approval": write_approval, "key": write_key}


@functools.cache
def _insert_ignoring(dialect: str, which: str) -> sa.Insert:
    # RETURNING names the row only if this INSERT wrote it (a rowcount would not do:
    # through psycopg SQLAlchemy reports -1 for an INSERT).
    table = _TABLES[which]
    first = next(iter(table.primary_key.columns))
    return dialect_insert(dialect, table).on_conflict_do_nothing().returning(first)


_GET_PLAN = sa.select(write_plan).where(
    write_plan.c.plan_id == sa.bindparam("plan_id"),
    write_plan.c.version == sa.bindparam("version"),
)
_LAST_VERSION = sa.select(sa.func.max(write_plan.c.version)).where(
    write_plan.c.plan_id == sa.bindparam("plan_id")
)
_SET_STATUS = (
    sa.update(write_plan)
    .where(
        write_plan.c.plan_id == sa.bindparam("k_plan_id"),
        write_plan.c.version == sa.bindparam("k_version"),
    )
    .values(
        status=sa.bindparam("status"),
        detail=sa.bindparam("detail"),
        updated_at=sa.bindparam("updated_at"),
    )
)
_GET_APPROVAL = sa.select(write_approval).where(
    write_approval.c.plan_id == sa.bindparam("plan_id"),
    write_approval.c.version == sa.bindparam("version"),
)
_GET_KEY = sa.select(write_key).where(write_key.c.key == sa.bindparam("key"))
_GET_KEY_LOCKED = _GET_KEY.with_for_update()
# Every value below is a named bind parameter (or a literal in the SQL text): the driver
# statements are handed exactly the values their names say, nothing SQLAlchemy made up.
_TAKE_KEY = (
    sa.update(write_key)
    .where(write_key.c.key == sa.bindparam("k_key"), write_key.c.fence == sa.bindparam("k_fence"))
    .values(
        state=sa.bindparam("state"),
        owner=sa.bindparam("owner"),
        fence=write_key.c.fence + sa.literal_column("1"),
        lease_until=sa.bindparam("lease_until"),
        result=sa.null(),
        updated_at=sa.bindparam("updated_at"),
    )
    .returning(write_key.c.fence)
)
_FINISH_KEY = (
    sa.update(write_key)
    .where(
        write_key.c.key == sa.bindparam("k_key"),
        write_key.c.fence == sa.bindparam("k_fence"),
        write_key.c.state == sa.bindparam("k_state"),
    )
    .values(
        state=sa.bindparam("state"),
        owner=sa.null(),
        lease_until=sa.null(),
        result=sa.bindparam("result"),
        updated_at=sa.bindparam("updated_at"),
    )
    .returning(write_key.c.key)
)
_APPEND_JOURNAL = (
    sa.insert(write_journal)
    .values({c.name: sa.bindparam(c.name) for c in write_journal.columns if c.name != "seq"})
    .returning(write_journal.c.seq)
)
_JOURNAL_SEQ = sa.select(write_journal.c.seq).where(write_journal.c.key == sa.bindparam("key"))


def _reserve_key(dialect: str) -> sa.Insert:
    insert = dialect_insert(dialect, write_key).values(
        {c.name: sa.bindparam(c.name) for c in write_key.columns}
    )
    return insert.on_conflict_do_nothing().returning(write_key.c.key)


def _reserve_key_relaxed(dialect: str) -> sa.Insert:
    # PostgreSQL only: set_config(.., is_local => true) is SET LOCAL, evaluated by
    # RETURNING once per row inserted, i.e. only when this reservation is made.
    relax = sa.func.set_config(
        sa.literal_column("'synchronous_commit'"),
        sa.literal_column("'off'"),
        sa.true(),
    )
    return _reserve_key(dialect).returning(relax)


# The plan version and its approval (all NULL when there is none): one round trip.
_GET_PLAN_AND_APPROVAL = (
    sa.select(write_plan, *write_approval.columns)
    .select_from(
        write_plan.outerjoin(
            write_approval,
            sa.and_(
                write_approval.c.plan_id == write_plan.c.plan_id,
                write_approval.c.version == write_plan.c.version,
            ),
        )
    )
    .where(
        write_plan.c.plan_id == sa.bindparam("plan_id"),
        write_plan.c.version == sa.bindparam("version"),
    )
)


# PostgreSQL: get_plan_and_approval and reserve_key_relaxed in one statement. The key is
# inserted only for a stored version (the INSERT reads the plan's row), and
# set_config (SET LOCAL) is evaluated by RETURNING only for the row inserted; the last
# column counts it. Every CTE runs once, in the statement's one snapshot.
_GET_PLAN_AND_RESERVE_PG = sa.text(
    f"""WITH r AS (
  INSERT INTO hatp_write_key (key, plan_id, version, state, owner, fence, lease_until,
                              result, updated_at)
  SELECT CAST(:key AS TEXT), plan_id, version, CAST(:state AS TEXT), CAST(:owner AS TEXT),
         CAST(:fence AS BIGINT), CAST(:lease_until AS BIGINT), CAST(:result AS TEXT),
         CAST(:updated_at AS BIGINT)
  FROM hatp_write_plan
  WHERE plan_id = CAST(:plan_id AS TEXT) AND version = CAST(:version AS INTEGER)
  ON CONFLICT DO NOTHING
  RETURNING set_config('synchronous_commit', 'off', true)
)
SELECT {", ".join(f"p.{c.name}" for c in write_plan.columns)},
       {", ".join(f"a.{c.name}" for c in write_approval.columns)},
       (SELECT count(*) FROM r)
FROM hatp_write_plan AS p
LEFT JOIN hatp_write_approval AS a ON a.plan_id = p.plan_id AND a.version = p.version
WHERE p.plan_id = CAST(:plan_id AS TEXT) AND p.version = CAST(:version AS INTEGER)"""
)


# PostgreSQL: finish_key, append_journal and set_status in one statement. Every CTE of a
# statement runs once, in one snapshot; the journal row is made from the key's row (none
# if the key was not reserved at our fence) and the plan's status set only if it was.
_COMPLETE_KEY_PG = sa.text(
    """WITH k AS (
  UPDATE hatp_write_key
  SET state = CAST(:state AS TEXT), owner = NULL, lease_until = NULL,
      result = CAST(:result AS TEXT), updated_at = CAST(:updated_at AS BIGINT)
  WHERE key = CAST(:k_key AS TEXT) AND fence = CAST(:k_fence AS BIGINT)
    AND state = CAST(:k_state AS TEXT)
  RETURNING key
), j AS (
  INSERT INTO hatp_write_journal (key, plan_id, version, digest, approver, source, result, at)
  SELECT k.key, CAST(:plan_id AS TEXT), CAST(:version AS INTEGER), CAST(:digest AS TEXT),
         CAST(:approver AS TEXT), CAST(:source AS TEXT), CAST(:result AS TEXT),
         CAST(:at AS BIGINT)
  FROM k
  RETURNING seq
), p AS (
  UPDATE hatp_write_plan
  SET status = CAST(:status AS TEXT), detail = NULL, updated_at = CAST(:updated_at AS BIGINT)
  WHERE plan_id = CAST(:plan_id AS TEXT) AND version = CAST(:version AS INTEGER)
    AND EXISTS (SELECT 1 FROM k)
)
SELECT seq FROM j"""
)

_DRIVER_STATEMENTS: dict[str, Any] = {
    "get_plan": _GET_PLAN,
    "set_status": _SET_STATUS,
    "get_approval": _GET_APPROVAL,
    "reserve_key": _reserve_key,
    "reserve_key_relaxed": _reserve_key_relaxed,
    "get_plan_and_approval": _GET_PLAN_AND_APPROVAL,
    "get_key": _GET_KEY,
    "get_key_locked": _GET_KEY_LOCKED,
    "take_key": _TAKE_KEY,
    "finish_key": _FINISH_KEY,
    "append_journal": _APPEND_JOURNAL,
    "journal_seq": _JOURNAL_SEQ,
    "relax_commit": sa.text("SET LOCAL synchronous_commit = off"),
    "complete_key_pg": _COMPLETE_KEY_PG,
    "get_plan_and_reserve_pg": _GET_PLAN_AND_RESERVE_PG,
}

# Rows of the driver's cursor, named as the tables' columns (selected in table order).
_PlanFields = namedtuple("_PlanFields", [c.name for c in write_plan.columns])  # type: ignore[misc]
_ApprovalFields = namedtuple("_ApprovalFields", [c.name for c in write_approval.columns])  # type: ignore[misc]
_KeyFields = namedtuple("_KeyFields", [c.name for c in write_key.columns])  # type: ignore[misc]


@functools.cache
def _driver_statement(dialect: str, which: str) -> DriverStatement:
    made = _DRIVER_STATEMENTS[which]
    return DriverStatement(dialect, made(dialect) if callable(made) else made)


def _driver_rows(
    conn: sa.Connection, which: str, values: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """Run a bookkeeping statement on the driver's cursor of ``conn``, in its transaction.

    Returns the rows it returns (none for a statement that returns none). A driver error
    leaves as SQLAlchemy's ``DBAPIError`` subclass for it, the driver's own exception as
    ``orig``, exactly as if ``conn.execute`` had run the statement.
    """
    return run_in(conn, _driver_statement(conn.dialect.name, which), values)
