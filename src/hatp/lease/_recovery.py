"""What running a lease's recovery did, and the case a person holds (docs/spec.md §23).

:class:`Recovered` is the answer of :meth:`SystemOfRecord.recover`; an
:class:`EscrowCase` is a HUMAN_ESCROW recovery handed to people through the
system of record's :class:`Escrow` hook. The helpers read both back from a
stored lease row.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Protocol

from hatp.errors import LeaseUnknown, RecoveryRefused
from hatp.lease._model import CompensationLease, RecoveryOutcome
from hatp.lease._resources import State
from hatp.store import LeaseRow, LeaseStatus

__all__ = [
    "Escrow",
    "EscrowCase",
    "Recovered",
    "case_of",
    "leased",
    "recovered_before",
    "recovery_refused",
    "stored",
]


@dataclass(frozen=True)
class EscrowCase:
    """A HUMAN_ESCROW recovery waiting for a person: who, how, and to what state."""

    lease_id: str
    resource: str
    address: str
    instructions: str
    pre_image_state_hash: str
    pre_image: State


class Escrow(Protocol):
    """Where a system of record sends a HUMAN_ESCROW recovery (a ticket queue, a
    Human Gateway question, a pager). Called after the escalation is stored, and
    again by each later ``recover`` of the lease until a call returns: a case is
    told at least once, and may be told twice (key what it opens by ``lease_id``)."""

    def open(self, case: EscrowCase) -> None:
        """Tell the people at ``case.address`` what to restore; raise if they were not told."""
        ...


@dataclass(frozen=True)
class Recovered:
    """What a recovery did: its signed ``lease-recovery`` receipt (outcome
    ``restored``, ``voided`` or ``escrowed``), whether this call found it done
    before, and the case a person holds for an escrowed one."""

    receipt: dict[str, Any]
    replayed: bool
    case: EscrowCase | None = None

    @property
    def outcome(self) -> RecoveryOutcome:
        """The receipt's outcome."""
        return RecoveryOutcome(self.receipt["outcome"])


def leased(row: LeaseRow) -> CompensationLease:
    """The lease a row keeps, parsed (it was checked when granted)."""
    return CompensationLease.model_validate(row.lease)


def recovered_before(row: LeaseRow) -> Recovered | None:
    """The stored outcome of a recovery run before, or ``None`` if there is none yet."""
    if row.status in (LeaseStatus.RECOVERED, LeaseStatus.VOIDED, LeaseStatus.ESCROWED):
        return stored(row)
    return None


def stored(row: LeaseRow) -> Recovered:
    if row.recovery_receipt is None:  # never: every recovered status stores its receipt
        raise LeaseUnknown(f"lease {row.lease_id} has no recovery receipt", lease_id=row.lease_id)
    return Recovered(row.recovery_receipt, replayed=True, case=case_of(row))


def case_of(row: LeaseRow) -> EscrowCase | None:
    """The escrow case of an escrowed lease, else ``None``."""
    if row.status is not LeaseStatus.ESCROWED:
        return None
    lease = leased(row)
    staged = lease.inverse or {}
    return EscrowCase(
        lease_id=row.lease_id,
        resource=row.resource,
        address=str(staged.get("address")),
        instructions=str(staged.get("instructions")),
        pre_image_state_hash=lease.pre_image_state_hash,
        pre_image=copy.deepcopy(row.pre_image),
    )


def recovery_refused(reason: str, row: LeaseRow, message: str) -> RecoveryRefused:
    return RecoveryRefused(
        f"recovery of lease {row.lease_id} refused, {reason}: {message}; nothing was written",
        reason=reason,
        lease_id=row.lease_id,
        resource=row.resource,
    )
