"""No answer from a commit is not a failure: in doubt, retried, never voided or doubled."""

from __future__ import annotations

import asyncio

from coordinator.trips import ALL_WHOLE, Trip, events, failed_findings
from hatp.demo import AIRLINE, HOTEL, PAYMENTS
from hatp.demo._lossy import LossyLink
from hatp.model import TxnState


def test_lost_answers_from_the_capture_are_retried_to_one_capture_COORD_IN_DOUBT(
    trip: Trip,
) -> None:
    """[COORD-IN-DOUBT] two capture answers lost: IN_DOUBT, retried, COMMITTED, captured once."""
    lossy = LossyLink(trip.links[PAYMENTS], {"commit": 2})
    outcome = trip.run(links={PAYMENTS: lossy})
    assert outcome.state is TxnState.COMMITTED
    assert lossy.lost["commit"] == 2
    (doubt,) = events(outcome.record, "txn.in-doubt")
    assert (doubt["body"]["branchId"], doubt["body"]["attempt"]) == ("charge", 1)
    assert "lost on the way back" in doubt["body"]["detail"]
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert trip.kinds(PAYMENTS, outcome.txn_id) == ["authorized", "captured"]
    assert failed_findings(outcome, trip.world) == []


def test_a_capture_still_in_doubt_keeps_the_holds_and_is_recovered_COORD_IN_DOUBT(
    trip: Trip,
) -> None:
    """[COORD-IN-DOUBT] out of attempts: left open and in doubt, holds kept; recovery commits."""
    lossy = LossyLink(trip.links[PAYMENTS], {"commit": 5})
    outcome = trip.run(links={PAYMENTS: lossy}, max_attempts=2)
    txn = outcome.txn_id
    assert outcome.state is TxnState.IN_DOUBT
    assert "has not answered after 2 attempts" in outcome.reason
    row = trip.log.get(txn)
    assert (row.state, row.owner) == (TxnState.IN_DOUBT, None)
    assert trip.log.open_transactions() == [txn]
    assert trip.kinds(AIRLINE, txn) == ["held"]  # neither released nor ticketed
    assert trip.kinds(HOTEL, txn) == ["held"]
    assert trip.kinds(PAYMENTS, txn) == ["authorized", "captured"]  # it did happen
    trip.clock.advance(31)  # past the first owner's 30 s lease
    later = trip.coordinator(owner="second")
    (recovered,) = asyncio.run(later.recover())
    assert (recovered.txn_id, recovered.state) == (txn, TxnState.COMMITTED)
    assert recovered.record["events"][: len(outcome.record["events"])] == outcome.record["events"]
    assert "txn.taken-over" in [e["type"] for e in events(recovered.record)]
    assert trip.world.effects(txn) == ALL_WHOLE
    assert trip.kinds(PAYMENTS, txn) == ["authorized", "captured"]
    assert failed_findings(recovered, trip.world) == []
    assert trip.log.open_transactions() == []
