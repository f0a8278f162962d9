"""Verifying a compensation lease, fail closed (docs/spec.md §23).

:func:`verify_lease` returns only after every rule passed, in the order of
the spec's table; the first that fails raises ``LEASE_REFUSED`` carrying a
signed rejection receipt. A check that cannot run (a value it cannot read)
refuses under its own rule: absent never counts as a pass.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

from pydantic import ValidationError

from hatp import _checks
from hatp.clock import Clock, parse_time
from hatp.errors import HatpError, LeaseRefused
from hatp.evidence import Keyring, SigningKey, Verified, digest, digest_bytes, parse_json, verify
from hatp.lease._model import (
    LEASE_ID_PATTERN,
    CompensationLease,
    LeaseBinding,
    RecoveryMode,
)
from hatp.lease._receipts import rejection_receipt
from hatp.model import first_error, parse_address
from hatp.version import require_supported

__all__ = ["MAX_CLOCK_SKEW", "CheckedLease", "inverse_problem", "lease_refusal", "verify_lease"]

_log = logging.getLogger(__name__)

#: How far ahead of the verifier's clock a lease may have been issued.
MAX_CLOCK_SKEW = timedelta(seconds=60)

_RULE_REASONS = {
    "LEASE-SHAPE": "SHAPE",
    "LEASE-SIGNED": "SIGNATURE",
    "LEASE-BINDING": "BINDING",
    "LEASE-DIGEST": "DIGEST_MISMATCH",
    "LEASE-MODE": "FOUR_MODE_RESERVATION_MANDATE",
    "LEASE-SKEW": "CLOCK_SKEW",
    "LEASE-WINDOW": "RECOVERY_WINDOW_INEQUALITY",
    "LEASE-FENCE": "MONOTONIC_CAS_FENCING",
    # The system of record's own rules, checked after these (hatp.lease.SystemOfRecord).
    "LEASE-GRANTED": "NOT_GRANTED",
    "LEASE-SHADOW": "SHADOW_DIVERGED",
}


@dataclass(frozen=True, slots=True)
class CheckedLease:
    """A lease that passed every rule: the lease, who signed it, and its digest."""

    lease: CompensationLease
    signer: Verified
    digest: str


def inverse_problem(mode: str, inverse: Mapping[str, Any] | None, pre_image: str) -> str | None:
    """Return what is wrong with ``inverse`` as the payload of ``mode``, or ``None``.

    The shapes (exactly these members):
    ``COMPENSATING_ACTION`` ``{action: non-empty string, params: object}``;
    ``SNAPSHOT_RESTORE`` ``{snapshot: any JSON}`` whose digest is ``pre_image``;
    ``DRY_RUN_SHADOW`` ``{shadow: object, result: any JSON}``;
    ``HUMAN_ESCROW`` ``{address: human:// address, instructions: non-empty string}``.
    """
    try:
        return _inverse_problem(mode, inverse, pre_image)
    except HatpError as exc:  # an address or a snapshot that cannot be read
        return str(exc)


def _inverse_problem(mode: str, inverse: Mapping[str, Any] | None, pre_image: str) -> str | None:
    try:
        known = RecoveryMode(mode)
    except ValueError:
        return f"{mode!r} is not one of the four recovery modes"
    if inverse is None:
        return f"no inverse payload is staged for {mode}"
    members = set(inverse)
    if known is RecoveryMode.COMPENSATING_ACTION:
        if members != {"action", "params"}:
            return "a compensating action is exactly {action, params}"
        if not isinstance(inverse["action"], str) or not inverse["action"]:
            return "the compensating action names its action"
        if not isinstance(inverse["params"], dict):
            return "the compensating action's params are an object"
    elif known is RecoveryMode.SNAPSHOT_RESTORE:
        if members != {"snapshot"}:
            return "a snapshot restore is exactly {snapshot}"
        if digest(inverse["snapshot"]) != pre_image:
            return "the snapshot's digest is not the leased pre-image"
    elif known is RecoveryMode.DRY_RUN_SHADOW:
        if members != {"shadow", "result"}:
            return "a dry-run shadow is exactly {shadow, result}"
        if not isinstance(inverse["shadow"], dict):
            return "the shadow is the resource's state as an object"
    else:
        if members != {"address", "instructions"}:
            return "a human escrow is exactly {address, instructions}"
        if not parse_address(inverse["address"]).is_human:
            return "the escrow address names people (human://)"
        if not isinstance(inverse["instructions"], str) or not inverse["instructions"]:
            return "the escrow carries instructions for the person"
    return None


class _Refuser:
    """Raises a refusal with its signed receipt; runs checks so a crash refuses too."""

    def __init__(self, doc: object, lease_digest: str, resource: str, key: SigningKey) -> None:
        self.resource = resource
        self.key = key
        self.lease_id = _readable_id(doc)
        self.lease_digest = lease_digest

    def refuse(self, rule: str, message: str, now: datetime) -> NoReturn:
        raise self.error(rule, message, now)

    def error(self, rule: str, message: str, now: datetime) -> LeaseRefused:
        reason = _RULE_REASONS[rule]
        receipt = rejection_receipt(
            lease_id=self.lease_id,
            lease_digest=self.lease_digest,
            resource=self.resource,
            reason=reason,
            rule=rule,
            at=now,
            key=self.key,
        )
        return LeaseRefused(
            f"lease refused, {reason} [{rule}]: {message}",
            reason=reason,
            rule=rule,
            receipt=receipt,
        )

    def check(self, rule: str, now: datetime, problem: Callable[[], str | None]) -> None:
        try:
            found = problem()
        except LeaseRefused:
            raise
        except HatpError as exc:
            found = str(exc)
        except Exception as exc:  # a check that cannot run refuses
            _log.warning("lease check %s could not run", rule, exc_info=True)
            found = f"the check could not run: {exc}"
        if found is not None:
            self.refuse(rule, found, now)


def verify_lease(
    lease_doc: Mapping[str, Any] | bytes,
    *,
    resource: str,
    current_state: Any,
    current_epoch: int,
    mutation: Mapping[str, Any],
    keyring: Keyring,
    clock: Clock,
    verifier_key: SigningKey,
    binding: LeaseBinding | None = None,
    fence_token: int | None = None,
) -> CheckedLease:
    """Check a lease before ``mutation`` (``{action, params}``) of ``resource`` runs.

    ``current_state`` and ``current_epoch`` are the resource's now; ``binding``
    the transaction and plan the mutation runs in, if any; ``fence_token`` the
    epoch the writer says it writes at (HTTP ``Agent-Fence-Token``), if it said.

    Returns:
        The checked lease, once every rule passed.

    Raises:
        LeaseRefused: at the first rule that fails, in this order: LEASE-SHAPE,
            LEASE-SIGNED, LEASE-BINDING, LEASE-DIGEST, LEASE-MODE, LEASE-SKEW,
            LEASE-WINDOW, LEASE-FENCE; ``data.receipt`` is the signed receipt.
    """
    now = clock.now()
    doc, lease_digest = _read(lease_doc)
    refuser = _Refuser(doc, lease_digest, resource, verifier_key)
    # 1. [LEASE-SHAPE] The CompensationLease form, in a version this build reads.
    lease = _shape(doc, refuser, now)
    wire = doc if isinstance(doc, dict) else lease.to_wire()
    # 2. [LEASE-SIGNED] Signed by a trusted key of the system of record it names.
    signer = Verified("(unchecked)", "(unchecked)")
    if _checks.is_on("LEASE-SIGNED"):

        def signed() -> str | None:
            nonlocal signer
            if lease.signature is None:
                return "the lease carries no signature"
            signer = verify(wire, keyring)
            if signer.issuer != lease.issuer:
                return f"signed by a key of {signer.issuer!r}, not of {lease.issuer!r}"
            return None

        refuser.check("LEASE-SIGNED", now, signed)
    # 3. [LEASE-BINDING] For this resource, and this transaction when used in one.
    if _checks.is_on("LEASE-BINDING"):
        refuser.check("LEASE-BINDING", now, lambda: _binding_problem(lease, resource, binding))
    # 4. [LEASE-DIGEST] The digests bind the staged inverse and the plan.
    if _checks.is_on("LEASE-DIGEST"):
        refuser.check("LEASE-DIGEST", now, lambda: _digest_problem(lease, mutation, binding))
    # 5. [LEASE-MODE] One of the four modes, with its inverse payload staged.
    if _checks.is_on("LEASE-MODE"):
        refuser.check(
            "LEASE-MODE",
            now,
            lambda: inverse_problem(lease.recovery_mode, lease.inverse, lease.pre_image_state_hash),
        )
    issued, expires = parse_time(lease.issued_at), parse_time(lease.expires_at)
    # 6. [LEASE-SKEW] Not issued more than 60 s ahead of this clock.
    if _checks.is_on("LEASE-SKEW") and issued - now > MAX_CLOCK_SKEW:
        refuser.refuse("LEASE-SKEW", f"issued {issued - now} ahead of this clock (max 60 s)", now)
    # 7. [LEASE-WINDOW] t_req_ms <= t_granted_ms, and not expired.
    if _checks.is_on("LEASE-WINDOW"):
        if lease.t_req_ms > lease.t_granted_ms:
            refuser.refuse(
                "LEASE-WINDOW",
                f"needs {lease.t_req_ms} ms but was granted {lease.t_granted_ms} ms",
                now,
            )
        if now >= expires:
            refuser.refuse("LEASE-WINDOW", f"the lease expired at {lease.expires_at}", now)
    # 8. [LEASE-FENCE] The resource is still below the fence and still the pre-image.
    if _checks.is_on("LEASE-FENCE"):
        refuser.check(
            "LEASE-FENCE",
            now,
            lambda: _fence_problem(lease, current_state, current_epoch, fence_token),
        )
    return CheckedLease(lease, signer, refuser.lease_digest)


def lease_refusal(
    lease_doc: Mapping[str, Any] | bytes,
    *,
    resource: str,
    rule: str,
    message: str,
    verifier_key: SigningKey,
    now: datetime,
) -> LeaseRefused:
    """Return the refusal of ``lease_doc`` under ``rule`` (one checked after
    :func:`verify_lease`, by the system of record), carrying its signed receipt."""
    doc, lease_digest = _read(lease_doc)
    return _Refuser(doc, lease_digest, resource, verifier_key).error(rule, message, now)


def _read(lease_doc: object) -> tuple[object, str]:
    """The lease as JSON (``None`` if it is not) and the digest its receipt names."""
    if isinstance(lease_doc, bytes):
        try:
            doc: object = parse_json(lease_doc)
        except Exception as exc:  # not JSON: the receipt names the bytes received
            _log.debug("the lease is not JSON: %s", exc)
            return None, digest_bytes(lease_doc)
    else:
        doc = lease_doc
    try:
        return doc, digest(doc)
    except Exception as exc:  # no canonical form: name what we can
        _log.debug("the lease has no canonical form: %s", exc)
        return None, digest_bytes(repr(doc).encode())


def _shape(doc: object, refuser: _Refuser, now: datetime) -> CompensationLease:
    if not isinstance(doc, dict):
        refuser.refuse("LEASE-SHAPE", "a lease is a JSON object", now)
    try:
        require_supported(doc, "lease")
        return _times_read(CompensationLease.model_validate(doc))
    except Exception as exc:
        _log.debug("the lease's shape is wrong: %s", exc)
        if _checks.is_on("LEASE-SHAPE"):
            refuser.refuse("LEASE-SHAPE", _first_error(exc), now)
    # A verifier without the shape check reads what it knows and ignores the rest.
    known = {f.alias or n for n, f in CompensationLease.model_fields.items()}
    try:
        lax = {k: v for k, v in doc.items() if k in known}
        return _times_read(CompensationLease.model_validate(lax))
    except Exception as exc:  # even a lax reader cannot go on: refuse anyway
        _log.debug("the lease cannot be read even laxly: %s", exc)
        refuser.refuse("LEASE-SHAPE", _first_error(exc), now)


def _times_read(lease: CompensationLease) -> CompensationLease:
    parse_time(lease.issued_at)  # the pattern is checked; this checks the calendar
    parse_time(lease.expires_at)
    return lease


def _binding_problem(
    lease: CompensationLease, resource: str, binding: LeaseBinding | None
) -> str | None:
    if lease.resource != resource:
        return f"the lease is for {lease.resource!r}, not {resource!r}"
    if binding is None and lease.binding is not None:
        return f"the lease is bound to transaction {lease.binding.txn_id!r}"
    if binding is not None and lease.binding is None:
        return f"the mutation runs in transaction {binding.txn_id!r}; the lease is unbound"
    if binding is not None and lease.binding is not None and lease.binding.txn_id != binding.txn_id:
        return f"the lease is bound to transaction {lease.binding.txn_id!r}"
    return None


def _digest_problem(
    lease: CompensationLease, mutation: Mapping[str, Any], binding: LeaseBinding | None
) -> str | None:
    if lease.mutation_digest != digest(dict(mutation)):
        return "the lease covers another mutation (mutationDigest is not its digest)"
    if lease.inverse is None and lease.inverse_digest is None:
        return None  # nothing staged, nothing to bind: LEASE-MODE refuses the lease
    if lease.inverse_digest != digest(lease.inverse):
        return "inverseDigest is not the digest of the staged inverse"
    bound = lease.binding
    if binding is not None and bound is not None and bound.plan_digest != binding.plan_digest:
        return "the lease's planDigest is not the plan's"
    return None


def _fence_problem(
    lease: CompensationLease, state: Any, epoch: int, token: int | None
) -> str | None:
    if token is not None and token != lease.cas_fence_epoch:
        return f"the writer's fence token {token} is not the lease's fence {lease.cas_fence_epoch}"
    if epoch >= lease.cas_fence_epoch:
        return f"the resource is at epoch {epoch}, at or past the fence {lease.cas_fence_epoch}"
    if digest(state) != lease.pre_image_state_hash:
        return "the resource's state is not the leased pre-image"
    return None


def _readable_id(doc: object) -> str | None:
    if isinstance(doc, dict):
        found = doc.get("leaseId")
        if isinstance(found, str) and re.fullmatch(LEASE_ID_PATTERN, found):
            return found
    return None


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return ": ".join(first_error(exc))
    return str(exc)
