"""Compensation leases (docs/spec.md §23): grant, verify fail closed, signed rejections."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

import hatp.lease
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import LEASE_REASONS, InvalidJson, LeaseRefused, SignatureInvalid
from hatp.evidence import canonicalize, digest, digest_bytes, sign
from hatp.lease import (
    CompensationLease,
    RecoveryMode,
    inverse_problem,
    verify_rejection,
)
from lease.world import (
    EPOCH,
    GATEWAY,
    MUTATION,
    OUTSIDER,
    RESOURCE,
    SOR,
    START,
    STATE,
    TICKETS,
    VERIFIER,
    check,
    keyring,
    lease,
    refused_by,
)


def _refusal(doc: dict[str, Any] | bytes, **kwargs: Any) -> LeaseRefused:
    with pytest.raises(LeaseRefused) as caught:
        check(doc, **kwargs)
    return caught.value


def test_the_package_exports_what_it_documents() -> None:
    for name in hatp.lease.__all__:
        assert hasattr(hatp.lease, name), name


@pytest.mark.parametrize("mode", list(RecoveryMode))
def test_a_granted_lease_of_each_mode_verifies(mode: RecoveryMode) -> None:
    doc = lease(mode)
    checked = check(doc)
    assert checked.lease.recovery_mode == mode.value
    assert checked.signer.issuer == TICKETS
    assert checked.digest == digest(doc)
    assert CompensationLease.model_validate(doc).to_wire() == doc


def test_grant_fences_one_above_the_epoch_and_hashes_the_pre_image() -> None:
    """[LEASE-FENCE] casFenceEpoch = epoch + 1; preImageStateHash = digest(state)."""
    doc = lease()
    assert doc["casFenceEpoch"] == EPOCH + 1
    assert doc["preImageStateHash"] == digest(STATE)
    assert doc["inverseDigest"] == digest(doc["inverse"])
    assert doc["issuedAt"] == "2026-12-02T09:00:00.000Z"
    assert doc["expiresAt"] == "2026-12-02T09:05:00.000Z"


def test_snapshot_restore_stages_a_snapshot_whose_digest_is_the_leased_pre_image() -> None:
    """[LEASE-MODE] SNAPSHOT_RESTORE: digest(inverse.snapshot) == preImageStateHash."""
    doc = lease(RecoveryMode.SNAPSHOT_RESTORE)
    assert doc["inverse"] == {"snapshot": STATE}
    assert digest(doc["inverse"]["snapshot"]) == doc["preImageStateHash"]
    check(doc)


def test_grant_caps_the_window_and_the_verifier_refuses_the_shortfall() -> None:
    """[LEASE-WINDOW] tGrantedMs = min(requested, max); less than asked is refused."""
    doc = lease(t_req_ms=600_000, max_window_ms=300_000)
    assert (doc["tReqMs"], doc["tGrantedMs"]) == (600_000, 300_000)
    assert _refusal(doc).reason == "RECOVERY_WINDOW_INEQUALITY"


def test_grant_refuses_to_sign_an_inverse_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="COMPENSATING_ACTION"):
        hatp.lease.grant(
            resource=RESOURCE,
            state=STATE,
            epoch=EPOCH,
            mutation=MUTATION,
            t_req_ms=1,
            mode=RecoveryMode.COMPENSATING_ACTION,
            inverse={"action": "tickets.update"},
            key=VERIFIER,
            issuer=TICKETS,
            clock=ManualClock(START),
            max_window_ms=1,
        )


def test_a_tampered_inverse_payload_is_refused() -> None:
    """[LEASE-SIGNED] then [LEASE-DIGEST]: a changed inverse breaks the signature and its digest."""
    doc = lease()
    doc["inverse"]["params"]["assignee"] = "mallory"
    assert refused_by(doc) == "LEASE-SIGNED"
    with unsafe_switched_off("LEASE-SIGNED"):
        assert refused_by(doc) == "LEASE-DIGEST"


@pytest.mark.parametrize(("ahead", "rule"), [(59, None), (60, None), (61, "LEASE-SKEW")])
def test_clock_skew_of_up_to_60_s_is_tolerated(ahead: int, rule: str | None) -> None:
    """[LEASE-SKEW] a lease issued by a clock 61 s ahead of the verifier's is refused."""
    assert refused_by(lease(at=START + timedelta(seconds=ahead))) == rule


def test_the_lease_is_good_until_the_instant_it_expires() -> None:
    """[LEASE-WINDOW] now >= expiresAt is refused."""
    assert refused_by(lease(), now=START + timedelta(seconds=299.999)) is None
    assert refused_by(lease(), now=START + timedelta(seconds=300)) == "LEASE-WINDOW"


def test_a_lease_arrives_as_bytes_too() -> None:
    assert check(canonicalize(lease())).lease.lease_id == "lease-ticket4711"


@pytest.mark.parametrize(
    "raw", [b"not json", b"[1, 2]", b'{"hatpVersion": "9.9"}', b'{"a": 1, "a": 2}']
)
def test_what_is_not_a_lease_is_refused_with_a_receipt(raw: bytes) -> None:
    """[LEASE-SHAPE] even unreadable bytes leave a receipt naming their digest."""
    refusal = _refusal(raw)
    assert (refusal.reason, refusal.data["rule"]) == ("SHAPE", "LEASE-SHAPE")
    receipt = verify_rejection(refusal.data["receipt"], keyring())
    assert receipt.lease_id is None
    if raw == b"not json":
        assert receipt.lease_digest == digest_bytes(raw)


def test_an_impossible_date_is_refused_by_shape() -> None:
    doc = lease()
    body = {k: v for k, v in doc.items() if k != "signature"}
    body["issuedAt"] = "2026-02-30T09:00:00.000Z"
    assert refused_by(sign(body, SOR)) == "LEASE-SHAPE"


def test_a_state_with_no_canonical_form_is_refused_not_crashed() -> None:
    """[LEASE-FENCE] a check that cannot run refuses."""
    assert refused_by(lease(), state={"x": float("nan")}) == "LEASE-FENCE"


def test_every_refusal_carries_a_signed_receipt_that_verifies_offline() -> None:
    refusal = _refusal(lease(), epoch=EPOCH + 1)
    assert refusal.reason == "MONOTONIC_CAS_FENCING"
    assert refusal.reason in LEASE_REASONS
    receipt = verify_rejection(refusal.data["receipt"], keyring())
    assert receipt.kind == "lease-rejection"
    assert receipt.lease_id == "lease-ticket4711"
    assert receipt.lease_digest == digest(lease())
    assert (receipt.reason, receipt.rule) == ("MONOTONIC_CAS_FENCING", "LEASE-FENCE")
    assert (receipt.resource, receipt.at, receipt.verifier) == (
        RESOURCE,
        "2026-12-02T09:00:00.000Z",
        VERIFIER.kid,
    )
    assert keyring().resolve(receipt.verifier)[1] == GATEWAY


def test_a_tampered_receipt_does_not_verify() -> None:
    receipt = _refusal(lease(), epoch=EPOCH + 1).data["receipt"]
    tampered = copy.deepcopy(receipt)
    tampered["reason"] = "SHAPE"
    with pytest.raises(SignatureInvalid):
        verify_rejection(tampered, keyring())


def test_a_receipt_signed_by_another_key_than_its_verifier_does_not_verify() -> None:
    receipt = _refusal(lease(), epoch=EPOCH + 1).data["receipt"]
    body = {k: v for k, v in receipt.items() if k != "signature"}
    with pytest.raises(SignatureInvalid):
        verify_rejection(sign(body, OUTSIDER), keyring())
    ring = keyring()
    ring.trust("https://keys.evil.example")
    with pytest.raises(SignatureInvalid, match="names verifier"):
        verify_rejection(sign(body, OUTSIDER), ring)


def test_a_receipt_of_the_wrong_form_is_refused() -> None:
    receipt = _refusal(lease(), epoch=EPOCH + 1).data["receipt"]
    with pytest.raises(InvalidJson):
        verify_rejection({**receipt, "kind": "lease"}, keyring())


@pytest.mark.parametrize(
    ("mode", "inverse"),
    [
        ("COMPENSATING_ACTION", {"action": "", "params": {}}),
        ("COMPENSATING_ACTION", {"action": "a", "params": []}),
        ("DRY_RUN_SHADOW", {"shadow": [], "result": None}),
        ("DRY_RUN_SHADOW", {"shadow": {}}),
        ("HUMAN_ESCROW", {"address": "human://acme/dana", "instructions": ""}),
        ("HUMAN_ESCROW", {"address": "not an address", "instructions": "x"}),
        ("SNAPSHOT_RESTORE", {"snapshot": STATE, "extra": 1}),
    ],
)
def test_each_mode_has_its_inverse_shape(mode: str, inverse: dict[str, Any]) -> None:
    """[LEASE-MODE] the shapes of docs/spec.md §23."""
    assert inverse_problem(mode, inverse, digest(STATE)) is not None
