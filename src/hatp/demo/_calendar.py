"""The calendar: ``add_event`` adds an event, undone by deleting it (tier compensate).

Each owner's calendar has a version, bumped by every change. Prepare is a dry
run that reports the version it saw; commit is refused (by the participant
SDK) if the calendar changed since.

An added event is taken back later, in an undo transaction, by the SDK's own
``hatp.compensate`` (the default undo terms: no fee, no end), which runs this
operation's ``compensate`` with the step's undo token: the ``removed`` line is
then written under the original transaction, as an in-transaction compensation's
is. What tells the two apart is the SDK's branch row in this same store, which
names the undo branch that took the step back (``undone_by``); the effect judge
reads it (:func:`effect`).
"""

from __future__ import annotations

import functools
import secrets
from datetime import datetime

from sqlalchemy import (
    Column,
    Connection,
    Insert,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    column,
    delete,
    insert,
    select,
    table,
)
from sqlalchemy.dialects import postgresql, sqlite

from hatp.clock import parse_time
from hatp.demo._ledger import Seed, Service, kinds, ledger_table, log, text_arg, write_line
from hatp.model import BranchState, Certainty, Change, EffectPreview, Preconditions, Tier
from hatp.participant import (
    Committed,
    Operation,
    Prepared,
    Quoted,
    Refuse,
    Work,
    change,
    observed,
    preview,
)

PARTICIPANT = "mcp://calendar.example"

metadata = MetaData()
calendars = Table(
    "calendar_calendars",
    metadata,
    Column("owner", String(512), primary_key=True),
    Column("version", Integer, nullable=False),
)
events = Table(
    "calendar_events",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("owner", String(512), nullable=False, index=True),
    Column("txn_id", String(128), nullable=True, index=True),  # None: added by the owner
    Column("branch_id", String(64), nullable=True),
    Column("title", String(512), nullable=False),
    Column("starts", String(32), nullable=False),
    Column("ends", String(32), nullable=False),
)
ledger = ledger_table(metadata, "calendar")
# The participant SDK's branch table (``hatp.store``'s ``hatp_branch``), as far as the
# effect judge reads it: which of this participant's steps an undo branch took back.
_sdk_branches = table(
    "hatp_branch",
    column("participant_id"),
    column("txn_id"),
    column("branch_id"),
    column("state"),
    column("undone_by"),
)


# Statements built once and run with parameters (SQLAlchemy's compiled cache
# serves every call). ``k_*`` parameters are the WHERE clause's.
_INSERT_EVENT = insert(events)
_MINE = and_(
    events.c.txn_id == bindparam("k_txn_id"), events.c.branch_id == bindparam("k_branch_id")
)
_DELETE_MINE = delete(events).where(_MINE)
_VERSION = (
    select(calendars.c.version).where(calendars.c.owner == bindparam("owner")).with_for_update()
)


@functools.cache
def _bump_statement(dialect: str) -> Insert:
    # Create the calendar at version 1 if it is new, else count the change in
    # SQL (never by read-modify-write); racing creators both succeed.
    insert_on = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert_on(calendars).values(version=1)
    return stmt.on_conflict_do_update(
        index_elements=[calendars.c.owner], set_={"version": calendars.c.version + 1}
    ).returning(calendars.c.version)


class AddEvent(Operation):
    """Add ``args.title`` from ``args.start`` to ``args.end`` to ``args.owner``'s calendar."""

    name = "add_event"
    tier = Tier.COMPENSATE

    def prepare(self, work: Work) -> Prepared:
        owner, title, starts, ends = _event_args(work)
        seen = version(work.conn, owner)
        # Exact: the commit is refused unless the calendar is still at the version
        # seen here [PART-PRECONDITION], and then adds exactly this event.
        return Prepared(
            preconditions=_calendar_version(owner, seen),
            preview=_adding(owner, title, starts, ends, seen),
        )

    def quote(self, work: Work) -> Quoted:
        """Free, and what a prepare now would preview (a change to the calendar before
        the prepare changes that preview: people approved this one)."""
        owner, title, starts, ends = _event_args(work)
        return Quoted(preview=_adding(owner, title, starts, ends, version(work.conn, owner)))

    def preconditions(self, work: Work) -> Preconditions:
        owner = text_arg(work, "owner")
        return _calendar_version(owner, version(work.conn, owner))

    def commit(self, work: Work) -> Committed:
        owner, title, starts, ends = _event_args(work)
        event_id = f"evt-{secrets.token_hex(8)}"
        work.conn.execute(
            _INSERT_EVENT,
            {
                "event_id": event_id,
                "owner": owner,
                "txn_id": work.txn_id,
                "branch_id": work.branch.branch_id,
                "title": title,
                "starts": starts,
                "ends": ends,
            },
        )
        now_at = _bump(work.conn, owner)
        was = now_at - 1  # the bump counted this change, in the row it locked
        log(work, ledger, "added", f"{title!r} {starts} to {ends} on {owner} (version {now_at})")
        return Committed(
            effect={"eventId": event_id, "calendar": owner, "title": title, "version": now_at},
            observed=observed(
                _event(owner, title, starts, ends, was, now_at),
                summary=_said(owner, title, starts, ends),
            ),
            undo_token=event_id,
        )

    def abort(self, work: Work) -> None:
        """Nothing to do: the dry run placed nothing."""

    def compensate(self, work: Work, undo_token: str) -> None:
        owner = text_arg(work, "owner")
        mine = {"k_txn_id": work.txn_id, "k_branch_id": work.branch.branch_id}
        gone = work.conn.execute(_DELETE_MINE, mine).rowcount
        if gone:
            now_at = _bump(work.conn, owner)
            log(work, ledger, "removed", f"event {undo_token} on {owner} (version {now_at})")


def _event_args(work: Work) -> tuple[str, str, str, str]:
    owner, title = text_arg(work, "owner"), text_arg(work, "title")
    starts, ends = text_arg(work, "start"), text_arg(work, "end")
    for name, value in (("start", starts), ("end", ends)):
        try:
            parse_time(value)
        except ValueError:
            raise Refuse(
                "BAD_ARGS", f"add_event needs {name} as a time like 2026-12-14T13:00:00.000Z"
            ) from None
    return owner, title, starts, ends


def _calendar_version(owner: str, seen: int) -> Preconditions:
    return Preconditions(versions={f"calendar:{owner}": str(seen)}, scope=f"calendar.write:{owner}")


def _said(owner: str, title: str, starts: str, ends: str) -> str:
    return f"add {title!r} to the calendar of {owner}, {starts} to {ends}"


def _adding(owner: str, title: str, starts: str, ends: str, seen: int) -> EffectPreview:
    """The exact preview of adding the event to a calendar at version ``seen``."""
    return preview(
        Certainty.EXACT,
        _event(owner, title, starts, ends, seen),
        summary=_said(owner, title, starts, ends),
    )


def _event(
    owner: str, title: str, starts: str, ends: str, was: int, now_at: int | None = None
) -> list[Change]:
    """What adding the event changes: the event on the owner's calendar, at its start, and
    the calendar's version (one more than ``was``, unless the commit says ``now_at``)."""
    calendar = f"calendar {owner}"
    event = {"title": title, "start": starts, "end": ends, "attendees": [owner]}
    return [
        change(calendar, "create", field="event", after=event, at=parse_time(starts)),
        change(
            calendar,
            "update",
            field="version",
            before=was,
            after=was + 1 if now_at is None else now_at,
        ),
    ]


def version(conn: Connection, owner: str) -> int:
    """Return the version of ``owner``'s calendar (0 for a calendar never written).

    The row is locked (PostgreSQL) until the caller's transaction ends, so
    the version a commit checks is the version it writes over.
    """
    found = conn.execute(_VERSION, {"owner": owner}).scalar_one_or_none()
    return 0 if found is None else int(found)


def _bump(conn: Connection, owner: str) -> int:
    return int(conn.execute(_bump_statement(conn.dialect.name), {"owner": owner}).scalar_one())


def edit(conn: Connection, owner: str, title: str, starts: str, ends: str, now: datetime) -> int:
    """Add an event as the owner would, outside any transaction; return the new version."""
    event_id = f"evt-{secrets.token_hex(8)}"
    conn.execute(
        insert(events).values(event_id=event_id, owner=owner, title=title, starts=starts, ends=ends)
    )
    now_at = _bump(conn, owner)
    write_line(
        conn,
        ledger,
        PARTICIPANT,
        None,
        None,
        "edited",
        f"{owner} added {title!r} (version {now_at})",
        now,
    )
    return now_at


def seed(conn: Connection, stock: Seed) -> None:
    """Nothing to stock: a calendar exists (at version 0) until first written."""


def effect(conn: Connection, txn_id: str) -> str:
    """Judge what ``txn_id`` left on the calendars: ``whole``, ``none``, ``undone`` (added,
    then removed by an undo transaction) or ``broken: <why>``; for an undo transaction,
    ``whole`` once every event it took back is gone, ``none`` if it took back none."""
    taken_back = _taken_back_by(conn, txn_id)
    if taken_back:
        for original, branch_id in taken_back:
            if _present(conn, original, branch_id):
                return f"broken: taken back, but the event of {original}/{branch_id} is there"
            if kinds(conn, ledger, original)["removed"] != 1:
                return f"broken: taken back, but the ledger never removed {original}'s event"
        return "whole"
    seen = kinds(conn, ledger, txn_id)
    present = len(conn.execute(select(events.c.event_id).where(events.c.txn_id == txn_id)).all())
    added, removed = seen["added"], seen["removed"]
    if added > 1:
        return f"broken: event added {added} times"
    if removed > added:
        return f"broken: removed {removed} times, added {added}"
    expected = added - removed
    if present != expected:
        return f"broken: the ledger leaves {expected} event(s) but the calendar shows {present}"
    if expected == 1:
        return "whole"
    return "undone" if removed and _undone(conn, txn_id) else "none"


def _undone(conn: Connection, txn_id: str) -> bool:
    """Whether an undo branch took back a step of ``txn_id`` here."""
    found = conn.execute(
        select(_sdk_branches.c.branch_id).where(
            _sdk_branches.c.participant_id == PARTICIPANT,
            _sdk_branches.c.txn_id == txn_id,
            _sdk_branches.c.state == BranchState.COMPENSATED.value,
            _sdk_branches.c.undone_by.is_not(None),
        )
    ).first()
    return found is not None


def _taken_back_by(conn: Connection, txn_id: str) -> list[tuple[str, str]]:
    """The steps here (txn id, branch id) that an undo branch of ``txn_id`` took back."""
    rows = conn.execute(
        select(_sdk_branches.c.txn_id, _sdk_branches.c.branch_id).where(
            _sdk_branches.c.participant_id == PARTICIPANT,
            _sdk_branches.c.state == BranchState.COMPENSATED.value,
            _sdk_branches.c.undone_by.startswith(f"{txn_id}/", autoescape=True),
        )
    ).all()
    return [(str(r.txn_id), str(r.branch_id)) for r in rows]


def _present(conn: Connection, txn_id: str, branch_id: str) -> bool:
    mine = {"k_txn_id": txn_id, "k_branch_id": branch_id}
    return conn.execute(select(events.c.event_id).where(_MINE), mine).first() is not None


SERVICE = Service(PARTICIPANT, "calendar", metadata, ledger, lambda: (AddEvent(),), seed, effect)
