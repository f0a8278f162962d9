"""What an agent checks of a commit receipt handed back, whatever carried it (docs/spec.md §23)."""

from __future__ import annotations

from typing import Any

import pytest

from hatp.errors import EVIDENCE_REASONS, EvidenceInvalid
from hatp.evidence import Keyring, SigningKey, sign
from hatp.lease import (
    LeaseCommit,
    LeaseRecovery,
    SystemOfRecord,
    check_commit_receipt,
    check_receipt,
)
from lease.sor_world import CLOSE, REASSIGN, RESOURCE, grant, public_keyring


def _applied(sor: SystemOfRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    lease = grant(sor)
    return lease, sor.apply(lease, resource=RESOURCE, mutation=CLOSE).receipt


def _reason(receipt: dict[str, Any], lease: dict[str, Any], keyring: Keyring) -> str:
    with pytest.raises(EvidenceInvalid) as caught:
        check_commit_receipt(receipt, lease, keyring)
    assert caught.value.reason in EVIDENCE_REASONS
    return caught.value.reason


def test_the_receipt_of_this_lease_passes(sor: SystemOfRecord) -> None:
    lease, receipt = _applied(sor)
    commit = check_commit_receipt(receipt, lease, public_keyring())
    assert (commit.lease_id, commit.resource) == (lease["leaseId"], RESOURCE)


def test_the_receipt_of_another_lease_is_a_mismatch(sor: SystemOfRecord) -> None:
    lease, receipt = _applied(sor)
    other = grant(sor, mutation=REASSIGN)
    assert _reason(receipt, other, public_keyring()) == "MISMATCH"
    assert _reason(receipt, {**lease, "issuer": "https://crm.example"}, public_keyring()) == (
        "MISMATCH"
    )


def test_a_forged_or_untrusted_receipt_is_refused(sor: SystemOfRecord) -> None:
    lease, receipt = _applied(sor)
    assert _reason({**receipt, "epoch": 99}, lease, public_keyring()) == "SIGNATURE"
    outsider = SigningKey.from_seed(bytes([77]) * 32, "tickets-1")
    body = {k: v for k, v in receipt.items() if k != "signature"}
    assert _reason(sign(body, outsider), lease, public_keyring()) == "SIGNATURE"


def test_a_receipt_of_another_kind_is_refused_by_shape(sor: SystemOfRecord) -> None:
    lease, _ = _applied(sor)
    recovery = sor.recover(lease["leaseId"]).receipt
    assert _reason(recovery, lease, public_keyring()) == "SHAPE"
    assert isinstance(check_receipt(recovery, public_keyring(), LeaseRecovery, "r"), LeaseRecovery)
    with pytest.raises(EvidenceInvalid):
        check_receipt(recovery, public_keyring(), LeaseCommit, "r")
