"""Only a definite answer settles a branch [COORD-SETTLE], and a transient failure at
prepare is asked again before it counts as a no [COORD-PREPARE-RETRY].

The participants are the trip world's real ones; :func:`~coordinator.trips.down`
refuses a method ``STORE_UNAVAILABLE`` a number of times first, as a participant
whose database is down does. The records are checked offline ([TXN-SETTLED]).
"""

from __future__ import annotations

import asyncio

from coordinator.trips import ALL_NONE, ALL_WHOLE, REJECT, Trip, down, events, failed_findings
from hatp._checks import unsafe_switched_off
from hatp.demo import AIRLINE, HOTEL, PAYMENTS
from hatp.errors import OutcomeConflict
from hatp.model import TxnState
from hatp.participant import Relay


def test_an_abort_refused_store_unavailable_leaves_the_txn_open_until_released_COORD_SETTLE(
    trip: Trip,
) -> None:
    """[COORD-SETTLE] The seat's abort keeps failing: the transaction stays aborting, the
    seat held; recovery with the airline's store back releases it and ends aborted."""
    store_down = down(trip, AIRLINE, "abort", times=1000)
    outcome = trip.run(answer=REJECT, links={AIRLINE: store_down}, max_attempts=3)
    assert outcome.state is TxnState.ABORTING
    assert store_down.failed["abort"] == 3
    assert trip.log.get(outcome.txn_id).state is TxnState.ABORTING
    assert trip.world.effects(outcome.txn_id)[AIRLINE] != "none"  # the seat is still held
    assert trip.log.claimable(trip.clock.now()) == [outcome.txn_id]  # released to recovery

    [recovered] = asyncio.run(trip.coordinator().recover())
    assert recovered.state is TxnState.ABORTED
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(recovered, trip.world) == []


def test_a_transient_abort_failure_is_retried_within_the_run_COORD_SETTLE(trip: Trip) -> None:
    """[COORD-SETTLE] Two refusals, then the store answers: one run ends aborted, clean."""
    store_down = down(trip, HOTEL, "abort", times=2)
    outcome = trip.run(answer=REJECT, links={HOTEL: store_down})
    assert outcome.state is TxnState.ABORTED
    assert store_down.failed["abort"] == 2
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
    assert failed_findings(outcome, trip.world) == []


def test_without_the_settle_check_a_hold_outlives_an_aborted_record_COORD_SETTLE(
    trip: Trip,
) -> None:
    """[COORD-SETTLE] [TXN-SETTLED] What the check prevents: the refusal read as settled,
    the transaction called aborted with the seat still held; offline, the record fails."""
    store_down = down(trip, AIRLINE, "abort", times=1000)
    with unsafe_switched_off("COORD-SETTLE"):
        outcome = trip.run(answer=REJECT, links={AIRLINE: store_down}, max_attempts=3)
    assert outcome.state is TxnState.ABORTED
    assert trip.world.effects(outcome.txn_id)[AIRLINE] != "none"
    failed = failed_findings(outcome, trip.world)
    assert [f.split(":")[0] for f in failed] == ["TXN-SETTLED"], failed
    assert f"branch {'seat'!r} voted yes" in failed[0]


class _RefuseAbort(Relay):
    """A participant that answers every abort with a definite OUTCOME_CONFLICT."""

    async def abort(self, txn_id: str, branch_id: str, fence: int) -> dict[str, object]:
        raise OutcomeConflict(f"{branch_id} cannot be released here", branch_id=branch_id)


def test_a_definite_refusal_to_release_ends_needs_attention_naming_the_branch_COORD_SETTLE(
    trip: Trip,
) -> None:
    """[COORD-SETTLE] [TXN-SETTLED] A refusal that retrying cannot change: the outcome is
    needs-attention, ``held`` names the branch, every other branch is released, and the
    record verifies (it says what is true)."""
    outcome = trip.run(answer=REJECT, links={PAYMENTS: _RefuseAbort(trip.links[PAYMENTS])})
    assert outcome.state is TxnState.NEEDS_ATTENTION
    [last] = events(outcome.record, "txn.outcome")
    assert last["body"]["held"] == ["charge"]
    [held] = events(outcome.record, "txn.held")
    assert held["body"]["branchId"] == "charge"
    assert held["body"]["error"]["code"] == "OUTCOME_CONFLICT"
    effects = trip.world.effects(outcome.txn_id)
    assert {k: v for k, v in effects.items() if k != PAYMENTS} == {
        k: v for k, v in ALL_NONE.items() if k != PAYMENTS
    }
    assert failed_findings(outcome, trip.world) == []
    assert trip.log.get(outcome.txn_id).state is TxnState.NEEDS_ATTENTION


def test_a_prepare_refused_store_unavailable_is_asked_again_COORD_PREPARE_RETRY(
    trip: Trip,
) -> None:
    """[COORD-PREPARE-RETRY] The hotel's first prepare meets a stale connection: asked
    again, it votes yes and the trip commits."""
    store_down = down(trip, HOTEL, "prepare", times=1)
    outcome = trip.run(links={HOTEL: store_down})
    assert outcome.state is TxnState.COMMITTED
    assert store_down.failed["prepare"] == 1
    assert trip.world.effects(outcome.txn_id) == ALL_WHOLE
    assert failed_findings(outcome, trip.world) == []


def test_a_prepare_that_stays_unavailable_is_a_no_vote_COORD_PREPARE_RETRY(trip: Trip) -> None:
    """[COORD-PREPARE-RETRY] Retries are bounded: still down after them, it is a no."""
    store_down = down(trip, HOTEL, "prepare", times=1000)
    outcome = trip.run(links={HOTEL: store_down})
    assert outcome.state is TxnState.ABORTED
    assert store_down.failed["prepare"] == 3
    assert "STORE_UNAVAILABLE" in outcome.reason
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_without_the_retry_one_stale_connection_aborts_the_trip_COORD_PREPARE_RETRY(
    trip: Trip,
) -> None:
    """[COORD-PREPARE-RETRY] What the check prevents: one transient failure is a no."""
    store_down = down(trip, HOTEL, "prepare", times=1)
    with unsafe_switched_off("COORD-PREPARE-RETRY"):
        outcome = trip.run(links={HOTEL: store_down})
    assert outcome.state is TxnState.ABORTED
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
