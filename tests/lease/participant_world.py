"""A ticket participant for the LeasedOperation tests: the demo's ticket system of record,
a compensate-tier participant in front of it, and a plan with one leased branch.

The system of record keeps its tickets and leases on one store (the tests' ``store``,
SQLite or PostgreSQL); the participant keeps its branch state on another of the same
kind (another SQLite file, or another PostgreSQL schema), as a tool server in front of
someone else's database does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import sqlalchemy as sa

from coordinator.trips import BOUND
from hatp.clock import ManualClock
from hatp.demo._tickets import open_tickets, ticket_system
from hatp.evidence import SigningKey, digest
from hatp.lease import EscrowCase, LeasedOperation, RecoveryMode, SystemOfRecord
from hatp.model import Plan, Preconditions, parse_plan
from hatp.participant import Participant, ParticipantServer, Relay
from hatp.store import LeaseRow, Store

T = TypeVar("T")

TICKETS_ID = "mcp://tickets.acme.example"
TICKETS_KEY = SigningKey.from_seed(bytes([51]) * 32, f"{TICKETS_ID}#key-1")
SOR_KEY = SigningKey.from_seed(bytes([52]) * 32, "tickets-1")
OPERATION = "update_ticket"
BRANCH = "ticket"
RESOURCE = "ticket/4711"
TICKET: dict[str, Any] = {
    "id": 4711,
    "title": "Refund for order 88",
    "status": "open",
    "assignee": "dana",
    "notes": "customer called twice",
}
CLOSE: dict[str, Any] = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
#: The window asked for and the longest the ticket system grants (the clock starts 09:00).
T_REQ_MS = 30 * 60 * 1000
MAX_WINDOW_MS = 60 * 60 * 1000
DECIDE_BY = "2026-12-02T09:15:00.000Z"
#: Who restores a HUMAN_ESCROW lease by hand, as the ticket system's login knows them.
LEE = "human://tickets.example/lee"


class Desk:
    """The ticket system's escrow desk: keeps every case it is handed."""

    def __init__(self) -> None:
        self.cases: list[EscrowCase] = []

    def open(self, case: EscrowCase) -> None:
        self.cases.append(case)


def ticket_sor(store: Store, clock: ManualClock, desk: Desk | None = None) -> SystemOfRecord:
    """The ticket system on ``store``, with ticket 4711 open."""
    open_tickets(store, [TICKET])
    return ticket_system(store, SOR_KEY, clock, escrow=desk, max_window_ms=MAX_WINDOW_MS)


def ticket_server(
    branches: Store,
    sor: SystemOfRecord,
    clock: ManualClock,
    *,
    mode: RecoveryMode = RecoveryMode.COMPENSATING_ACTION,
    t_req_ms: int = T_REQ_MS,
) -> ParticipantServer:
    """The ticket participant: its branch state on ``branches``, its leases from ``sor``."""
    operation = LeasedOperation(sor, name=OPERATION, mode=mode, t_req_ms=t_req_ms)
    return ParticipantServer(TICKETS_ID, TICKETS_KEY, branches, [operation], clock)


def ticket_branch(**args: Any) -> dict[str, Any]:
    return {
        "branchId": BRANCH,
        "participant": TICKETS_ID,
        "operation": OPERATION,
        "tier": "compensate",
        "args": args or {"resource": RESOURCE, "mutation": CLOSE},
        "amount": None,
    }


def one_branch_plan(txn_id: str = "txn-1", decide_by: str = DECIDE_BY, **args: Any) -> Plan:
    return parse_plan(
        {
            "hatpVersion": "0.1",
            "txnId": txn_id,
            "initiator": "agent://acme.com/support-bot",
            "onBehalfOf": "human://acme.com/dana",
            "branches": [ticket_branch(**args)],
            "deadlines": {"decideBy": decide_by},
        }
    )


def seen(receipt: dict[str, Any]) -> Preconditions | None:
    found = receipt.get("preconditions")
    return None if found is None else Preconditions.model_validate(found)


def named_lease(sor: SystemOfRecord, prepare_receipt: dict[str, Any]) -> LeaseRow:
    """The lease a yes vote names in its scope (``lease <leaseId> <lease digest>``),
    as the system of record keeps it; its digest must be the one named."""
    word, lease_id, lease_digest = prepare_receipt["preconditions"]["scope"].split(" ")
    row = sor.lease(lease_id)
    if word != "lease" or row.lease_digest != lease_digest or digest(row.lease) != lease_digest:
        raise AssertionError(f"the scope names another lease than {lease_id}'s")
    return row


def ticket_now(sor: SystemOfRecord) -> dict[str, Any]:
    state, _ = sor.state(RESOURCE)
    return dict(state)


def lease_rows(store: Store) -> list[tuple[str, str]]:
    """Every lease the system of record granted: (lease id, status)."""
    with store.transaction() as conn:
        rows = conn.execute(sa.text("SELECT lease_id, status FROM hatp_lease ORDER BY lease_id"))
        return [(r.lease_id, r.status) for r in rows]


class Meanwhile(Relay):
    """Runs ``edit`` (someone else's change) just before the first commit reaches the
    participant behind it."""

    def __init__(self, inner: Participant, edit: Callable[[], object]) -> None:
        super().__init__(inner)
        self._edit: Callable[[], object] | None = edit

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == "commit" and self._edit is not None:
            edit, self._edit = self._edit, None
            edit()
        return await call()


class AfterPrepare(Relay):
    """Calls ``then`` once a prepare came back from the participant behind it."""

    def __init__(self, inner: Participant, then: Callable[[], object]) -> None:
        super().__init__(inner)
        self._then = then

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        answer = await call()
        if method == "prepare":
            self._then()
        return answer


class BeforePrepare(Relay):
    """Holds each prepare until ``event`` is set (failing after :data:`BOUND` seconds)."""

    def __init__(self, inner: Participant, event: asyncio.Event) -> None:
        super().__init__(inner)
        self._event = event

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == "prepare":
            await asyncio.wait_for(self._event.wait(), BOUND)
        return await call()
