"""Signed rejection receipts: every refused lease leaves one (docs/spec.md §23)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from hatp.clock import format_time
from hatp.errors import InvalidJson, SignatureInvalid
from hatp.evidence import Keyring, SigningKey, sign, verify
from hatp.lease._model import LeaseRejection
from hatp.version import PROTOCOL_VERSION

__all__ = ["rejection_receipt", "verify_rejection"]


def rejection_receipt(
    *,
    lease_id: str | None,
    lease_digest: str,
    resource: str,
    reason: str,
    rule: str,
    at: datetime,
    key: SigningKey,
) -> dict[str, Any]:
    """Return a ``lease-rejection`` receipt signed by ``key`` (its kid is the verifier)."""
    return sign(
        {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "lease-rejection",
            "leaseId": lease_id,
            "leaseDigest": lease_digest,
            "resource": resource,
            "reason": reason,
            "rule": rule,
            "at": format_time(at),
            "verifier": key.kid,
        },
        key,
    )


def verify_rejection(receipt: Mapping[str, Any], keyring: Keyring) -> LeaseRejection:
    """Check a rejection receipt offline; return it parsed.

    Raises:
        InvalidJson: it is not a ``lease-rejection`` (``data.where`` names the member).
        SignatureInvalid: its signature does not verify against ``keyring``, or
            it was signed by a key other than the ``verifier`` it names.
        VersionUnsupported: its ``hatpVersion`` is unknown.
    """
    try:
        parsed = LeaseRejection.model_validate(receipt)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "/" + "/".join(str(p) for p in first["loc"])
        raise InvalidJson(f"not a lease-rejection receipt: {first['msg']}", where=where) from None
    signer = verify(receipt, keyring)
    if signer.kid != parsed.verifier:
        raise SignatureInvalid(
            "BAD_SIGNATURE",
            f"the receipt names verifier {parsed.verifier!r} but {signer.kid!r} signed it",
            kid=signer.kid,
        )
    return parsed
