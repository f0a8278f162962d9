"""Compensation leases, PTCL (docs/spec.md §23): signed recovery reservations.

:class:`SystemOfRecord` is the recipe: it guards resources of its own
database (:class:`TableResources`) with a vocabulary of typed mutations
(:class:`Action`), grants leases, applies mutations under them with a
compare-and-swap on the epoch and a signed commit receipt, and runs each
lease's recovery on demand. Below it are the sharp tools:

Before an agent mutates a system of record, the system grants a lease
(:func:`grant`): a signed promise that the change can be undone within a
window, fenced by an epoch and bound to the digest of the pre-image, with the
inverse payload of one of four recovery modes staged. :func:`verify_lease`
checks one fail closed; every refusal is ``LEASE_REFUSED`` carrying a signed
rejection receipt that :func:`verify_rejection` checks offline.
"""

from hatp.lease._actions import Action
from hatp.lease._evidence import check_commit_receipt, check_receipt, evidence_invalid
from hatp.lease._issue import grant
from hatp.lease._model import (
    LEASE_ID_PATTERN,
    LEASE_MEDIA_TYPE,
    CompensationLease,
    LeaseBinding,
    LeaseCommit,
    LeaseRecovery,
    LeaseRejection,
    Mutation,
    RecoveryMode,
    RecoveryOutcome,
)
from hatp.lease._participant import LeasedOperation
from hatp.lease._receipts import verify_receipt, verify_rejection
from hatp.lease._recovery import Escrow, EscrowCase, Recovered
from hatp.lease._resources import Resources, State, TableResources
from hatp.lease._sor import Applied, LeaseObserver, SystemOfRecord
from hatp.lease._verify import MAX_CLOCK_SKEW, CheckedLease, inverse_problem, verify_lease

__all__ = [
    "LEASE_ID_PATTERN",
    "LEASE_MEDIA_TYPE",
    "MAX_CLOCK_SKEW",
    "Action",
    "Applied",
    "CheckedLease",
    "CompensationLease",
    "Escrow",
    "EscrowCase",
    "LeaseBinding",
    "LeaseCommit",
    "LeaseObserver",
    "LeaseRecovery",
    "LeaseRejection",
    "LeasedOperation",
    "Mutation",
    "Recovered",
    "RecoveryMode",
    "RecoveryOutcome",
    "Resources",
    "State",
    "SystemOfRecord",
    "TableResources",
    "check_commit_receipt",
    "check_receipt",
    "evidence_invalid",
    "grant",
    "inverse_problem",
    "verify_lease",
    "verify_receipt",
    "verify_rejection",
]
