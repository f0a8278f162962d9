"""The system of record (docs/spec.md §23): grant, apply under the fence, recover by mode.

Every test runs the demo's ticket system on SQLite and on PostgreSQL (the
``sor`` fixture), on a manual clock, with a fixed key; receipts are checked
offline with the public keyring alone.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from hatp.clock import ManualClock, parse_time
from hatp.demo._tickets import ISSUER, SUPPORT_LEAD, open_tickets, ticket_system, touch
from hatp.errors import (
    LeaseUnavailable,
    LeaseUnknown,
    MutationInvalid,
    RecoveryRefused,
    ResourceUnknown,
)
from hatp.evidence import canonicalize, digest
from hatp.lease import (
    LeaseBinding,
    LeaseCommit,
    LeaseRecovery,
    RecoveryMode,
    RecoveryOutcome,
    SystemOfRecord,
    verify_lease,
    verify_receipt,
)
from hatp.lease import grant as sign_lease
from hatp.store import LeaseStatus, Store
from lease.sor_world import (
    CLEAR_NOTES,
    CLOSE,
    ESCALATE,
    KEY,
    LEE,
    OTHER_TICKET,
    REASSIGN,
    RESOURCE,
    TICKET,
    WINDOW_MS,
    Desk,
    Roster,
    grant,
    leases,
    public_keyring,
    refusal,
    roster_system,
    ticket_system_at,
)

CLOSED = {**TICKET, "status": "closed"}
AUTOMATIC = [
    RecoveryMode.COMPENSATING_ACTION,
    RecoveryMode.SNAPSHOT_RESTORE,
    RecoveryMode.DRY_RUN_SHADOW,
]


def _commit(receipt: dict[str, Any]) -> LeaseCommit:
    checked = verify_receipt(receipt, public_keyring())
    assert isinstance(checked, LeaseCommit)
    return checked


def _recovery(receipt: dict[str, Any]) -> LeaseRecovery:
    checked = verify_receipt(receipt, public_keyring())
    assert isinstance(checked, LeaseRecovery)
    return checked


def _applied(sor: SystemOfRecord, mode: RecoveryMode = RecoveryMode.COMPENSATING_ACTION) -> str:
    """Grant a lease to close the ticket, apply it, and return its id."""
    doc = grant(sor, mode)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    return str(doc["leaseId"])


def _nothing_stored(sor: SystemOfRecord, before: tuple[dict[str, Any], int]) -> None:
    assert leases(sor.store) == []
    assert sor.state(RESOURCE) == before


# --- grant ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(RecoveryMode))
def test_a_granted_lease_verifies_against_the_live_state_and_is_stored_granted(
    sor: SystemOfRecord, clock: ManualClock, mode: RecoveryMode
) -> None:
    """[SOR-GRANT] a lease of each mode passes every rule of verify_lease against the
    resource as it is, fenced one above its epoch, and is kept `granted` with its
    pre-image and mutation."""
    doc = grant(sor, mode)
    state, epoch = sor.state(RESOURCE)
    checked = verify_lease(
        doc,
        resource=RESOURCE,
        current_state=state,
        current_epoch=epoch,
        mutation=CLOSE,
        keyring=public_keyring(),
        clock=clock,
        verifier_key=KEY,
    )
    assert checked.signer.issuer == ISSUER
    assert (doc["casFenceEpoch"], doc["preImageStateHash"]) == (epoch + 1, digest(TICKET))
    assert doc["mutationDigest"] == digest(CLOSE)
    assert doc["recoveryMode"] == mode.value
    row = sor.lease(doc["leaseId"])
    assert row.status is LeaseStatus.GRANTED
    assert (row.lease, row.mutation, row.pre_image) == (doc, CLOSE, TICKET)
    assert (row.commit_receipt, row.recovery_receipt, row.post_image_hash) == (None, None, None)
    assert sor.state(RESOURCE) == (TICKET, 0), "granting writes nothing"


def test_a_compensating_action_lease_stages_the_actions_inverse(sor: SystemOfRecord) -> None:
    """[SOR-GRANT] COMPENSATING_ACTION stages the action's inverse, computed from the
    pre-image: the values the mutation overwrites."""
    doc = grant(sor, RecoveryMode.COMPENSATING_ACTION, REASSIGN)
    assert doc["inverse"] == {
        "action": "tickets.update",
        "params": {"id": 4711, "assignee": "dana"},
    }
    assert doc["inverseDigest"] == digest(doc["inverse"])


def test_a_snapshot_lease_stages_the_pre_image(sor: SystemOfRecord) -> None:
    """[SOR-GRANT] SNAPSHOT_RESTORE stages the state at grant."""
    doc = grant(sor, RecoveryMode.SNAPSHOT_RESTORE)
    assert doc["inverse"] == {"snapshot": TICKET}


def test_a_shadow_lease_stages_the_state_the_mutation_would_leave(sor: SystemOfRecord) -> None:
    """[SOR-GRANT] DRY_RUN_SHADOW stages the shadow run's state, its digest and the fence."""
    doc = grant(sor, RecoveryMode.DRY_RUN_SHADOW)
    assert doc["inverse"] == {
        "shadow": CLOSED,
        "result": {"stateHash": digest(CLOSED), "epoch": 1},
    }


def test_post_image_is_the_state_a_mutation_would_leave_and_writes_nothing(
    sor: SystemOfRecord,
) -> None:
    """What a participant previews from: the action run on a copy, nothing stored."""
    before = sor.state(RESOURCE)
    assert sor.post_image(TICKET, CLOSE) == CLOSED
    with pytest.raises(MutationInvalid, match=r"tickets\.delete"):
        sor.post_image(TICKET, {"action": "tickets.delete", "params": {}})
    with pytest.raises(MutationInvalid, match="refused its params"):
        sor.post_image(TICKET, {"action": "tickets.update", "params": {"status": "gone"}})
    _nothing_stored(sor, before)


def test_an_escrow_lease_stages_the_escrow_address(sor: SystemOfRecord) -> None:
    """[SOR-GRANT] HUMAN_ESCROW stages the system's escrow address and instructions that
    name the pre-image's digest."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    assert doc["inverse"]["address"] == SUPPORT_LEAD
    assert digest(TICKET) in doc["inverse"]["instructions"]


def test_the_window_granted_is_capped_and_such_a_lease_is_refused_at_apply(
    store: Store, clock: ManualClock
) -> None:
    """[SOR-GRANT] [LEASE-WINDOW] asking for more than the longest window still gets a
    lease, of the longest window; applying it is refused RECOVERY_WINDOW_INEQUALITY."""
    sor = ticket_system(store, KEY, clock, max_window_ms=60_000)
    open_tickets(store, [TICKET])
    doc = grant(sor, t_req_ms=120_000)
    assert (doc["tReqMs"], doc["tGrantedMs"]) == (120_000, 60_000)
    assert parse_time(doc["expiresAt"]) - parse_time(doc["issuedAt"]) == timedelta(seconds=60)
    assert refusal(sor, doc).reason == "RECOVERY_WINDOW_INEQUALITY"


@pytest.mark.parametrize(
    ("mutation", "named"),
    [
        ({"action": "tickets.delete", "params": {"id": 4711}}, "tickets.delete"),
        ({"action": "tickets.update", "params": {"id": 4711, "status": "gone"}}, "status"),
        ({"action": "tickets.update", "params": {"id": 4712, "status": "closed"}}, "4712"),
        ({"action": "tickets.update"}, "params"),
        ({"action": "tickets.update", "params": {"id": 4711}, "sql": "DROP"}, "sql"),
        ({"action": "UPDATE tickets SET", "params": {}}, "action"),
    ],
)
def test_a_mutation_that_is_not_offered_is_refused_and_nothing_is_granted(
    sor: SystemOfRecord, mutation: dict[str, Any], named: str
) -> None:
    """[SOR-GRANT] an unknown action, params the action refuses, or a mutation that is
    not exactly {action, params}: MUTATION_INVALID, saying what is wrong."""
    before = sor.state(RESOURCE)
    with pytest.raises(MutationInvalid, match=named) as caught:
        grant(sor, mutation=mutation)
    assert caught.value.code == "MUTATION_INVALID"
    _nothing_stored(sor, before)


@pytest.mark.parametrize(
    "resource", ["ticket/9999", "invoice/4711", "ticket/", "ticket", "ticket/not-a-number"]
)
def test_a_lease_on_a_resource_that_does_not_exist_is_refused(
    sor: SystemOfRecord, resource: str
) -> None:
    """[SOR-GRANT] RESOURCE_UNKNOWN, and no lease is left behind for it."""
    mutation = {"action": "tickets.update", "params": {"id": 9999, "status": "closed"}}
    with pytest.raises(ResourceUnknown) as caught:
        grant(sor, mutation=mutation, resource=resource)
    assert caught.value.data["resource"] == resource
    assert leases(sor.store, resource) == []
    with pytest.raises(ResourceUnknown):
        sor.state(resource)


@pytest.mark.parametrize(
    "alias", ["ticket/04711", "ticket/+4711", "ticket/--4711", "ticket/4711 ", "ticket/\u0664711"]
)
def test_a_ticket_has_one_resource_id_so_one_epoch(sor: SystemOfRecord, alias: str) -> None:
    """[SOR-GRANT] [LEASE-FENCE] ticket 4711 is `ticket/4711` only: another spelling of
    its key is RESOURCE_UNKNOWN, never a second resource (with an epoch of its own that
    leases on `ticket/4711` would not fence)."""
    with pytest.raises(ResourceUnknown):
        grant(sor, resource=alias)
    with pytest.raises(ResourceUnknown):
        sor.state(alias)
    assert leases(sor.store, alias) == []


def test_an_action_without_an_inverse_cannot_be_leased_as_a_compensating_action(
    sor: SystemOfRecord,
) -> None:
    """[SOR-GRANT] tickets.clear_notes has no inverse: LEASE_UNAVAILABLE MODE_UNSUPPORTED
    for COMPENSATING_ACTION, while a snapshot of it can be leased."""
    before = sor.state(RESOURCE)
    with pytest.raises(LeaseUnavailable) as caught:
        grant(sor, RecoveryMode.COMPENSATING_ACTION, CLEAR_NOTES)
    assert caught.value.data == {"reason": "MODE_UNSUPPORTED", "mode": "COMPENSATING_ACTION"}
    _nothing_stored(sor, before)
    assert grant(sor, RecoveryMode.SNAPSHOT_RESTORE, CLEAR_NOTES)["inverse"] == {"snapshot": TICKET}


def test_a_system_without_an_escrow_desk_refuses_human_escrow(
    store: Store, clock: ManualClock
) -> None:
    """[SOR-GRANT] HUMAN_ESCROW with no escrow address: LEASE_UNAVAILABLE MODE_UNSUPPORTED."""
    sor = roster_system(store, clock, Roster())
    before = sor.state(RESOURCE)
    with pytest.raises(LeaseUnavailable) as caught:
        grant(sor, RecoveryMode.HUMAN_ESCROW, ESCALATE)
    assert caught.value.data == {"reason": "MODE_UNSUPPORTED", "mode": "HUMAN_ESCROW"}
    _nothing_stored(sor, before)


def test_an_inverse_that_does_not_give_back_the_pre_image_is_not_staged(
    store: Store, clock: ManualClock
) -> None:
    """[SOR-GRANT] the inverse is tried before signing: a hand-back to the queue's owner
    (frank) does not undo an escalation of dana's ticket, so NOT_INVERTIBLE."""
    sor = roster_system(store, clock, Roster(owner="frank"))
    before = sor.state(RESOURCE)
    with pytest.raises(LeaseUnavailable) as caught:
        grant(sor, RecoveryMode.COMPENSATING_ACTION, ESCALATE)
    assert caught.value.data == {"reason": "NOT_INVERTIBLE", "mode": "COMPENSATING_ACTION"}
    _nothing_stored(sor, before)


def test_a_negative_window_is_refused_and_nothing_is_granted(sor: SystemOfRecord) -> None:
    """[SOR-GRANT] t_req_ms < 0 is a ValueError."""
    before = sor.state(RESOURCE)
    with pytest.raises(ValueError, match="negative"):
        grant(sor, t_req_ms=-1)
    _nothing_stored(sor, before)


# --- apply ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(RecoveryMode))
def test_apply_writes_moves_the_epoch_to_the_fence_and_signs_a_commit_receipt(
    sor: SystemOfRecord, clock: ManualClock, mode: RecoveryMode
) -> None:
    """[SOR-APPLY] the mutation is written at the fence; the commit receipt verifies
    offline with the public key alone and names the lease, epoch and both states."""
    doc = grant(sor, mode)
    clock.advance(1)
    applied = sor.apply(doc, resource=RESOURCE, mutation=CLOSE, fence_token=1)
    assert not applied.replayed
    assert sor.state(RESOURCE) == (CLOSED, 1)
    commit = _commit(applied.receipt)
    assert commit.lease_id == doc["leaseId"]
    assert commit.lease_digest == digest(doc)
    assert (commit.resource, commit.issuer, commit.epoch) == (RESOURCE, ISSUER, 1)
    assert commit.mutation_digest == digest(CLOSE)
    assert commit.pre_image_state_hash == digest(TICKET) == doc["preImageStateHash"]
    assert commit.post_image_state_hash == digest(CLOSED)
    assert commit.binding is None
    assert parse_time(commit.at) == clock.now()
    row = sor.lease(doc["leaseId"])
    assert row.status is LeaseStatus.APPLIED
    assert (row.commit_receipt, row.post_image_hash) == (applied.receipt, digest(CLOSED))
    assert sor.state("ticket/4712") == (OTHER_TICKET, 0), "another resource is untouched"


def test_a_lease_arrives_as_bytes_too(sor: SystemOfRecord) -> None:
    """[SOR-APPLY] the lease as the bytes of its JSON (an HTTP header's content) applies."""
    doc = grant(sor)
    applied = sor.apply(canonicalize(doc), resource=RESOURCE, mutation=CLOSE)
    assert _commit(applied.receipt).lease_digest == digest(doc)
    assert sor.state(RESOURCE) == (CLOSED, 1)


def test_a_bound_lease_applies_in_its_transaction_and_its_receipt_names_the_binding(
    sor: SystemOfRecord,
) -> None:
    """[SOR-APPLY] [LEASE-BINDING] a lease granted for a transaction applies inside it;
    outside it, it is refused BINDING."""
    binding = LeaseBinding(txn_id="txn-42", plan_digest=digest({"plan": "refund"}))
    doc = sor.grant(
        RESOURCE, CLOSE, t_req_ms=WINDOW_MS, mode=RecoveryMode.SNAPSHOT_RESTORE, binding=binding
    )
    assert refusal(sor, doc).data["rule"] == "LEASE-BINDING"
    applied = sor.apply(doc, resource=RESOURCE, mutation=CLOSE, binding=binding)
    assert _commit(applied.receipt).binding == binding


def test_a_retry_of_the_same_lease_and_mutation_is_replayed_and_writes_nothing(
    sor: SystemOfRecord, clock: ManualClock
) -> None:
    """[SOR-APPLY] a retry gets the stored commit receipt, `replayed`; the row, the epoch
    and the lease are as the first apply left them, even once the lease has expired."""
    doc = grant(sor)
    first = sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    row = sor.lease(doc["leaseId"])
    clock.advance(WINDOW_MS / 1000 + 60)
    again = sor.apply(copy.deepcopy(doc), resource=RESOURCE, mutation=copy.deepcopy(CLOSE))
    assert again.replayed
    assert again.receipt == first.receipt
    assert sor.state(RESOURCE) == (CLOSED, 1)
    assert sor.lease(doc["leaseId"]) == row
    assert sor.rejections() == []


def test_a_retry_after_the_recovery_is_replayed_and_does_not_apply_again(
    sor: SystemOfRecord,
) -> None:
    """[SOR-APPLY] [SOR-RECOVER] a late retry of an applied, since recovered, lease gets
    the original commit receipt: the mutation is not run a second time."""
    doc = grant(sor)
    first = sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    sor.recover(doc["leaseId"])
    again = sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    assert (again.replayed, again.receipt) == (True, first.receipt)
    assert sor.state(RESOURCE) == (TICKET, 2)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.RECOVERED


def test_a_retry_naming_another_resource_is_not_a_replay(sor: SystemOfRecord) -> None:
    """[SOR-APPLY] [LEASE-BINDING] a replay is the same lease, mutation and resource: the
    applied lease shown for ticket 4712 is refused BINDING, not answered with 4711's
    receipt."""
    doc = grant(sor)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    refused = refusal(sor, doc, resource="ticket/4712")
    assert refused.data["rule"] == "LEASE-BINDING"


def test_a_retry_outside_the_bound_transaction_is_not_a_replay(sor: SystemOfRecord) -> None:
    """[SOR-APPLY] [LEASE-BINDING] the applied bound lease shown outside its transaction is
    refused BINDING; inside it, replayed."""
    binding = LeaseBinding(txn_id="txn-42", plan_digest=digest({"plan": "refund"}))
    doc = sor.grant(
        RESOURCE, CLOSE, t_req_ms=WINDOW_MS, mode=RecoveryMode.SNAPSHOT_RESTORE, binding=binding
    )
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE, binding=binding)
    assert refusal(sor, doc).data["rule"] == "LEASE-BINDING"
    assert sor.apply(doc, resource=RESOURCE, mutation=CLOSE, binding=binding).replayed


@pytest.mark.parametrize("applied_first", [False, True], ids=["unspent", "applied"])
def test_the_same_lease_with_another_mutation_is_refused_DIGEST(
    sor: SystemOfRecord, applied_first: bool
) -> None:
    """[LEASE-DIGEST] a lease covers the one mutation it was granted for, before and
    after it was applied."""
    doc = grant(sor)
    if applied_first:
        sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    refused = refusal(sor, doc, mutation=REASSIGN)
    assert (refused.data["rule"], refused.reason) == ("LEASE-DIGEST", "DIGEST_MISMATCH")


def test_a_second_lease_granted_at_the_same_epoch_is_fenced_off_by_the_first(
    sor: SystemOfRecord,
) -> None:
    """[LEASE-FENCE] [SOR-APPLY] two leases granted at epoch 0: once one applied, the
    other is refused MONOTONIC_CAS_FENCING (its fence is not above the epoch)."""
    first, second = grant(sor), grant(sor, mutation=REASSIGN)
    assert first["casFenceEpoch"] == second["casFenceEpoch"] == 1
    sor.apply(first, resource=RESOURCE, mutation=CLOSE)
    refused = refusal(sor, second, mutation=REASSIGN)
    assert (refused.data["rule"], refused.reason) == ("LEASE-FENCE", "MONOTONIC_CAS_FENCING")
    assert "epoch 1" in refused.message
    assert sor.lease(second["leaseId"]).status is LeaseStatus.GRANTED


def test_a_row_changed_without_a_lease_fences_the_lease_off(sor: SystemOfRecord) -> None:
    """[LEASE-FENCE] a writer that takes no lease changed the ticket: its state is no
    longer the leased pre-image, though its epoch never moved."""
    doc = grant(sor)
    touch(sor.store, 4711, assignee="frank")
    refused = refusal(sor, doc)
    assert refused.reason == "MONOTONIC_CAS_FENCING"
    assert "pre-image" in refused.message
    assert sor.state(RESOURCE) == ({**TICKET, "assignee": "frank"}, 0)


def test_a_fence_token_other_than_the_fence_is_refused(sor: SystemOfRecord) -> None:
    """[LEASE-FENCE] the writer's Agent-Fence-Token must be the lease's casFenceEpoch."""
    doc = grant(sor)
    for token in (0, 2):
        refused = refusal(sor, doc, fence_token=token)
        assert (refused.data["rule"], refused.reason) == ("LEASE-FENCE", "MONOTONIC_CAS_FENCING")
    assert not sor.apply(doc, resource=RESOURCE, mutation=CLOSE, fence_token=1).replayed


def test_an_expired_lease_is_refused_WINDOW(sor: SystemOfRecord, clock: ManualClock) -> None:
    """[LEASE-WINDOW] at its expiresAt the lease no longer applies."""
    doc = grant(sor)
    clock.advance(WINDOW_MS / 1000)
    refused = refusal(sor, doc)
    assert (refused.data["rule"], refused.reason) == ("LEASE-WINDOW", "RECOVERY_WINDOW_INEQUALITY")


@pytest.mark.parametrize(("ahead", "rule"), [(60, None), (61, "LEASE-SKEW")])
def test_a_lease_issued_ahead_of_the_appliers_clock_is_refused_past_60_s(
    store: Store, sor: SystemOfRecord, clock: ManualClock, ahead: int, rule: str | None
) -> None:
    """[LEASE-SKEW] one instance of the ticket system grants on a clock ``ahead`` seconds
    fast; another, on the same database, applies: 60 s passes, 61 s is CLOCK_SKEW."""
    fast = ticket_system_at(store, ManualClock(clock.now() + timedelta(seconds=ahead)))
    doc = grant(fast)
    if rule is None:
        assert not sor.apply(doc, resource=RESOURCE, mutation=CLOSE).replayed
        assert sor.state(RESOURCE) == (CLOSED, 1)
    else:
        refused = refusal(sor, doc)
        assert (refused.data["rule"], refused.reason) == (rule, "CLOCK_SKEW")


def test_a_tampered_inverse_payload_is_refused_SIGNED(sor: SystemOfRecord) -> None:
    """[LEASE-SIGNED] an agent that rewrites the staged inverse breaks the signature."""
    doc = grant(sor)
    doc["inverse"] = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
    doc["inverseDigest"] = digest(doc["inverse"])
    refused = refusal(sor, doc)
    assert (refused.data["rule"], refused.reason) == ("LEASE-SIGNED", "SIGNATURE")


def test_a_lease_signed_with_the_systems_key_but_never_granted_is_refused_GRANTED(
    sor: SystemOfRecord, clock: ManualClock
) -> None:
    """[LEASE-GRANTED] a lease that passes rules 1-8 (signed with the system's own key,
    on the live state) but that this system has no record of granting is NOT_GRANTED;
    so is one reusing a granted lease's id for another mutation."""
    state, epoch = sor.state(RESOURCE)

    def forged(mutation: dict[str, Any], lease_id: str | None = None) -> dict[str, Any]:
        return sign_lease(
            resource=RESOURCE,
            state=state,
            epoch=epoch,
            mutation=mutation,
            t_req_ms=WINDOW_MS,
            mode=RecoveryMode.SNAPSHOT_RESTORE,
            inverse=None,
            key=KEY,
            issuer=ISSUER,
            clock=clock,
            max_window_ms=WINDOW_MS,
            lease_id=lease_id,
        )

    refused = refusal(sor, forged(CLOSE))
    assert (refused.data["rule"], refused.reason) == ("LEASE-GRANTED", "NOT_GRANTED")
    granted = grant(sor)
    refused = refusal(sor, forged(REASSIGN, granted["leaseId"]), mutation=REASSIGN)
    assert refused.data["rule"] == "LEASE-GRANTED"
    assert sor.lease(granted["leaseId"]).status is LeaseStatus.GRANTED


def test_a_voided_lease_is_refused_GRANTED(sor: SystemOfRecord) -> None:
    """[LEASE-GRANTED] [SOR-RECOVER] recovering an unspent lease voids it; it never
    applies afterwards."""
    doc = grant(sor)
    assert sor.recover(doc["leaseId"]).outcome is RecoveryOutcome.VOIDED
    refused = refusal(sor, doc)
    assert (refused.data["rule"], refused.reason) == ("LEASE-GRANTED", "NOT_GRANTED")
    assert "voided" in refused.message


def test_a_shadow_the_mutation_no_longer_matches_is_refused_SHADOW(
    store: Store, clock: ManualClock
) -> None:
    """[LEASE-SHADOW] the shadow run escalated the ticket to erin; by the time it is
    applied frank is on call, so the real run would leave another state."""
    roster = Roster()
    sor = roster_system(store, clock, roster)
    doc = grant(sor, RecoveryMode.DRY_RUN_SHADOW, ESCALATE)
    assert doc["inverse"]["shadow"] == {**TICKET, "assignee": "erin"}
    roster.on_call = "frank"
    refused = refusal(sor, doc, mutation=ESCALATE)
    assert (refused.data["rule"], refused.reason) == ("LEASE-SHADOW", "SHADOW_DIVERGED")
    roster.on_call = "erin"
    assert not sor.apply(doc, resource=RESOURCE, mutation=ESCALATE).replayed


def test_an_action_that_refuses_at_apply_writes_nothing(store: Store, clock: ManualClock) -> None:
    """[SOR-APPLY] the lease passed, but nobody is on call any more: MUTATION_INVALID,
    no write, no epoch move, the lease still `granted`, and no rejection receipt."""
    roster = Roster()
    sor = roster_system(store, clock, roster)
    doc = grant(sor, RecoveryMode.SNAPSHOT_RESTORE, ESCALATE)
    roster.on_call = None
    with pytest.raises(MutationInvalid, match="nobody is on call"):
        sor.apply(doc, resource=RESOURCE, mutation=ESCALATE)
    assert sor.state(RESOURCE) == (TICKET, 0)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.GRANTED
    assert sor.rejections() == []


def test_a_mutation_that_is_not_offered_is_refused_at_apply_before_any_rule(
    sor: SystemOfRecord,
) -> None:
    """[SOR-APPLY] a mutation not of the form {action, params} is MUTATION_INVALID before
    the lease is looked at: no receipt."""
    doc = grant(sor)
    with pytest.raises(MutationInvalid):
        sor.apply(doc, resource=RESOURCE, mutation={"action": "tickets.update"})
    with pytest.raises(ResourceUnknown):
        sor.apply(doc, resource="ticket/9999", mutation=CLOSE)
    assert sor.rejections() == []
    assert sor.state(RESOURCE) == (TICKET, 0)


def test_every_refusal_is_kept_signed_in_the_audit_table(
    sor: SystemOfRecord, clock: ManualClock
) -> None:
    """[SOR-APPLY] rejections(resource) lists every rejection receipt of the resource,
    oldest first, each verifying offline."""
    doc = grant(sor)
    refusal(sor, doc, mutation=REASSIGN)
    refusal(sor, doc, fence_token=7)
    refusal(sor, doc, resource="ticket/4712")
    refusal(sor, b"{not a lease")
    kept = sor.rejections(RESOURCE)
    assert [r["rule"] for r in kept] == ["LEASE-DIGEST", "LEASE-FENCE", "LEASE-SHAPE"]
    assert kept[-1]["leaseId"] is None
    assert [r["rule"] for r in sor.rejections("ticket/4712")] == ["LEASE-BINDING"]
    assert all(r["leaseId"] == doc["leaseId"] for r in sor.rejections()[:3])
    assert all(r["verifier"] == KEY.kid for r in sor.rejections())


# --- recover -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", AUTOMATIC)
def test_recovery_restores_the_pre_image_at_a_higher_epoch(
    sor: SystemOfRecord, clock: ManualClock, mode: RecoveryMode
) -> None:
    """[SOR-RECOVER] each automatic mode gives back a state whose digest is the lease's
    preImageStateHash, at the epoch above the fence, with a signed receipt."""
    doc = grant(sor, mode)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    clock.advance(30)
    recovered = sor.recover(doc["leaseId"])
    assert (recovered.outcome, recovered.replayed, recovered.case) == (
        RecoveryOutcome.RESTORED,
        False,
        None,
    )
    state, epoch = sor.state(RESOURCE)
    assert digest(state) == doc["preImageStateHash"]
    assert epoch == 2
    receipt = _recovery(recovered.receipt)
    assert receipt.restored_state_hash == doc["preImageStateHash"]
    assert (receipt.epoch, receipt.recovery_mode, receipt.by) == (2, mode.value, None)
    assert (receipt.lease_id, receipt.lease_digest) == (doc["leaseId"], digest(doc))
    assert parse_time(receipt.at) == clock.now()
    row = sor.lease(doc["leaseId"])
    assert (row.status, row.recovery_receipt) == (LeaseStatus.RECOVERED, recovered.receipt)


def test_recovery_fences_off_a_lease_granted_on_the_mutated_state(sor: SystemOfRecord) -> None:
    """[SOR-RECOVER] [LEASE-FENCE] the epoch moves up, never back: a lease granted on the
    closed ticket (fence 2) is refused once the recovery moved the epoch to 2."""
    lease_id = _applied(sor)
    reopen = {"action": "tickets.update", "params": {"id": 4711, "status": "open"}}
    later = grant(sor, mutation=reopen)
    assert later["casFenceEpoch"] == 2
    sor.recover(lease_id)
    assert refusal(sor, later, mutation=reopen).reason == "MONOTONIC_CAS_FENCING"


def test_recovering_twice_is_replayed(sor: SystemOfRecord, clock: ManualClock) -> None:
    """[SOR-RECOVER] the second call returns the stored receipt and writes nothing."""
    lease_id = _applied(sor)
    first = sor.recover(lease_id)
    clock.advance(10)
    again = sor.recover(lease_id)
    assert again.replayed
    assert again.receipt == first.receipt
    assert sor.state(RESOURCE) == (TICKET, 2)


def test_recovering_an_unspent_lease_voids_it(sor: SystemOfRecord) -> None:
    """[SOR-RECOVER] nothing is written, the epoch stays, the receipt says `voided`."""
    doc = grant(sor)
    voided = sor.recover(doc["leaseId"])
    receipt = _recovery(voided.receipt)
    assert (receipt.outcome, receipt.epoch, receipt.restored_state_hash) == (
        RecoveryOutcome.VOIDED,
        0,
        None,
    )
    assert sor.state(RESOURCE) == (TICKET, 0)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.VOIDED
    assert sor.recover(doc["leaseId"]).replayed


def test_an_expired_unspent_lease_is_still_voided(sor: SystemOfRecord, clock: ManualClock) -> None:
    """[SOR-RECOVER] voiding undoes nothing, so no window bounds it."""
    doc = grant(sor)
    clock.advance(WINDOW_MS / 1000 + 1)
    assert sor.recover(doc["leaseId"]).outcome is RecoveryOutcome.VOIDED


def test_recovery_after_a_lease_less_write_is_refused_MOVED(sor: SystemOfRecord) -> None:
    """[SOR-RECOVER] someone reassigned the closed ticket without a lease: undoing the
    close now would destroy that change, so MOVED and nothing is written."""
    lease_id = _applied(sor)
    touch(sor.store, 4711, assignee="frank")
    with pytest.raises(RecoveryRefused) as caught:
        sor.recover(lease_id)
    assert caught.value.data == {"reason": "MOVED", "leaseId": lease_id, "resource": RESOURCE}
    assert sor.state(RESOURCE) == ({**CLOSED, "assignee": "frank"}, 1)
    assert sor.lease(lease_id).status is LeaseStatus.APPLIED


def test_recovery_after_a_later_leased_mutation_is_refused_MOVED(sor: SystemOfRecord) -> None:
    """[SOR-RECOVER] a second lease, granted on the closed ticket, reassigned it: the
    first lease's recovery is MOVED (the epoch is past its fence); the second's runs."""
    lease_id = _applied(sor)
    second = grant(sor, mutation=REASSIGN)
    sor.apply(second, resource=RESOURCE, mutation=REASSIGN)
    with pytest.raises(RecoveryRefused) as caught:
        sor.recover(lease_id)
    assert caught.value.data["reason"] == "MOVED"
    assert sor.state(RESOURCE) == ({**CLOSED, "assignee": "erin"}, 2)
    assert sor.recover(second["leaseId"]).outcome is RecoveryOutcome.RESTORED
    assert sor.state(RESOURCE) == (CLOSED, 3)


def test_a_compensating_action_that_no_longer_restores_is_refused_MISMATCH(
    store: Store, clock: ManualClock
) -> None:
    """[SOR-RECOVER] the hand-back restored dana at grant; by recovery frank owns the
    queue, so it would assign frank: MISMATCH, nothing written."""
    roster = Roster()
    sor = roster_system(store, clock, roster)
    doc = grant(sor, RecoveryMode.COMPENSATING_ACTION, ESCALATE)
    sor.apply(doc, resource=RESOURCE, mutation=ESCALATE)
    roster.owner = "frank"
    with pytest.raises(RecoveryRefused) as caught:
        sor.recover(doc["leaseId"])
    assert caught.value.data["reason"] == "MISMATCH"
    assert sor.state(RESOURCE) == ({**TICKET, "assignee": "erin"}, 1)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.APPLIED
    roster.owner = "dana"
    assert sor.recover(doc["leaseId"]).outcome is RecoveryOutcome.RESTORED


def test_a_compensating_action_that_refuses_at_recovery_is_refused_MISMATCH(
    store: Store, clock: ManualClock
) -> None:
    """[SOR-RECOVER] the queue has no owner by recovery, so the hand-back refuses: the
    recovery is MISMATCH (not the action's MUTATION_INVALID), nothing written."""
    roster = Roster()
    sor = roster_system(store, clock, roster)
    doc = grant(sor, RecoveryMode.COMPENSATING_ACTION, ESCALATE)
    sor.apply(doc, resource=RESOURCE, mutation=ESCALATE)
    roster.owner = None
    with pytest.raises(RecoveryRefused, match="no owner") as caught:
        sor.recover(doc["leaseId"])
    assert caught.value.data["reason"] == "MISMATCH"
    assert sor.state(RESOURCE) == ({**TICKET, "assignee": "erin"}, 1)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.APPLIED


def test_recovery_after_the_window_is_refused_WINDOW_CLOSED(
    sor: SystemOfRecord, clock: ManualClock
) -> None:
    """[SOR-RECOVER] at expiresAt the system of record no longer promises the undo."""
    lease_id = _applied(sor)
    clock.advance(WINDOW_MS / 1000)
    with pytest.raises(RecoveryRefused) as caught:
        sor.recover(lease_id)
    assert caught.value.data["reason"] == "WINDOW_CLOSED"
    assert sor.state(RESOURCE) == (CLOSED, 1)
    assert sor.lease(lease_id).status is LeaseStatus.APPLIED


def test_human_escrow_recovery_escalates_once_and_a_person_restores_it(
    sor: SystemOfRecord, desk: Desk, clock: ManualClock
) -> None:
    """[SOR-RECOVER] [SOR-ESCROW] recovery writes nothing and tells the escrow desk once;
    the person's restore is written at a new epoch with a receipt naming them."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    escalated = sor.recover(doc["leaseId"])
    assert escalated.outcome is RecoveryOutcome.ESCROWED
    receipt = _recovery(escalated.receipt)
    assert (receipt.epoch, receipt.restored_state_hash, receipt.by) == (1, None, None)
    assert sor.state(RESOURCE) == (CLOSED, 1)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.ESCROWED
    case = escalated.case
    assert case is not None
    assert desk.cases == [case]
    assert (case.lease_id, case.resource, case.address) == (doc["leaseId"], RESOURCE, SUPPORT_LEAD)
    assert case.instructions == doc["inverse"]["instructions"]
    assert (case.pre_image, case.pre_image_state_hash) == (TICKET, doc["preImageStateHash"])

    again = sor.recover(doc["leaseId"])
    assert (again.replayed, again.receipt, again.case) == (True, escalated.receipt, case)
    assert len(desk.cases) == 1, "the desk is told once"

    clock.advance(WINDOW_MS / 1000 + 3600)  # a person may take longer than the window
    restored = sor.restore_by_hand(doc["leaseId"], case.pre_image, by=LEE)
    assert restored.outcome is RecoveryOutcome.RESTORED
    by_hand = _recovery(restored.receipt)
    assert (by_hand.by, by_hand.epoch) == (LEE, 2)
    assert by_hand.restored_state_hash == doc["preImageStateHash"]
    state, epoch = sor.state(RESOURCE)
    assert (digest(state), epoch) == (doc["preImageStateHash"], 2)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.RECOVERED
    assert sor.restore_by_hand(doc["leaseId"], case.pre_image, by=LEE).replayed
    assert sor.recover(doc["leaseId"]).receipt == restored.receipt


def test_an_escrowed_case_the_desk_did_not_take_is_told_by_the_next_recover(
    sor: SystemOfRecord, desk: Desk, store: Store, clock: ManualClock
) -> None:
    """[SOR-RECOVER] the escalation is stored before the desk is told; a desk that did not
    answer (or a process that died before telling it) is told by the next recover, from
    this process or another, and once it took the case nobody is told again."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    desk.down = 2

    with pytest.raises(ConnectionError):
        sor.recover(doc["leaseId"])
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.ESCROWED  # stored all the same
    with pytest.raises(ConnectionError):
        sor.recover(doc["leaseId"])
    assert desk.cases == []

    again = sor.recover(doc["leaseId"])
    assert again.replayed and again.case is not None
    assert desk.cases == [again.case]

    elsewhere = Desk()
    other = ticket_system(store, KEY, clock, escrow=elsewhere)  # another process's view
    assert other.recover(doc["leaseId"]).case == again.case
    assert sor.recover(doc["leaseId"]).case == again.case
    assert (desk.cases, elsewhere.cases) == ([again.case], []), "told once it was taken"


def test_a_person_who_restored_it_in_the_tickets_own_tool_records_it(
    sor: SystemOfRecord,
) -> None:
    """[SOR-ESCROW] the ticket already is its pre-image again (reopened by hand): the
    restore is recorded, at a new epoch."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    case = sor.recover(doc["leaseId"]).case
    assert case is not None
    touch(sor.store, 4711, status="open")
    restored = sor.restore_by_hand(doc["leaseId"], case.pre_image, by=LEE)
    assert _recovery(restored.receipt).by == LEE
    assert sor.state(RESOURCE) == (TICKET, 2)


def test_a_restore_by_hand_to_another_state_is_refused_MISMATCH(sor: SystemOfRecord) -> None:
    """[SOR-ESCROW] the person must put back the leased pre-image, nothing else."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    sor.recover(doc["leaseId"])
    with pytest.raises(RecoveryRefused) as caught:
        sor.restore_by_hand(doc["leaseId"], {**TICKET, "status": "pending"}, by=LEE)
    assert caught.value.data["reason"] == "MISMATCH"
    assert sor.state(RESOURCE) == (CLOSED, 1)
    assert sor.lease(doc["leaseId"]).status is LeaseStatus.ESCROWED


def test_a_restore_by_hand_after_the_ticket_moved_on_is_refused_MOVED(
    sor: SystemOfRecord,
) -> None:
    """[SOR-ESCROW] the ticket is neither what the mutation left nor the pre-image."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    sor.recover(doc["leaseId"])
    touch(sor.store, 4711, notes="customer called again")
    with pytest.raises(RecoveryRefused) as caught:
        sor.restore_by_hand(doc["leaseId"], TICKET, by=LEE)
    assert caught.value.data["reason"] == "MOVED"


@pytest.mark.parametrize("how", ["unspent", "applied", "recovered", "voided"])
def test_restoring_by_hand_a_lease_not_escrowed_is_refused_NOT_ESCROWED(
    sor: SystemOfRecord, how: str
) -> None:
    """[SOR-ESCROW] only an escalated HUMAN_ESCROW lease is restored by hand; one the
    system recovered itself is not recorded as a person's restore."""
    doc = grant(sor)
    if how in ("applied", "recovered"):
        sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    if how in ("recovered", "voided"):
        sor.recover(doc["leaseId"])
    before = sor.state(RESOURCE)
    with pytest.raises(RecoveryRefused) as caught:
        sor.restore_by_hand(doc["leaseId"], TICKET, by=LEE)
    assert caught.value.data["reason"] == "NOT_ESCROWED"
    assert sor.state(RESOURCE) == before


def test_a_restore_by_hand_names_a_person(sor: SystemOfRecord) -> None:
    """[SOR-ESCROW] `by` is required: a ValueError, before anything is read."""
    doc = grant(sor, RecoveryMode.HUMAN_ESCROW)
    with pytest.raises(ValueError, match="person"):
        sor.restore_by_hand(doc["leaseId"], TICKET, by="")


def test_a_lease_never_granted_here_is_unknown(sor: SystemOfRecord) -> None:
    """[SOR-RECOVER] LEASE_UNKNOWN from recover, lease and restore_by_hand."""
    for call in (
        lambda: sor.recover("lease-neverissued"),
        lambda: sor.lease("lease-neverissued"),
        lambda: sor.restore_by_hand("lease-neverissued", TICKET, by=LEE),
    ):
        with pytest.raises(LeaseUnknown) as caught:
            call()
        assert caught.value.data == {"leaseId": "lease-neverissued"}


def test_the_system_names_the_actions_it_offers(sor: SystemOfRecord) -> None:
    """[SOR-GRANT] the vocabulary a lease can cover, as a client may list it."""
    assert sor.actions == ["tickets.clear_notes", "tickets.update"]
