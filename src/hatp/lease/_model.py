"""Wire types of compensation leases, PTCL (docs/spec.md §23).

A system of record grants a :class:`CompensationLease` before an agent
mutates one of its resources: a signed promise that the change can be undone
within a window, fenced by an epoch and bound to the digest of the pre-image.
A verifier that refuses one signs a :class:`LeaseRejection` receipt.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from hatp.model import Digest, Kid, WireModel, WireTime
from hatp.model.signature import Signature

__all__ = [
    "LEASE_ID_PATTERN",
    "LEASE_MEDIA_TYPE",
    "CompensationLease",
    "LeaseBinding",
    "LeaseCommit",
    "LeaseRecovery",
    "LeaseRejection",
    "Mutation",
    "RecoveryMode",
    "RecoveryOutcome",
]

#: The media type of a lease on the wire.
LEASE_MEDIA_TYPE = "application/agent-tx-lease+json"
#: A lease id: ``lease-`` and 8 to 64 base64url characters.
LEASE_ID_PATTERN = r"^lease-[A-Za-z0-9_-]{8,64}$"

LeaseId = Annotated[str, StringConstraints(pattern=LEASE_ID_PATTERN)]
#: A resource or system-of-record id: 1 to 512 printable characters, no spaces.
ResourceId = Annotated[str, StringConstraints(pattern=r"^[!-~]{1,512}$")]
#: A recovery mode as written on the wire; the mode rule, not the shape, checks its value.
ModeName = Annotated[str, StringConstraints(pattern=r"^[A-Z_]{1,64}$")]


class RecoveryMode(StrEnum):
    """The four recovery modes of the IETF Agent Transactional Recovery Modes registry."""

    COMPENSATING_ACTION = "COMPENSATING_ACTION"
    SNAPSHOT_RESTORE = "SNAPSHOT_RESTORE"
    DRY_RUN_SHADOW = "DRY_RUN_SHADOW"
    HUMAN_ESCROW = "HUMAN_ESCROW"


class Mutation(WireModel):
    """A typed mutation of one resource: an action the system of record offers, and its params."""

    action: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    params: dict[str, Any]


class LeaseBinding(WireModel):
    """The transaction and plan a lease is used inside."""

    txn_id: ResourceId
    plan_digest: Digest


class CompensationLease(WireModel):
    """A system of record's signed recovery reservation for one resource.

    ``tGrantedMs`` is the window granted, from ``issuedAt`` to ``expiresAt``;
    ``mutationDigest`` binds the one mutation it covers;
    ``casFenceEpoch`` is the epoch the mutation will move the resource to (one
    above the epoch it was granted at); ``preImageStateHash`` the digest of the
    resource's state when granted; ``inverse`` the payload staged for
    ``recoveryMode`` and ``inverseDigest`` its digest.
    """

    hatp_version: str
    kind: Literal["compensation-lease"]
    lease_id: LeaseId
    resource: ResourceId
    t_req_ms: int = Field(ge=0, le=10**12)
    t_granted_ms: int = Field(ge=0, le=10**12)
    issued_at: WireTime
    expires_at: WireTime
    cas_fence_epoch: int = Field(ge=1, le=2**63 - 1)
    pre_image_state_hash: Digest
    mutation_digest: Digest = Field(description="digest of the mutation the lease covers")
    recovery_mode: ModeName
    inverse: dict[str, Any] | None
    inverse_digest: Digest | None
    binding: LeaseBinding | None
    issuer: ResourceId
    signature: Signature | None = None


class LeaseRejection(WireModel):
    """A verifier's signed receipt for a refused lease, auditable on its own."""

    hatp_version: str
    kind: Literal["lease-rejection"]
    lease_id: LeaseId | None = Field(description="null when the lease id could not be read")
    lease_digest: Digest = Field(description="digest of the lease as received")
    resource: ResourceId
    reason: str
    rule: str
    at: WireTime
    verifier: Kid = Field(description="the kid of the key that signed this receipt")
    signature: Signature


class RecoveryOutcome(StrEnum):
    """What running a lease's recovery did."""

    RESTORED = "restored"  # the resource is its pre-image again
    VOIDED = "voided"  # the mutation never ran; the lease can no longer be used
    ESCROWED = "escrowed"  # a person was asked to undo it (HUMAN_ESCROW)


class LeaseCommit(WireModel):
    """The system of record's signed receipt for a mutation applied under a lease.

    ``epoch`` is the resource's epoch after the mutation (the lease's fence);
    ``postImageStateHash`` the digest of the state the mutation left.
    """

    hatp_version: str
    kind: Literal["lease-commit"]
    lease_id: LeaseId
    lease_digest: Digest
    resource: ResourceId
    mutation_digest: Digest
    epoch: int = Field(ge=1, le=2**63 - 1)
    pre_image_state_hash: Digest
    post_image_state_hash: Digest
    binding: LeaseBinding | None
    at: WireTime
    issuer: ResourceId
    signature: Signature


class LeaseRecovery(WireModel):
    """The system of record's signed receipt for running a lease's recovery.

    ``restored``: ``restoredStateHash`` equals the lease's ``preImageStateHash``
    and ``epoch`` is the resource's new epoch (recovery moves it up, never back);
    ``voided`` and ``escrowed`` restore nothing (``restoredStateHash`` null).
    ``by`` is who restored it: ``null`` for the system of record itself, else
    the authenticated person who did (HUMAN_ESCROW).
    """

    hatp_version: str
    kind: Literal["lease-recovery"]
    lease_id: LeaseId
    lease_digest: Digest
    resource: ResourceId
    recovery_mode: ModeName
    outcome: RecoveryOutcome = Field(strict=False)
    epoch: int = Field(ge=0, le=2**63 - 1)
    restored_state_hash: Digest | None
    by: str | None = Field(max_length=512)
    at: WireTime
    issuer: ResourceId
    signature: Signature
