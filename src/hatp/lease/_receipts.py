"""Signed lease receipts (docs/spec.md §23): rejections, commits and recoveries.

Every refused lease leaves a ``lease-rejection`` signed by its verifier;
every mutation applied under a lease a ``lease-commit``, and every recovery a
``lease-recovery``, signed by the system of record. :func:`verify_receipt`
checks any of the three offline, with the public keys alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar, cast

from pydantic import ValidationError

from hatp.clock import format_time
from hatp.errors import InvalidJson, SignatureInvalid
from hatp.evidence import Keyring, SigningKey, sign, verify
from hatp.lease._model import LeaseCommit, LeaseRecovery, LeaseRejection
from hatp.model import first_error
from hatp.version import PROTOCOL_VERSION

__all__ = ["rejection_receipt", "signed_receipt", "verify_receipt", "verify_rejection"]

_KINDS: dict[str, type[LeaseRejection | LeaseCommit | LeaseRecovery]] = {
    "lease-rejection": LeaseRejection,
    "lease-commit": LeaseCommit,
    "lease-recovery": LeaseRecovery,
}


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
    return signed_receipt(
        "lease-rejection",
        {
            "leaseId": lease_id,
            "leaseDigest": lease_digest,
            "resource": resource,
            "reason": reason,
            "rule": rule,
            "verifier": key.kid,
        },
        at=at,
        key=key,
    )


def signed_receipt(
    kind: str, members: Mapping[str, Any], *, at: datetime, key: SigningKey
) -> dict[str, Any]:
    """Return the receipt of ``kind`` with ``members``, its version and time, signed by ``key``."""
    body = {"hatpVersion": PROTOCOL_VERSION, "kind": kind, **members, "at": format_time(at)}
    return sign(body, key)


def verify_receipt(
    receipt: Mapping[str, Any], keyring: Keyring
) -> LeaseRejection | LeaseCommit | LeaseRecovery:
    """Check a lease receipt of any of the three kinds offline; return it parsed.

    A rejection must be signed by the key it names as ``verifier``; a commit or
    a recovery by a key vouched for by the system of record it names as ``issuer``.

    Raises:
        InvalidJson: it is not a lease receipt (``data.where`` names the member).
        SignatureInvalid: its signature does not verify against ``keyring``, or
            it was signed by a key other than the one it names.
        VersionUnsupported: its ``hatpVersion`` is unknown.
    """
    model = _KINDS.get(str(receipt.get("kind")))
    if model is None:
        raise InvalidJson(
            f"not a lease receipt: kind is {receipt.get('kind')!r}, not one of {sorted(_KINDS)}",
            where="/kind",
        )
    return _checked(_parse(model, receipt), receipt, keyring)


def verify_rejection(receipt: Mapping[str, Any], keyring: Keyring) -> LeaseRejection:
    """Check a rejection receipt offline; return it parsed (see :func:`verify_receipt`).

    Raises:
        InvalidJson: it is not a ``lease-rejection``.
        SignatureInvalid: as :func:`verify_receipt`.
        VersionUnsupported: its ``hatpVersion`` is unknown.
    """
    return _checked(_parse(LeaseRejection, receipt), receipt, keyring)


_Receipt = TypeVar("_Receipt", bound=LeaseRejection | LeaseCommit | LeaseRecovery)


def _parse(model: type[_Receipt], receipt: Mapping[str, Any]) -> _Receipt:
    try:
        parsed = cast(_Receipt, model.model_validate(receipt))
    except ValidationError as exc:
        where, problem = first_error(exc)
        raise InvalidJson(f"not a lease receipt: {problem}", where="/" + where) from None
    return parsed


def _checked(parsed: _Receipt, receipt: Mapping[str, Any], keyring: Keyring) -> _Receipt:
    signer = verify(receipt, keyring)
    if isinstance(parsed, LeaseRejection):
        if signer.kid != parsed.verifier:
            raise SignatureInvalid(
                "BAD_SIGNATURE",
                f"the receipt names verifier {parsed.verifier!r} but {signer.kid!r} signed it",
                kid=signer.kid,
            )
    elif signer.issuer != parsed.issuer:
        raise SignatureInvalid(
            "BAD_SIGNATURE",
            f"the receipt names system of record {parsed.issuer!r} but a key of "
            f"{signer.issuer!r} signed it",
            kid=signer.kid,
        )
    return parsed
