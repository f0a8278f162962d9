"""A client's checks of what a system of record hands back (docs/spec.md §23-§24).

Whatever the transport (HTTP's ``Agent-Commit-Receipt``, MCP's
``_meta.commitReceipt``), an agent that sent a mutation under a lease checks
the receipt it got back the same way: it verifies offline against the
agent's own keyring, it is of the kind expected, and it is the receipt of
this lease (its id and digest, resource, mutation and issuer). A failure is
``EVIDENCE_INVALID``: not a refusal by the system of record (the mutation
may have run), but evidence the agent will not rely on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from hatp.errors import EvidenceInvalid, HatpError, SignatureInvalid
from hatp.evidence import Keyring, digest
from hatp.lease._model import LeaseCommit, LeaseRecovery, LeaseRejection
from hatp.lease._receipts import verify_receipt

__all__ = ["check_commit_receipt", "check_receipt", "evidence_invalid"]

_Kind = TypeVar("_Kind", LeaseCommit, LeaseRecovery, LeaseRejection)


def check_receipt(
    receipt: Mapping[str, Any], keyring: Keyring, kind: type[_Kind], what: str
) -> _Kind:
    """Check a receipt offline (:func:`verify_receipt`) and that it is of ``kind``.

    Raises:
        EvidenceInvalid: ``SHAPE`` or ``SIGNATURE`` (``data.what`` is ``what``).
    """
    try:
        parsed = verify_receipt(receipt, keyring)
    except SignatureInvalid as exc:
        raise evidence_invalid("SIGNATURE", what, exc.message, signature=exc.reason) from None
    except HatpError as exc:
        raise evidence_invalid("SHAPE", what, exc.message) from None
    if not isinstance(parsed, kind):
        raise evidence_invalid("SHAPE", what, f"it is a {receipt.get('kind')!r} receipt")
    return parsed


def check_commit_receipt(
    receipt: Mapping[str, Any], lease: Mapping[str, Any], keyring: Keyring
) -> LeaseCommit:
    """Check the commit receipt of a mutation sent under ``lease``; return it parsed.

    Raises:
        EvidenceInvalid: ``SHAPE``, ``SIGNATURE``, or ``MISMATCH`` (a receipt of
            another lease, resource, mutation or system of record).
    """
    what = "commit receipt"
    commit = check_receipt(receipt, keyring, LeaseCommit, what)
    for member, asked, found in (
        ("leaseId", lease.get("leaseId"), commit.lease_id),
        ("leaseDigest", _digest_of(lease), commit.lease_digest),
        ("resource", lease.get("resource"), commit.resource),
        ("mutationDigest", lease.get("mutationDigest"), commit.mutation_digest),
        ("issuer", lease.get("issuer"), commit.issuer),
    ):
        if asked != found:
            raise evidence_invalid(
                "MISMATCH", what, f"{member} is {found!r}, not the lease's {asked!r}"
            )
    return commit


def evidence_invalid(reason: str, what: str, detail: str, **data: Any) -> EvidenceInvalid:
    """The refusal of ``what`` a system of record handed back, for ``reason``."""
    return EvidenceInvalid(
        f"the {what} the system of record handed back is refused, {reason}: {detail}",
        reason=reason,
        what=what,
        **data,
    )


def _digest_of(doc: Mapping[str, Any]) -> str | None:
    try:
        return digest(dict(doc))
    except HatpError:
        return None
