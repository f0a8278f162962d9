"""Placing a lost hold again under the same plan [PART-REPLACE]."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from hatp.clock import ManualClock
from hatp.demo._lossy import LossyLink
from hatp.errors import (
    HoldExpired,
    NotPrepared,
    NotReplaceable,
    OutcomeConflict,
    ParticipantUnavailable,
    PlanInvalid,
    SignatureInvalid,
    StaleFence,
)
from hatp.evidence import canonicalize, digest, verify
from hatp.model import BranchState, PrepareReceipt
from hatp.participant import ParticipantServer, Prepared, Work
from hatp.store import Store, open_store
from participant.ops import (
    AIRLINE,
    HoldSeat,
    branch,
    keyring,
    plan,
    run,
    seat,
    seats,
    seen,
    server,
)

DIGEST = digest(plan().to_wire())
# HoldSeat grants at most 600 s and holds at most 900 s. Prepared at 09:00, its
# lease ends at 09:10; placed again at 09:10 the new lease ends at 09:20, the
# new horizon is 09:25.
LEASE = "2026-12-02T09:10:00.000Z"
NEW_LEASE, NEW_HORIZON = "2026-12-02T09:20:00.000Z", "2026-12-02T09:25:00.000Z"


class CountedHold(HoldSeat):
    """HoldSeat that counts its placements and releases."""

    def __init__(self) -> None:
        self.placed = 0
        self.released = 0

    def prepare(self, work: Work) -> Prepared:
        prepared = super().prepare(work)
        self.placed += 1
        return prepared

    def abort(self, work: Work) -> None:
        self.released += 1
        super().abort(work)


class BrokenOnReplace(HoldSeat):
    """Places the hold, then fails on any placement after the first."""

    def __init__(self) -> None:
        self.calls = 0

    def prepare(self, work: Work) -> Prepared:
        self.calls += 1
        prepared = super().prepare(work)
        if self.calls > 1:
            raise RuntimeError("the reservation system fell over after writing")
        return prepared


def lost(airline: ParticipantServer, clock: ManualClock, *, swept: bool = True) -> dict[str, Any]:
    """Prepare the seat at 09:00 and let its lease end at 09:10 (released by the sweep)."""
    voted = run(airline.prepare(plan(), "seat", 1))
    clock.advance(600)
    if swept:
        assert run(airline.sweep()) == [("txn-1", "seat")]
    return voted


def set_seat(store: Store, seat_id: str = "12A", **values: Any) -> None:
    with store.transaction() as conn:
        conn.execute(seats.update().where(seats.c.seat == seat_id).values(**values))


def test_a_hold_released_at_expiry_is_placed_again_with_a_fresh_lease_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    voted = lost(airline, clock)
    assert voted["attempt"] == 1
    assert seat(ledgers) == ("free", None)
    again = run(airline.replace(plan(), "seat", 1, 2))
    verify(again, keyring())
    parsed = PrepareReceipt.model_validate(again)
    assert (parsed.attempt, parsed.vote.value, parsed.fence, parsed.plan_digest) == (
        2,
        "yes",
        1,
        DIGEST,
    )
    assert (again["time"], again["leaseExpiresAt"], again["holdHorizon"]) == (
        LEASE,
        NEW_LEASE,
        NEW_HORIZON,
    )
    assert again["cost"] == {"value": "420.00", "currency": "USD"}
    assert seat(ledgers) == ("held", "txn-1/seat")
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.receipt, status.flags) == (BranchState.PREPARED, again, [])
    with pytest.raises(SignatureInvalid):
        verify({**again, "attempt": 1}, keyring())


def test_a_prepared_hold_whose_lease_ended_is_released_and_placed_in_one_go_PART_REPLACE(
    ledgers: Store, clock: ManualClock
) -> None:
    hold = CountedHold()
    counted = server(ledgers, clock, hold)
    run(counted.prepare(plan("txn-1", branch("seat")), "seat", 1))
    clock.advance(601)  # not swept: still prepared, lease over
    again = run(counted.replace(plan("txn-1", branch("seat")), "seat", 1, 2))
    assert (again["attempt"], again["vote"]) == (2, "yes")
    assert (hold.placed, hold.released) == (2, 1)
    assert seat(ledgers) == ("held", "txn-1/seat")
    assert run(counted.sweep()) == []  # the new lease runs to 09:20:01


def test_commit_renew_and_status_work_on_the_replacement_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    lost(airline, clock)
    run(airline.replace(plan(), "seat", 1, 2))
    clock.advance(540)  # 09:19
    renewed = run(airline.renew("txn-1", "seat", 1))
    assert (renewed["leaseExpiresAt"], renewed["holdHorizon"]) == (NEW_HORIZON, NEW_HORIZON)
    clock.advance(300)  # 09:24: past the first hold's horizon, inside the new one
    assert run(airline.sweep()) == []
    committed = run(airline.commit("txn-1", "seat", 1, DIGEST, None))
    assert committed["outcome"] == "committed"
    assert seat(ledgers) == ("ticketed", "txn-1/seat")
    assert run(airline.status("txn-1", "seat")).receipt == committed


def test_abort_releases_the_replacement_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    lost(airline, clock)
    run(airline.replace(plan(), "seat", 1, 2))
    aborted = run(airline.abort("txn-1", "seat", 1))
    assert (aborted["outcome"], aborted["effect"]) == ("aborted", None)
    assert seat(ledgers) == ("free", None)


def test_the_sweep_releases_an_expired_replacement_and_a_third_attempt_places_it_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    lost(airline, clock)
    second = run(airline.replace(plan(), "seat", 1, 2))
    clock.advance(600)
    assert run(airline.sweep()) == [("txn-1", "seat")]
    with pytest.raises(HoldExpired) as caught:
        run(airline.commit("txn-1", "seat", 1, DIGEST, None))
    assert caught.value.data["leaseExpiresAt"] == NEW_LEASE
    # A late retry of attempt 2 gets attempt 2's receipt, and places nothing.
    assert run(airline.replace(plan(), "seat", 1, 2)) == second
    assert seat(ledgers) == ("free", None)
    third = run(airline.replace(plan(), "seat", 1, 3))
    assert (third["attempt"], third["leaseExpiresAt"]) == (3, "2026-12-02T09:30:00.000Z")
    assert seat(ledgers) == ("held", "txn-1/seat")


def test_repeating_a_replace_returns_the_same_receipt_and_places_once_PART_IDEMPOTENT(
    ledgers: Store, clock: ManualClock
) -> None:
    hold = CountedHold()
    counted = server(ledgers, clock, hold)
    p = plan("txn-1", branch("seat"))
    run(counted.prepare(p, "seat", 1))
    clock.advance(600)
    first = run(counted.replace(p, "seat", 1, 2))
    clock.advance(5)
    again = run(counted.replace(p, "seat", 2, 2))
    assert canonicalize(again) == canonicalize(first)
    assert (hold.placed, hold.released) == (2, 1)
    assert run(counted.status("txn-1", "seat")).fence == 2  # a repeat remembers the fence
    # After that receipt, a prepare repeated late answers with the branch's vote: attempt 2.
    assert run(counted.prepare(p, "seat", 2)) == first


def test_concurrent_replaces_place_the_hold_once_PART_IDEMPOTENT(
    ledgers: Store, clock: ManualClock
) -> None:
    hold = CountedHold()
    counted = server(ledgers, clock, hold)
    p = plan("txn-1", branch("seat"))
    run(counted.prepare(p, "seat", 1))
    clock.advance(600)

    async def all_at_once() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(counted.replace(p, "seat", 1, 2) for _ in range(5))))

    receipts = run(all_at_once())
    assert all(receipt == receipts[0] for receipt in receipts)
    assert (hold.placed, hold.released) == (2, 1)


def test_a_lost_replace_answer_is_retried_without_placing_twice_PART_REPLACE(
    ledgers: Store, clock: ManualClock
) -> None:
    hold = CountedHold()
    lossy = LossyLink(server(ledgers, clock, hold), {"replace": 1})
    p = plan("txn-1", branch("seat"))
    run(lossy.prepare(p, "seat", 1))
    clock.advance(600)
    with pytest.raises(ParticipantUnavailable):
        run(lossy.replace(p, "seat", 1, 2))
    assert seat(ledgers) == ("held", "txn-1/seat")  # the effect happened; the answer was lost
    retried = run(lossy.replace(p, "seat", 1, 2))
    assert (retried["attempt"], hold.placed) == (2, 2)


def test_a_live_hold_is_not_replaceable_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    voted = run(airline.prepare(plan(), "seat", 1))
    clock.advance(599.999)
    with pytest.raises(NotReplaceable) as caught:
        run(airline.replace(plan(), "seat", 2, 2))
    assert caught.value.code == "NOT_REPLACEABLE"
    assert caught.value.data == {
        "txnId": "txn-1",
        "branchId": "seat",
        "state": "prepared",
        "requested": "replace",
        "rule": "PART-REPLACE",
        "leaseExpiresAt": LEASE,
    }
    assert "renew it" in caught.value.message
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.fence, status.receipt, status.flags) == (
        BranchState.PREPARED,
        1,
        voted,
        [],
    )
    assert seat(ledgers) == ("held", "txn-1/seat")


@pytest.mark.parametrize("ending", ["commit", "coordinator-abort", "no-vote"])
def test_a_branch_that_ended_otherwise_is_not_replaceable_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ending: str
) -> None:
    p = plan()
    if ending == "no-vote":
        p = plan("txn-1", branch("seat", args={"seat": "12A", "refuse_after_write": True}))
        run(airline.prepare(p, "seat", 1))
    else:
        run(airline.prepare(p, "seat", 1))
        if ending == "commit":
            run(airline.commit("txn-1", "seat", 1, DIGEST, None))
        else:
            run(airline.abort("txn-1", "seat", 1))
    clock.advance(601)
    before = run(airline.status("txn-1", "seat"))
    with pytest.raises(NotReplaceable) as caught:
        run(airline.replace(p, "seat", 1, 2))
    state = {"commit": "committed", "coordinator-abort": "aborted", "no-vote": "refused"}[ending]
    assert (caught.value.data["state"], caught.value.data["rule"]) == (state, "PART-REPLACE")
    assert run(airline.status("txn-1", "seat")) == before


def test_a_branch_aborted_before_prepare_is_not_replaceable_PART_REPLACE(
    airline: ParticipantServer,
) -> None:
    run(airline.abort("txn-1", "seat", 1))
    with pytest.raises(NotReplaceable) as caught:
        run(airline.replace(plan(), "seat", 1, 2))
    assert "before it was ever prepared" in caught.value.message


def test_a_compensated_branch_is_not_replaceable_PART_REPLACE(
    airline: ParticipantServer,
) -> None:
    voted = run(airline.prepare(plan(), "event", 1))
    committed = run(airline.commit("txn-1", "event", 1, DIGEST, seen(voted)))
    run(airline.compensate("txn-1", "event", 1, committed["undoToken"]))
    with pytest.raises(NotReplaceable) as caught:
        run(airline.replace(plan(), "event", 1, 2))
    assert caught.value.data["state"] == "compensated"


@pytest.mark.parametrize(("branch_id", "tier"), [("event", "compensate"), ("charge", "final")])
def test_a_dry_run_is_not_replaceable_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, branch_id: str, tier: str
) -> None:
    run(airline.prepare(plan(), branch_id, 1))
    clock.advance(3600)
    with pytest.raises(NotReplaceable) as caught:
        run(airline.replace(plan(), branch_id, 1, 2))
    assert (caught.value.data["tier"], caught.value.data["state"]) == (tier, "prepared")


def test_a_branch_never_prepared_is_not_prepared_PART_REPLACE(airline: ParticipantServer) -> None:
    with pytest.raises(NotPrepared) as caught:
        run(airline.replace(plan(), "seat", 1, 2))
    assert caught.value.data["requested"] == "replace"
    assert run(airline.status("txn-1", "seat")).state is BranchState.UNKNOWN


@pytest.mark.parametrize(("attempt", "current"), [(1, None), (3, 1)])
def test_only_the_next_attempt_is_placed_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store, attempt: int, current: int
) -> None:
    lost(airline, clock)
    with pytest.raises(NotReplaceable) as caught:
        run(airline.replace(plan(), "seat", 1, attempt))
    assert caught.value.data["attempt"] == attempt
    assert caught.value.data.get("current") == current
    assert seat(ledgers) == ("free", None)
    assert run(airline.status("txn-1", "seat")).state is BranchState.ABORTED


def test_a_wrong_attempt_leaves_an_ended_lease_unreleased_until_asked_right_PART_REPLACE(
    ledgers: Store, clock: ManualClock
) -> None:
    hold = CountedHold()
    counted = server(ledgers, clock, hold)
    p = plan("txn-1", branch("seat"))
    run(counted.prepare(p, "seat", 1))
    clock.advance(600)
    with pytest.raises(NotReplaceable):
        run(counted.replace(p, "seat", 1, 5))
    assert (hold.released, run(counted.status("txn-1", "seat")).state) == (0, BranchState.PREPARED)


def test_the_operation_refusing_leaves_a_signed_no_vote_and_the_branch_refused_PART_REPLACE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    lost(airline, clock)
    set_seat(ledgers, status="held", holder="txn-9/seat")  # someone else took the seat
    again = run(airline.replace(plan(), "seat", 1, 2))
    verify(again, keyring())
    assert (again["attempt"], again["vote"]) == (2, "no")
    assert again["reason"].startswith("SOLD_OUT")
    assert (again["leaseExpiresAt"], again["holdHorizon"]) == (None, None)
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.receipt) == (BranchState.REFUSED, again)
    assert run(airline.replace(plan(), "seat", 1, 2)) == again  # stored, by attempt
    with pytest.raises(NotReplaceable):
        run(airline.replace(plan(), "seat", 1, 3))
    assert run(airline.abort("txn-1", "seat", 1))["outcome"] == "aborted"
    assert seat(ledgers) == ("held", "txn-9/seat")


def test_a_replacement_that_costs_more_than_the_plan_says_votes_no_PART_REPLACE_PART_COST(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    lost(airline, clock)
    set_seat(ledgers, price="510.00")  # the fare went up while nobody held it
    again = run(airline.replace(plan(), "seat", 1, 2))
    assert (again["attempt"], again["vote"]) == (2, "no")
    assert again["reason"].startswith("COST_UNDERSTATED")
    assert again["cost"] == {"value": "510.00", "currency": "USD"}
    assert seat(ledgers) == ("free", None)  # what it placed was released
    assert run(airline.status("txn-1", "seat")).state is BranchState.REFUSED


def test_a_replace_with_a_stale_fence_does_nothing_PART_FENCE(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    run(airline.prepare(plan(), "seat", 2))
    clock.advance(600)
    with pytest.raises(StaleFence) as caught:
        run(airline.replace(plan(), "seat", 1, 2))
    assert caught.value.data["requested"] == "replace"
    assert run(airline.status("txn-1", "seat")).state is BranchState.PREPARED
    assert run(airline.replace(plan(), "seat", 3, 2))["fence"] == 3


def test_a_replace_under_another_plan_is_refused_and_flagged_PART_PLAN(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    lost(airline, clock)
    other = plan("txn-1", branch("seat", args={"seat": "12B"}))
    with pytest.raises(OutcomeConflict) as caught:
        run(airline.replace(other, "seat", 1, 2))
    assert caught.value.data["rule"] == "PART-PLAN"
    status = run(airline.status("txn-1", "seat"))
    assert status.state is BranchState.ABORTED
    assert len(status.flags) == 1 and "replace (fence 1) refused" in status.flags[0]


def test_a_replace_of_an_operation_no_longer_fitting_the_plan_is_plan_invalid_PART_PLAN(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    lost(airline, clock)
    with pytest.raises(PlanInvalid) as caught:
        run(airline.replace(plan("txn-1", branch("seat", tier="final")), "seat", 1, 2))
    assert caught.value.data["reason"] == "TIER_MISMATCH"


def test_a_failing_replacement_keeps_nothing_PART_DURABLE(
    ledgers: Store, clock: ManualClock
) -> None:
    broken = server(ledgers, clock, BrokenOnReplace())
    p = plan("txn-1", branch("seat"))
    voted = run(broken.prepare(p, "seat", 1))
    clock.advance(600)
    with pytest.raises(RuntimeError):
        run(broken.replace(p, "seat", 1, 2))
    # Neither the release at expiry nor the new hold was kept: the row is as it was.
    status = run(broken.status("txn-1", "seat"))
    assert (status.state, status.receipt) == (BranchState.PREPARED, voted)
    assert seat(ledgers) == ("held", "txn-1/seat")


def test_the_replacement_is_durable_across_reopening_the_store_PART_DURABLE(
    airline: ParticipantServer, clock: ManualClock, store_url: str
) -> None:
    lost(airline, clock)
    again = run(airline.replace(plan(), "seat", 1, 2))
    reopened = open_store(store_url)
    try:
        restarted = server(reopened, clock)
        assert run(restarted.status("txn-1", "seat")).receipt == again
        assert run(restarted.replace(plan(), "seat", 1, 2)) == again
        clock.advance(599)
        assert run(restarted.commit("txn-1", "seat", 1, DIGEST, None))["outcome"] == "committed"
        with reopened.transaction() as conn:
            status = conn.execute(sa.select(seats.c.status).where(seats.c.seat == "12A"))
            assert status.scalar_one() == "ticketed"
    finally:
        reopened.close()


def test_a_replace_names_the_participant_and_the_branch(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    lost(airline, clock)
    again = PrepareReceipt.model_validate(run(airline.replace(plan(), "seat", 1, 2)))
    assert (again.txn_id, again.branch_id, again.participant, again.tier.value) == (
        "txn-1",
        "seat",
        AIRLINE,
        "hold",
    )


def test_a_prepare_receipt_without_attempt_is_attempt_one_and_attempts_start_at_one(
    airline: ParticipantServer,
) -> None:
    voted = run(airline.prepare(plan(), "seat", 1))
    older = {k: v for k, v in voted.items() if k != "attempt"}
    assert PrepareReceipt.model_validate(older).attempt == 1
    with pytest.raises(ValidationError):
        PrepareReceipt.model_validate({**voted, "attempt": 0})
