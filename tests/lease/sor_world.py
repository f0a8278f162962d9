"""The system of record's world for lease tests: the demo's ticket system, fixed keys and times.

:func:`ticket_world` opens two tickets and returns the demo's ticket system
(``hatp.demo._tickets``) on a store; :func:`refusal` applies a lease that
must be refused and checks what every refusal promises (a signed rejection
receipt kept, nothing written). :func:`roster_system` is a second, small
system of record on the same ticket table whose actions read something
besides the ticket's state (who is on call, who owns the queue): the only
way a lease can be granted honestly and still diverge later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from hatp.clock import Clock
from hatp.demo._tickets import ISSUER, TICKETS, open_tickets, ticket_system
from hatp.errors import LeaseRefused
from hatp.evidence import Keyring, SigningKey
from hatp.lease import (
    Action,
    EscrowCase,
    LeaseRejection,
    RecoveryMode,
    State,
    SystemOfRecord,
    verify_receipt,
)
from hatp.store import LeaseBook, LeaseRow, Store

START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
KEY = SigningKey.from_seed(bytes([51]) * 32, "tickets-1")
TICKET: dict[str, Any] = {
    "id": 4711,
    "title": "Refund for order 1234",
    "status": "open",
    "assignee": "dana",
    "notes": "called twice",
}
OTHER_TICKET: dict[str, Any] = {
    "id": 4712,
    "title": "Password reset",
    "status": "pending",
    "assignee": None,
    "notes": "",
}
RESOURCE = "ticket/4711"
CLOSE: dict[str, Any] = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
REASSIGN: dict[str, Any] = {
    "action": "tickets.update",
    "params": {"id": 4711, "assignee": "erin"},
}
CLEAR_NOTES: dict[str, Any] = {"action": "tickets.clear_notes", "params": {"id": 4711}}
WINDOW_MS = 300_000
LEE = "human://tickets.example/lee"


def public_keyring() -> Keyring:
    """What an auditor holds: the ticket system's public key, and nothing secret."""
    return Keyring([(KEY.public, ISSUER)], trusted_issuers=[ISSUER])


@dataclass
class Desk:
    """A recording escrow desk: every case it was told to handle, in order. While
    ``down`` is above 0 it cannot be reached: each call counts it down and raises."""

    cases: list[EscrowCase] = field(default_factory=list)
    down: int = 0

    def open(self, case: EscrowCase) -> None:
        if self.down > 0:
            self.down -= 1
            raise ConnectionError("the escrow desk's queue did not answer")
        self.cases.append(case)


def ticket_world(store: Store, clock: Clock, *, escrow: Desk | None = None) -> SystemOfRecord:
    """The demo's ticket system on ``store`` with tickets 4711 and 4712 open."""
    sor = ticket_system(store, KEY, clock, escrow=escrow)
    open_tickets(store, [TICKET, OTHER_TICKET])
    return sor


def ticket_system_at(store: Store, clock: Clock) -> SystemOfRecord:
    """Another instance of the ticket system on the same database, with its own clock."""
    return ticket_system(store, KEY, clock)


def grant(
    sor: SystemOfRecord,
    mode: RecoveryMode = RecoveryMode.COMPENSATING_ACTION,
    mutation: dict[str, Any] = CLOSE,
    *,
    resource: str = RESOURCE,
    t_req_ms: int = WINDOW_MS,
) -> dict[str, Any]:
    """A lease of ``sor`` for ``mutation`` of the ticket."""
    return sor.grant(resource, mutation, t_req_ms=t_req_ms, mode=mode)


def refusal(
    sor: SystemOfRecord,
    lease_doc: dict[str, Any] | bytes,
    *,
    mutation: dict[str, Any] = CLOSE,
    resource: str = RESOURCE,
    **kwargs: Any,
) -> LeaseRefused:
    """Apply ``lease_doc``, which must be refused; check that nothing was written and
    that the refusal's signed receipt was kept and verifies offline. Returns the error."""
    before = sor.state(resource)
    rows = {row.lease_id: row for row in leases(sor.store, resource)}
    kept = len(sor.rejections())
    with pytest.raises(LeaseRefused) as caught:
        sor.apply(lease_doc, resource=resource, mutation=mutation, **kwargs)
    refused = caught.value
    assert sor.state(resource) == before, "a refused lease wrote"
    assert {row.lease_id: row for row in leases(sor.store, resource)} == rows
    rejections = sor.rejections()
    assert len(rejections) == kept + 1
    receipt = rejections[-1]
    assert receipt == refused.data["receipt"]
    checked = verify_receipt(receipt, public_keyring())
    assert isinstance(checked, LeaseRejection)
    assert (checked.rule, checked.reason) == (refused.data["rule"], refused.reason)
    assert checked.resource == resource
    return refused


def leases(store: Store, resource: str = RESOURCE) -> list[LeaseRow]:
    """Every lease the system of record keeps for ``resource``."""
    return LeaseBook(store).leases(resource)


# --- a system of record whose actions read more than the ticket ---


@dataclass
class Roster:
    """Who is on call and who owns the queue: kept outside the ticket, read by actions."""

    on_call: str | None = "erin"
    owner: str | None = "dana"


ESCALATE: dict[str, Any] = {"action": "tickets.escalate", "params": {"id": 4711}}


def roster_system(store: Store, clock: Clock, roster: Roster) -> SystemOfRecord:
    """The ticket table under two actions that read ``roster``, and no escrow desk.

    ``tickets.escalate`` assigns the ticket to whoever is on call (refusing when
    nobody is); its inverse ``tickets.hand_back`` assigns it to the queue's owner
    (refusing when there is none).
    So a compensating action is stageable only while the owner is the assignee,
    a dry-run shadow holds only while the same person is on call, and a hand-back
    restores only while the same person owns the queue.
    """

    def escalate(state: State, params: dict[str, Any]) -> State:
        if roster.on_call is None:
            raise ValueError("nobody is on call")
        return {**state, "assignee": roster.on_call}

    def hand_back(state: State, params: dict[str, Any]) -> State:
        if roster.owner is None:
            raise ValueError("the queue has no owner")
        return {**state, "assignee": roster.owner}

    def hand_back_of(state: State, params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "tickets.hand_back", "params": {"id": state["id"]}}

    open_tickets(store, [TICKET])
    return SystemOfRecord(
        store,
        issuer=ISSUER,
        key=KEY,
        keyring=public_keyring(),
        resources=TICKETS,
        actions=[
            Action("tickets.escalate", escalate, hand_back_of),
            Action("tickets.hand_back", hand_back),
        ],
        clock=clock,
    )
