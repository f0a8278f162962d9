"""The lease demo's system of record: a ticket table and its two typed mutations.

``tickets`` (id, title, status, assignee, notes) is the system's own table;
:data:`TICKETS` makes its rows the resources ``ticket/<id>``.
``tickets.update`` sets a ticket's ``status`` and/or ``assignee`` and has an
inverse (the values before), so it can be leased under any of the four
modes; ``tickets.clear_notes`` empties ``notes`` and has none, so a
compensating action cannot be staged for it (a snapshot can).
:func:`ticket_system` builds the :class:`~hatp.lease.SystemOfRecord`;
:func:`open_tickets` seeds rows and :func:`touch` changes one behind the
leases' back, as a writer that ignores them would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from hatp.clock import Clock
from hatp.evidence import Keyring, SigningKey
from hatp.lease import Action, Escrow, LeaseObserver, State, SystemOfRecord, TableResources
from hatp.store import Store

__all__ = [
    "ISSUER",
    "SUPPORT_LEAD",
    "TICKETS",
    "actions",
    "open_tickets",
    "ticket_system",
    "tickets",
    "touch",
]

#: The ticket system's id: it issues the leases and signs the receipts.
ISSUER = "https://tickets.example"
#: Who undoes a HUMAN_ESCROW lease by hand.
SUPPORT_LEAD = "human://tickets.example/role/support-lead"

metadata = sa.MetaData()
tickets = sa.Table(
    "tickets",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("title", sa.String(200), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("assignee", sa.String(64), nullable=True),
    sa.Column("notes", sa.Text, nullable=False),
)
TICKETS = TableResources("ticket", tickets, "id", ("id", "title", "status", "assignee", "notes"))

_STATUSES = ("open", "pending", "closed")
_UPDATABLE = ("status", "assignee")


def _update(state: State, params: dict[str, Any]) -> State:
    changes = {k: v for k, v in params.items() if k != "id"}
    if params.get("id") != state["id"]:
        raise ValueError(f"the params name ticket {params.get('id')!r}, not {state['id']}")
    if not changes or set(changes) - set(_UPDATABLE):
        raise ValueError(f"tickets.update sets some of {list(_UPDATABLE)}, not {sorted(changes)}")
    if "status" in changes and changes["status"] not in _STATUSES:
        raise ValueError(f"a status is one of {list(_STATUSES)}, not {changes['status']!r}")
    if "assignee" in changes and not (
        changes["assignee"] is None or isinstance(changes["assignee"], str)
    ):
        raise ValueError("an assignee is a name or null")
    return {**state, **changes}


def _update_inverse(state: State, params: dict[str, Any]) -> dict[str, Any]:
    before = {k: state[k] for k in params if k != "id"}
    return {"action": "tickets.update", "params": {"id": state["id"], **before}}


def _clear_notes(state: State, params: dict[str, Any]) -> State:
    if params != {"id": state["id"]}:
        raise ValueError(f"tickets.clear_notes takes {{id: {state['id']}}} only")
    return {**state, "notes": ""}


def actions() -> list[Action]:
    """The ticket system's two typed mutations."""
    return [
        Action("tickets.update", _update, _update_inverse),
        Action("tickets.clear_notes", _clear_notes),
    ]


def ticket_system(
    store: Store,
    key: SigningKey,
    clock: Clock,
    *,
    keyring: Keyring | None = None,
    escrow: Escrow | None = None,
    max_window_ms: int = 15 * 60 * 1000,
    observer: LeaseObserver | None = None,
) -> SystemOfRecord:
    """The ticket system on ``store`` (its table created if missing), signing with ``key``;
    ``observer`` is told of each lease granted, applied or refused (metrics, say)."""
    with store.transaction() as conn:
        metadata.create_all(conn, checkfirst=True)
    return SystemOfRecord(
        store,
        issuer=ISSUER,
        key=key,
        keyring=keyring or Keyring([(key.public, ISSUER)], trusted_issuers=[ISSUER]),
        resources=TICKETS,
        actions=actions(),
        clock=clock,
        max_window_ms=max_window_ms,
        escrow_address=SUPPORT_LEAD,
        escrow=escrow,
        observer=observer,
    )


def open_tickets(store: Store, rows: Iterable[Mapping[str, Any]]) -> None:
    """Insert ticket rows (each with every column)."""
    with store.transaction() as conn:
        metadata.create_all(conn, checkfirst=True)
        conn.execute(sa.insert(tickets), [dict(r) for r in rows])


def touch(store: Store, ticket_id: int, **changes: Any) -> None:
    """Change a ticket directly, as a writer that takes no lease would."""
    with store.transaction() as conn:
        conn.execute(sa.update(tickets).where(tickets.c.id == ticket_id).values(**changes))
