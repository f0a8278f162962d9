"""One owner at a time: a lease with a fencing token, renewed, and refused once superseded."""

from __future__ import annotations

import asyncio
from typing import Any

from coordinator.trips import (
    ALL_NONE,
    ALL_WHOLE,
    APPROVER,
    ScriptedAnswer,
    Trip,
    events,
    sleepers,
)
from hatp.coordinator import Outcome
from hatp.demo import AIRLINE, CALENDAR, PAYMENTS
from hatp.demo._lossy import LossyLink
from hatp.model import ApprovalDecision, Preconditions, TxnState
from hatp.participant import Relay
from hatp.store import DecisionLog, open_store


def test_two_coordinators_resuming_at_once_one_drives_COORD_FENCE(
    trip: Trip, store_url: str
) -> None:
    """[COORD-FENCE] two owners, each on its own store, resume one open txn: one drives it."""
    lossy = LossyLink(trip.links[PAYMENTS], {"commit": 5})
    left = trip.run(links={PAYMENTS: lossy}, max_attempts=2)
    assert left.state is TxnState.IN_DOUBT
    trip.clock.advance(31)
    stores = [open_store(store_url) for _ in range(2)]
    try:
        racers = [
            trip.coordinator(log=DecisionLog(store), owner=f"racer-{n}")
            for n, store in enumerate(stores)
        ]

        async def race() -> list[Any]:
            return list(await asyncio.gather(*(r.resume(left.txn_id) for r in racers)))

        outcomes = asyncio.run(race())
    finally:
        for store in stores:
            store.close()
    (driven,) = [o for o in outcomes if o is not None]
    assert outcomes.count(None) == 1
    assert driven.state is TxnState.COMMITTED
    assert len(events(driven.record, "txn.taken-over")) == 1
    assert trip.world.effects(left.txn_id) == ALL_WHOLE
    assert trip.kinds(AIRLINE, left.txn_id) == ["held", "ticketed"]
    assert trip.kinds(PAYMENTS, left.txn_id) == ["authorized", "captured"]


def test_an_owner_whose_lease_was_taken_cannot_log_its_decision_COORD_FENCE(
    trip: Trip,
) -> None:
    """[COORD-FENCE] paused past its lease while the human decided: its decision is refused."""
    plan = trip.plan()
    txn = plan["txnId"]

    def taken_over() -> None:
        trip.clock.advance(31)  # the owner is paused: its lease keeper cannot run
        assert trip.log.acquire(txn, "intruder", trip.clock.now(), 30.0) == 2

    outcome = trip.run(plan, meanwhile=taken_over)
    assert outcome.fenced
    assert outcome.reason.startswith("fenced off: ")
    assert trip.log.get(txn).state is TxnState.ACTIVE
    assert [e["type"] for e in trip.log.events(txn)] == ["txn.planned"]
    trip.clock.advance(31)
    (recovered,) = asyncio.run(trip.coordinator(owner="second").recover())
    assert recovered.state is TxnState.ABORTED
    assert trip.world.effects(txn) == ALL_NONE


class Usurped(Relay):
    """On the first commit, the owner pauses past its lease and a new owner finishes the txn."""

    def __init__(self, inner: Any, trip: Trip) -> None:
        super().__init__(inner)
        self.trip = trip
        self.successor: Outcome | None = None

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        if self.successor is None:
            self.trip.clock.advance(31)
            self.successor = await self.trip.coordinator(owner="second").resume(txn_id)
        return await super().commit(txn_id, branch_id, fence, plan_digest, preconditions)


def test_a_participant_refuses_the_superseded_owner_COORD_FENCE(trip: Trip) -> None:
    """[COORD-FENCE] the old owner's late commit carries fence 1 after fence 2: refused, fenced."""
    usurped = Usurped(trip.links[CALENDAR], trip)
    outcome = trip.run(links={CALENDAR: usurped})
    assert outcome.fenced
    assert outcome.reason.startswith("fenced off: commit carries fence 1, but fence 2")
    assert usurped.successor is not None
    assert usurped.successor.state is TxnState.COMMITTED
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert trip.kinds(CALENDAR, outcome.txn_id) == ["added"]
    assert trip.kinds(PAYMENTS, outcome.txn_id) == ["authorized", "captured"]


def test_the_lease_is_renewed_while_the_human_decides_COORD_FENCE(trip: Trip) -> None:
    """[COORD-FENCE] a 10-minute decision under a 30 s lease: never claimable meanwhile."""
    plan = trip.plan()
    slow = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_seconds=600)

    async def decide_slowly() -> Outcome:
        task = asyncio.create_task(trip.coordinator(slow).run(plan))
        await trip.votes.wait(plan["txnId"], 4)
        for _ in range(120):
            # the lease keeper, decideBy, the poll, the approver, a keeper per hold [COORD-RENEW]
            await sleepers(trip.clock, 6)
            trip.clock.advance(5)
            assert trip.log.claimable(trip.clock.now()) == []
        return await task

    outcome = asyncio.run(decide_slowly())
    assert outcome.state is TxnState.COMMITTED
    assert trip.log.get(outcome.txn_id).fence == 1
