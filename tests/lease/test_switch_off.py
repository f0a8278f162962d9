"""Planted leases: each breaks one rule of docs/spec.md §23 and is refused by its check alone.

With every check on, each is refused by the rule it names; with that one
check switched off it goes through untouched, and every other case is still
refused by its own rule: proof that the named check is what refuses it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import LeaseRefused
from hatp.evidence import digest
from hatp.lease import LeaseBinding, RecoveryMode, SystemOfRecord, grant
from hatp.store import Store, open_store
from lease import sor_world
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


# --- the system of record's own rules: a ticket system on a SQLite file of its own ---


@contextmanager
def _ticket_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(Path(folder) / "tickets.db")
        try:
            yield store
        finally:
            store.close()


def _sor_refused_by(
    sor: SystemOfRecord, doc: dict[str, Any], mutation: dict[str, Any]
) -> str | None:
    """The rule that refuses applying ``doc`` (``None`` if it is applied)."""
    try:
        sor.apply(doc, resource=sor_world.RESOURCE, mutation=mutation)
    except LeaseRefused as exc:
        return str(exc.data["rule"])
    return None


def _honest_sor_lease() -> str | None:
    with _ticket_store() as store:
        sor = sor_world.ticket_world(store, ManualClock(START))
        return _sor_refused_by(sor, sor_world.grant(sor), sor_world.CLOSE)


def _never_granted_here() -> str | None:
    with _ticket_store() as store:
        clock = ManualClock(START)
        sor = sor_world.ticket_world(store, clock)
        state, epoch = sor.state(sor_world.RESOURCE)
        signed = grant(
            resource=sor_world.RESOURCE,
            state=state,
            epoch=epoch,
            mutation=sor_world.CLOSE,
            t_req_ms=sor_world.WINDOW_MS,
            mode=RecoveryMode.SNAPSHOT_RESTORE,
            inverse=None,
            key=sor_world.KEY,
            issuer=sor.issuer,
            clock=clock,
            max_window_ms=sor_world.WINDOW_MS,
        )
        return _sor_refused_by(sor, signed, sor_world.CLOSE)


def _voided_then_applied() -> str | None:
    with _ticket_store() as store:
        sor = sor_world.ticket_world(store, ManualClock(START))
        doc = sor_world.grant(sor)
        sor.recover(doc["leaseId"])
        return _sor_refused_by(sor, doc, sor_world.CLOSE)


def _shadow_diverged() -> str | None:
    with _ticket_store() as store:
        roster = sor_world.Roster(on_call="erin")
        sor = sor_world.roster_system(store, ManualClock(START), roster)
        doc = sor_world.grant(sor, RecoveryMode.DRY_RUN_SHADOW, sor_world.ESCALATE)
        roster.on_call = "frank"
        return _sor_refused_by(sor, doc, sor_world.ESCALATE)


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
    "never-granted-here": ("LEASE-GRANTED", _never_granted_here),
    "voided-then-applied": ("LEASE-GRANTED", _voided_then_applied),
    "shadow-diverged": ("LEASE-SHADOW", _shadow_diverged),
}
RULES = sorted({rule for rule, _ in CASES.values()})


def test_the_honest_lease_passes() -> None:
    assert refused_by(lease()) is None
    assert refused_by(_bound(), binding=IN_TXN) is None
    assert _honest_sor_lease() is None


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
