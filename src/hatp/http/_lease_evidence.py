"""What a lease client checks before it trusts what a system of record handed back.

A lease from a grant, a commit receipt from a mutation, a recovery receipt:
each is checked against the client's keyring and against what was asked,
and refused with one error, ``EVIDENCE_INVALID`` (``data.reason`` says
which check), before the caller sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from hatp.errors import HatpError, SignatureInvalid
from hatp.evidence import Keyring, digest, parse_json, verify
from hatp.http._lease_headers import RECEIPT_HEADER, strict_decode
from hatp.lease import (
    CompensationLease,
    EscrowCase,
    LeaseBinding,
    LeaseCommit,
    LeaseRecovery,
    RecoveryMode,
    check_commit_receipt,
    check_receipt,
    evidence_invalid,
)
from hatp.model import first_error
from hatp.version import require_supported

__all__ = [
    "check_receipt",
    "checked_case",
    "checked_commit",
    "checked_lease",
    "lease_receipt",
    "read_document",
]

_Kind = TypeVar("_Kind", LeaseCommit, LeaseRecovery)


def read_document(raw: bytes, what: str) -> dict[str, Any]:
    """``raw`` read as a strict JSON object.

    Raises:
        EvidenceInvalid: ``ENCODING``, it is not one.
    """
    try:
        doc = parse_json(raw)
    except HatpError as exc:
        raise evidence_invalid("ENCODING", what, f"it is not strict JSON: {exc.message}") from None
    if not isinstance(doc, dict):
        raise evidence_invalid("ENCODING", what, "it is not a JSON object")
    return doc


def checked_lease(
    doc: Mapping[str, Any],
    keyring: Keyring,
    *,
    resource: str,
    mutation: Mapping[str, Any],
    mode: RecoveryMode,
    binding: LeaseBinding | None,
) -> CompensationLease:
    """Check a granted lease: its form, its signature, and that it is the lease asked for.

    Raises:
        EvidenceInvalid: ``SHAPE``, ``SIGNATURE`` or ``MISMATCH``.
    """
    what = "lease"
    try:
        require_supported(doc, "lease")
        lease = CompensationLease.model_validate(dict(doc))
    except (ValidationError, HatpError) as exc:
        raise evidence_invalid("SHAPE", what, f"not a CompensationLease: {_first(exc)}") from None
    if lease.signature is None:
        raise evidence_invalid("SIGNATURE", what, "it carries no signature")
    try:
        signer = verify(doc, keyring)
    except SignatureInvalid as exc:
        raise evidence_invalid("SIGNATURE", what, exc.message, signature=exc.reason) from None
    if signer.issuer != lease.issuer:
        raise evidence_invalid(
            "SIGNATURE", what, f"signed by a key of {signer.issuer!r}, not {lease.issuer}"
        )
    wanted = None if binding is None else binding.to_wire()
    got = None if lease.binding is None else lease.binding.to_wire()
    for member, asked, found in (
        ("resource", resource, lease.resource),
        ("mutationDigest", digest(dict(mutation)), lease.mutation_digest),
        ("recoveryMode", mode.value, lease.recovery_mode),
        ("binding", wanted, got),
    ):
        if asked != found:
            raise evidence_invalid(
                "MISMATCH", what, f"{member} is {found!r}, not {asked!r} as asked"
            )
    return lease


def checked_commit(
    header: bytes | None, lease: Mapping[str, Any], keyring: Keyring
) -> tuple[dict[str, Any], LeaseCommit]:
    """Check the ``Agent-Commit-Receipt`` of a mutation sent under ``lease``.

    Returns:
        The receipt and its parsed form.

    Raises:
        EvidenceInvalid: ``MISSING``, ``ENCODING``, ``SHAPE``, ``SIGNATURE`` or
            ``MISMATCH`` (a receipt of another lease, resource or mutation).
    """
    what = "commit receipt"
    if header is None:
        raise evidence_invalid("MISSING", what, f"the answer carries no {RECEIPT_HEADER} header")
    raw = strict_decode(header)
    if raw is None:
        raise evidence_invalid("ENCODING", what, f"{RECEIPT_HEADER} is not unpadded base64url")
    receipt = read_document(raw, what)
    commit = check_commit_receipt(receipt, lease, keyring)
    return receipt, commit


def lease_receipt(
    receipt: object, keyring: Keyring, kind: type[_Kind], lease_id: str, what: str
) -> tuple[dict[str, Any], _Kind]:
    """Check a receipt of ``kind`` that must name lease ``lease_id``.

    Raises:
        EvidenceInvalid: ``SHAPE``, ``SIGNATURE`` or ``MISMATCH`` (another lease's).
    """
    if not isinstance(receipt, dict):
        raise evidence_invalid("SHAPE", what, "it is not a JSON object")
    parsed = check_receipt(receipt, keyring, kind, what)
    if parsed.lease_id != lease_id:
        raise evidence_invalid(
            "MISMATCH", what, f"it names lease {parsed.lease_id!r}, not {lease_id!r}"
        )
    return receipt, parsed


def checked_case(doc: object, lease_id: str) -> EscrowCase:
    """An escrow case from its JSON form (see :func:`hatp.http.lease_routes`).

    Raises:
        EvidenceInvalid: ``SHAPE``, or ``MISMATCH`` (a case of another lease).
    """
    what = "escrow case"
    texts = ("leaseId", "resource", "address", "instructions", "preImageStateHash")
    if (
        not isinstance(doc, dict)
        or set(doc) != {*texts, "preImage"}
        or not all(isinstance(doc[k], str) for k in texts)
        or not isinstance(doc["preImage"], dict)
    ):
        raise evidence_invalid("SHAPE", what, f"a case is exactly {{{', '.join(texts)}, preImage}}")
    if doc["leaseId"] != lease_id:
        raise evidence_invalid("MISMATCH", what, f"it is the case of {doc['leaseId']!r}")
    return EscrowCase(
        lease_id=doc["leaseId"],
        resource=doc["resource"],
        address=doc["address"],
        instructions=doc["instructions"],
        pre_image_state_hash=doc["preImageStateHash"],
        pre_image=doc["preImage"],
    )


def _first(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        where, problem = first_error(exc)
        return f"/{where}: {problem}"
    return exc.message if isinstance(exc, HatpError) else str(exc)
