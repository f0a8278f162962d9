"""Renewing a hold's lease while the decision is awaited, never past its horizon [PART-RENEW]."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hatp.clock import ManualClock, format_time
from hatp.demo._lossy import LossyLink
from hatp.errors import (
    HoldExpired,
    NotPrepared,
    NotRenewable,
    OutcomeConflict,
    ParticipantUnavailable,
    RenewalDeclined,
    SignatureInvalid,
    StaleFence,
)
from hatp.evidence import canonicalize, digest, verify
from hatp.model import BranchState, RenewReceipt
from hatp.participant import ParticipantServer, Refuse, Work
from hatp.store import BranchStore, Store, open_store
from participant.ops import AIRLINE, HoldSeat, branch, keyring, plan, run, seat, seen, server

# HoldSeat grants at most 600 s and holds at most 900 s: prepared at 09:00,
# its lease ends at 09:10 and its horizon is 09:15.
LEASE = "2026-12-02T09:10:00.000Z"
HORIZON = "2026-12-02T09:15:00.000Z"
DIGEST = digest(plan().to_wire())


class CountedHold(HoldSeat):
    """HoldSeat that counts its releases."""

    def __init__(self) -> None:
        self.releases = 0

    def abort(self, work: Work) -> None:
        self.releases += 1
        super().abort(work)


class FixedHold(HoldSeat):
    """A hold whose one lease already reaches its horizon: nothing left to renew."""

    max_lease_seconds = 900.0


def lease_stored(store: Store, txn_id: str = "txn-1", branch_id: str = "seat") -> str | None:
    row = BranchStore(store).get(AIRLINE, txn_id, branch_id)
    if row is None or row.lease_expires_at is None:
        return None
    return format_time(row.lease_expires_at)


def test_renew_extends_the_lease_up_to_the_horizon_and_not_past_it_PART_RENEW(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(120)
    receipt = run(airline.renew("txn-1", "seat", 1))
    assert (receipt["kind"], receipt["time"]) == ("renew", "2026-12-02T09:02:00.000Z")
    assert receipt["leaseExpiresAt"] == "2026-12-02T09:12:00.000Z"  # now + the 600 s lease
    assert receipt["holdHorizon"] == HORIZON
    clock.advance(360)  # 09:08: a full lease would run to 09:18
    assert run(airline.renew("txn-1", "seat", 1))["leaseExpiresAt"] == HORIZON
    clock.advance(300)  # 09:13: at the horizon already, a renewal changes nothing
    last = run(airline.renew("txn-1", "seat", 1))
    assert last["leaseExpiresAt"] == last["holdHorizon"] == HORIZON
    assert lease_stored(ledgers) == HORIZON
    # Past the first lease's end the hold is still there, and commits.
    assert run(airline.sweep()) == []
    clock.advance(119.999)
    committed = run(airline.commit("txn-1", "seat", 1, DIGEST, None))
    assert committed["outcome"] == "committed"
    assert seat(ledgers) == ("ticketed", "txn-1/seat")


def test_renew_grants_the_lease_prepare_granted_not_the_longest_PART_RENEW(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    p = plan("txn-1", branch("seat", args={"seat": "12A", "lease": 120}))
    assert run(airline.prepare(p, "seat", 1))["leaseExpiresAt"] == "2026-12-02T09:02:00.000Z"
    clock.advance(60)
    assert run(airline.renew("txn-1", "seat", 1))["leaseExpiresAt"] == "2026-12-02T09:03:00.000Z"


def test_renew_never_moves_the_lease_earlier_PART_RENEW(ledgers: Store, clock: ManualClock) -> None:
    """A second participant process whose clock lags does not shorten the lease."""
    ahead = server(ledgers, clock)
    behind = server(ledgers, ManualClock(clock.now()))
    p = plan("txn-1", branch("seat", args={"seat": "12A", "lease": 120}))
    run(ahead.prepare(p, "seat", 1))
    clock.advance(60)
    assert run(ahead.renew("txn-1", "seat", 1))["leaseExpiresAt"] == "2026-12-02T09:03:00.000Z"
    lagging = run(behind.renew("txn-1", "seat", 1))
    assert lagging["time"] == "2026-12-02T09:00:00.000Z"
    assert lagging["leaseExpiresAt"] == "2026-12-02T09:03:00.000Z"
    assert lease_stored(ledgers) == "2026-12-02T09:03:00.000Z"


def test_a_hold_whose_lease_reaches_its_horizon_keeps_its_lease_PART_RENEW(
    ledgers: Store, clock: ManualClock
) -> None:
    fixed = server(ledgers, clock, FixedHold())
    voted = run(fixed.prepare(plan("txn-1", branch("seat")), "seat", 1))
    assert voted["leaseExpiresAt"] == voted["holdHorizon"] == HORIZON
    clock.advance(300)
    renewed = run(fixed.renew("txn-1", "seat", 1))
    assert renewed["leaseExpiresAt"] == renewed["holdHorizon"] == HORIZON
    assert lease_stored(ledgers) == HORIZON


def test_renew_after_the_lease_ended_releases_the_hold_once_and_raises_PART_RENEW(
    ledgers: Store, clock: ManualClock
) -> None:
    hold = CountedHold()
    counted = server(ledgers, clock, hold)
    run(counted.prepare(plan("txn-1", branch("seat")), "seat", 1))
    clock.advance(600)  # the lease ends at 09:10, exactly now
    with pytest.raises(HoldExpired) as caught:
        run(counted.renew("txn-1", "seat", 1))
    assert caught.value.data["leaseExpiresAt"] == LEASE
    assert "renew did nothing" in caught.value.message
    assert (hold.releases, seat(ledgers)) == (1, ("free", None))
    status = run(counted.status("txn-1", "seat"))
    assert status.state is BranchState.ABORTED
    assert status.receipt is not None
    verify(status.receipt, keyring())
    assert status.receipt["effect"] == {"reason": "HOLD_EXPIRED", "leaseExpiresAt": LEASE}
    # Asked again, renew and commit say the same; nothing is released twice.
    with pytest.raises(HoldExpired):
        run(counted.renew("txn-1", "seat", 1))
    with pytest.raises(HoldExpired):
        run(counted.commit("txn-1", "seat", 1, DIGEST, None))
    assert run(counted.sweep()) == []
    assert hold.releases == 1


def test_renew_of_a_hold_the_sweep_released_raises_hold_expired_PART_RENEW(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(601)
    assert run(airline.sweep()) == [("txn-1", "seat")]
    with pytest.raises(HoldExpired) as caught:
        run(airline.renew("txn-1", "seat", 1))
    assert caught.value.data["leaseExpiresAt"] == LEASE


@pytest.mark.parametrize(("branch_id", "tier"), [("event", "compensate"), ("charge", "final")])
def test_renew_of_a_dry_run_is_not_renewable_PART_RENEW(
    airline: ParticipantServer, clock: ManualClock, branch_id: str, tier: str
) -> None:
    voted = run(airline.prepare(plan(), branch_id, 1))
    with pytest.raises(NotRenewable) as caught:
        run(airline.renew("txn-1", branch_id, 2))
    assert caught.value.data == {"txnId": "txn-1", "branchId": branch_id, "tier": tier}
    status = run(airline.status("txn-1", branch_id))
    # Nothing was done: not even the higher fence is remembered, and nothing is flagged.
    assert (status.state, status.fence, status.flags) == (BranchState.PREPARED, 1, [])
    assert status.receipt == voted


def test_renew_of_a_branch_never_prepared_is_not_prepared_PART_RENEW(
    airline: ParticipantServer,
) -> None:
    with pytest.raises(NotPrepared) as caught:
        run(airline.renew("txn-1", "seat", 1))
    assert caught.value.data["requested"] == "renew"
    assert run(airline.status("txn-1", "seat")).state is BranchState.UNKNOWN


def test_renew_after_a_no_vote_is_an_outcome_conflict_PART_RENEW(
    airline: ParticipantServer,
) -> None:
    p = plan("txn-1", branch("seat", args={"seat": "12A", "refuse_after_write": True}))
    assert run(airline.prepare(p, "seat", 1))["vote"] == "no"
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.renew("txn-1", "seat", 1))
    assert "holds nothing to renew" in caught.value.message
    assert caught.value.data["rule"] == "PART-RENEW"


def test_renew_with_a_stale_fence_does_nothing_PART_FENCE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    run(airline.prepare(plan(), "seat", 2))
    clock.advance(120)
    with pytest.raises(StaleFence) as caught:
        run(airline.renew("txn-1", "seat", 1))
    assert (caught.value.data["fence"], caught.value.data["requested"]) == (1, "renew")
    assert lease_stored(ledgers) == LEASE
    renewed = run(airline.renew("txn-1", "seat", 3))
    assert renewed["fence"] == 3
    assert run(airline.status("txn-1", "seat")).fence == 3


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_renew_after_commit_or_abort_is_refused_and_flagged_PART_RENEW(
    airline: ParticipantServer, ledgers: Store, ending: str
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    if ending == "commit":
        run(airline.commit("txn-1", "seat", 1, DIGEST, None))
    else:
        run(airline.abort("txn-1", "seat", 1))
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.renew("txn-1", "seat", 1))
    state = "committed" if ending == "commit" else "aborted"
    assert caught.value.data == {
        "txnId": "txn-1",
        "branchId": "seat",
        "state": state,
        "requested": "renew",
        "rule": "PART-RENEW",
    }
    status = run(airline.status("txn-1", "seat"))
    assert status.state.value == state
    assert len(status.flags) == 1 and "renew (fence 1) refused" in status.flags[0]


def test_renew_after_compensate_is_refused_PART_RENEW(airline: ParticipantServer) -> None:
    voted = run(airline.prepare(plan(), "event", 1))
    committed = run(airline.commit("txn-1", "event", 1, DIGEST, seen(voted)))
    run(airline.compensate("txn-1", "event", 1, committed["undoToken"]))
    with pytest.raises(OutcomeConflict):
        run(airline.renew("txn-1", "event", 1))


def test_renew_receipt_is_signed_by_the_participant_PART_RENEW_PART_SIGNED(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    run(airline.prepare(plan(), "seat", 4))
    clock.advance(30)
    receipt = run(airline.renew("txn-1", "seat", 4))
    verify(receipt, keyring())
    parsed = RenewReceipt.model_validate(receipt)
    assert (parsed.txn_id, parsed.branch_id, parsed.participant) == ("txn-1", "seat", AIRLINE)
    assert (parsed.plan_digest, parsed.fence) == (DIGEST, 4)
    assert receipt["signature"]["kid"] == "mcp://airline.example#key-1"
    forged = {**receipt, "leaseExpiresAt": "2026-12-02T10:00:00.000Z"}
    with pytest.raises(SignatureInvalid):
        verify(forged, keyring())


def test_renewing_twice_at_the_same_instant_gives_the_same_receipt_PART_IDEMPOTENT(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(90)
    first = run(airline.renew("txn-1", "seat", 1))
    again = run(airline.renew("txn-1", "seat", 1))
    assert canonicalize(first) == canonicalize(again)


def test_the_renewed_lease_is_durable_across_reopening_the_store_PART_RENEW_PART_DURABLE(
    airline: ParticipantServer, clock: ManualClock, store_url: str
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    clock.advance(120)
    assert run(airline.renew("txn-1", "seat", 1))["leaseExpiresAt"] == "2026-12-02T09:12:00.000Z"
    reopened = open_store(store_url)
    try:
        assert lease_stored(reopened) == "2026-12-02T09:12:00.000Z"
        restarted = server(reopened, clock)
        clock.advance(540)  # 09:11: past the first lease, inside the renewed one
        assert run(restarted.sweep()) == []
        committed = run(restarted.commit("txn-1", "seat", 1, DIGEST, None))
        assert committed["outcome"] == "committed"
    finally:
        reopened.close()


def test_a_lost_renew_answer_still_renewed_and_the_retry_says_so_PART_RENEW(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    lossy = LossyLink(airline, {"renew": 1})
    run(lossy.prepare(plan(), "seat", 1))
    clock.advance(120)
    with pytest.raises(ParticipantUnavailable):
        run(lossy.renew("txn-1", "seat", 1))
    assert lossy.lost["renew"] == 1
    assert lease_stored(ledgers) == "2026-12-02T09:12:00.000Z"
    retried = run(lossy.renew("txn-1", "seat", 1))
    assert retried["leaseExpiresAt"] == "2026-12-02T09:12:00.000Z"
    clock.advance(60)
    later = run(lossy.renew("txn-1", "seat", 1))
    assert later["leaseExpiresAt"] == format_time(clock.now() + timedelta(seconds=600))


class CardHold(HoldSeat):
    """A hold whose provider asks for the payer once: the first renewal is declined
    AUTHENTICATION_REQUIRED (as a card issuer does for an off-session re-authorization)."""

    def __init__(self) -> None:
        self.asked = 0

    def renew(self, work: Work) -> None:
        self.asked += 1
        if self.asked == 1:
            raise Refuse("AUTHENTICATION_REQUIRED", "the issuer wants the cardholder present")


def test_a_renewal_the_provider_declines_leaves_the_lease_as_it_was_PART_RENEW(
    ledgers: Store, clock: ManualClock
) -> None:
    """[PART-RENEW] the operation declines: RENEWAL_DECLINED with its reason, nothing saved;
    the hold stands until its lease ends, and a later renewal the provider allows works."""
    card = CardHold()
    holds = server(ledgers, clock, card)
    run(holds.prepare(plan("txn-1", branch("seat")), "seat", 1))
    clock.advance(120)
    with pytest.raises(RenewalDeclined) as declined:
        run(holds.renew("txn-1", "seat", 1))
    assert declined.value.code == "RENEWAL_DECLINED"
    assert declined.value.data["reason"] == "AUTHENTICATION_REQUIRED"
    assert declined.value.data["leaseExpiresAt"] == LEASE
    assert "the hold stands until" in declined.value.message
    assert lease_stored(ledgers) == LEASE
    status = run(holds.status("txn-1", "seat"))
    assert status.state is BranchState.PREPARED and status.flags == []
    renewed = run(holds.renew("txn-1", "seat", 1))
    assert renewed["leaseExpiresAt"] == "2026-12-02T09:12:00.000Z"
    assert card.asked == 2
