"""The system of record's side: granting a compensation lease (docs/spec.md §23)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from hatp.clock import Clock, format_time, parse_time
from hatp.evidence import SigningKey, digest, sign
from hatp.lease._model import CompensationLease, LeaseBinding, RecoveryMode
from hatp.lease._verify import inverse_problem
from hatp.version import PROTOCOL_VERSION

__all__ = ["grant"]


def grant(
    *,
    resource: str,
    state: Any,
    epoch: int,
    mutation: Mapping[str, Any],
    t_req_ms: int,
    mode: RecoveryMode,
    inverse: Mapping[str, Any] | None,
    key: SigningKey,
    issuer: str,
    clock: Clock,
    max_window_ms: int,
    binding: LeaseBinding | None = None,
    lease_id: str | None = None,
) -> dict[str, Any]:
    """Grant a signed lease on ``resource``, whose current ``state`` is at ``epoch``,
    covering the one ``mutation`` (``{action, params}``) it names by digest.

    This signs what it is given; :class:`SystemOfRecord.grant` is the system
    of record's recipe, which reads the state and stages the inverse itself.

    The window granted is ``min(t_req_ms, max_window_ms)``, from now; a lease
    granted less than it asks for is still signed, and verifiers refuse it
    (``RECOVERY_WINDOW_INEQUALITY``). The fence epoch is ``epoch + 1`` and the
    pre-image hash the digest of ``state``. For ``SNAPSHOT_RESTORE`` pass
    ``inverse=None`` to stage ``{"snapshot": state}``.

    Returns:
        The signed lease, as its wire dict.

    Raises:
        ValueError: a negative window or epoch, or an inverse payload that does
            not have its mode's shape (the lease would be refused).
        InvalidJson: ``state`` or ``inverse`` has no canonical form.
    """
    if t_req_ms < 0 or max_window_ms < 0 or epoch < 0:
        raise ValueError("windows and epochs are never negative")
    pre_image = digest(state)
    if inverse is None and mode is RecoveryMode.SNAPSHOT_RESTORE:
        inverse = {"snapshot": state}
    staged = dict(inverse) if inverse is not None else None
    problem = inverse_problem(mode.value, staged, pre_image)
    if problem is not None:
        raise ValueError(f"cannot stage the inverse for {mode.value}: {problem}")
    granted = min(t_req_ms, max_window_ms)
    issued = parse_time(format_time(clock.now()))  # the wire keeps milliseconds
    lease = CompensationLease(
        hatp_version=PROTOCOL_VERSION,
        kind="compensation-lease",
        lease_id=lease_id or f"lease-{secrets.token_urlsafe(12)}",
        resource=resource,
        t_req_ms=t_req_ms,
        t_granted_ms=granted,
        issued_at=format_time(issued),
        expires_at=format_time(issued + timedelta(milliseconds=granted)),
        cas_fence_epoch=epoch + 1,
        pre_image_state_hash=pre_image,
        mutation_digest=digest(dict(mutation)),
        recovery_mode=mode.value,
        inverse=staged,
        inverse_digest=digest(staged),
        binding=binding,
        issuer=issuer,
    )
    wire = lease.to_wire()
    del wire["signature"]
    return sign(wire, key)
