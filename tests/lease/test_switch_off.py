"""Planted leases: each breaks one rule of docs/spec.md §23 and is refused by its check alone.

With every check on, each is refused by the rule it names; with that one
check switched off it goes through untouched, and every other case is still
refused by its own rule: proof that the named check is what refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from hatp._checks import unsafe_switched_off
from hatp.evidence import digest
from hatp.lease import LeaseBinding, RecoveryMode
from lease.world import (
    CRM_KEY,
    EPOCH,
    OUTSIDER,
    PLAN_DIGEST,
    START,
    STATE,
    lease,
    refused_by,
    resigned,
)

Attempt = Callable[[], str | None]
IN_TXN = LeaseBinding(txn_id="txn-1", plan_digest=PLAN_DIGEST)


def _bound() -> dict[str, object]:
    return lease(binding=IN_TXN)


def _unknown_member() -> str | None:
    return refused_by(resigned(lease(), note="trust me"))


def _untrusted_signer() -> str | None:
    return refused_by(resigned(lease(), OUTSIDER))


def _other_system_signed() -> str | None:
    return refused_by(resigned(lease(), CRM_KEY))


def _unsigned() -> str | None:
    doc = lease()
    del doc["signature"]
    return refused_by(doc)


def _other_resource() -> str | None:
    return refused_by(lease(), resource="ticket/4712")


def _other_txn() -> str | None:
    return refused_by(_bound(), binding=LeaseBinding(txn_id="txn-2", plan_digest=PLAN_DIGEST))


def _bound_lease_outside_its_txn() -> str | None:
    return refused_by(_bound())


def _wrong_inverse_digest() -> str | None:
    return refused_by(resigned(lease(), inverseDigest=digest({"action": "other"})))


def _other_plan() -> str | None:
    other = LeaseBinding(txn_id="txn-1", plan_digest=digest({"plan": "other"}))
    return refused_by(_bound(), binding=other)


def _other_mutation() -> str | None:
    other = {"action": "tickets.update", "params": {"id": 4711, "status": "deleted"}}
    return refused_by(lease(), mutation=other)


def _unknown_mode() -> str | None:
    return refused_by(resigned(lease(), recoveryMode="BEST_EFFORT"))


def _nothing_staged() -> str | None:
    return refused_by(resigned(lease(), inverse=None, inverseDigest=None))


def _inverse_of_another_mode() -> str | None:
    staged = {"snapshot": STATE}
    return refused_by(resigned(lease(), inverse=staged, inverseDigest=digest(staged)))


def _snapshot_not_the_pre_image() -> str | None:
    staged = {"snapshot": {**STATE, "status": "closed"}}
    doc = resigned(lease(RecoveryMode.SNAPSHOT_RESTORE), inverse=staged)
    return refused_by(resigned(doc, inverseDigest=digest(staged)))


def _escrow_to_an_agent() -> str | None:
    staged = {"address": "agent://acme/fixer", "instructions": "Reopen it."}
    doc = lease(RecoveryMode.HUMAN_ESCROW)
    return refused_by(resigned(doc, inverse=staged, inverseDigest=digest(staged)))


def _issued_61_s_ahead() -> str | None:
    return refused_by(lease(at=START + timedelta(seconds=61)))


def _window_short() -> str | None:
    return refused_by(lease(t_req_ms=600_000, max_window_ms=300_000))


def _expired() -> str | None:
    return refused_by(lease(), now=START + timedelta(seconds=300))


def _stale_epoch() -> str | None:
    return refused_by(lease(), epoch=EPOCH + 1)


def _stale_fence_token() -> str | None:
    return refused_by(lease(), fence_token=EPOCH)


def _state_changed() -> str | None:
    return refused_by(lease(), state={**STATE, "assignee": "erin"})


#: name -> (the rule that must refuse it, the attempt).
CASES: dict[str, tuple[str, Attempt]] = {
    "unknown-member": ("LEASE-SHAPE", _unknown_member),
    "untrusted-signer": ("LEASE-SIGNED", _untrusted_signer),
    "other-system-signed": ("LEASE-SIGNED", _other_system_signed),
    "unsigned": ("LEASE-SIGNED", _unsigned),
    "other-resource": ("LEASE-BINDING", _other_resource),
    "other-txn": ("LEASE-BINDING", _other_txn),
    "bound-lease-outside-its-txn": ("LEASE-BINDING", _bound_lease_outside_its_txn),
    "wrong-inverse-digest": ("LEASE-DIGEST", _wrong_inverse_digest),
    "other-plan": ("LEASE-DIGEST", _other_plan),
    "other-mutation": ("LEASE-DIGEST", _other_mutation),
    "unknown-mode": ("LEASE-MODE", _unknown_mode),
    "nothing-staged": ("LEASE-MODE", _nothing_staged),
    "inverse-of-another-mode": ("LEASE-MODE", _inverse_of_another_mode),
    "snapshot-not-the-pre-image": ("LEASE-MODE", _snapshot_not_the_pre_image),
    "escrow-to-an-agent": ("LEASE-MODE", _escrow_to_an_agent),
    "issued-61-s-ahead": ("LEASE-SKEW", _issued_61_s_ahead),
    "window-short": ("LEASE-WINDOW", _window_short),
    "expired": ("LEASE-WINDOW", _expired),
    "stale-epoch": ("LEASE-FENCE", _stale_epoch),
    "stale-fence-token": ("LEASE-FENCE", _stale_fence_token),
    "state-changed": ("LEASE-FENCE", _state_changed),
}
RULES = sorted({rule for rule, _ in CASES.values()})


def test_the_honest_lease_passes() -> None:
    assert refused_by(lease()) is None
    assert refused_by(_bound(), binding=IN_TXN) is None


@pytest.mark.parametrize("name", CASES)
def test_planted_lease_is_refused_by_its_rule(name: str) -> None:
    rule, attempt = CASES[name]
    assert attempt() == rule


@pytest.mark.parametrize("rule", RULES)
def test_switching_a_check_off_lets_exactly_its_cases_through(rule: str) -> None:
    with unsafe_switched_off(rule):
        outcomes = {name: attempt() for name, (_, attempt) in CASES.items()}
    for name, (case_rule, _) in CASES.items():
        expected = None if case_rule == rule else case_rule
        assert outcomes[name] == expected, f"{name} with {rule} off: {outcomes[name]}"


def test_every_rule_of_the_spec_has_a_planted_lease() -> None:
    from hatp.errors import LEASE_REASONS

    rules = {text.rsplit("(", 1)[1].rstrip(")") for text in LEASE_REASONS.values()}
    assert rules == set(RULES)
