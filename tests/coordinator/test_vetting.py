"""A receipt or approval counts only if its party signed it, for this plan (fail closed)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.conftest import OpenTrip
from coordinator.trips import ALL_NONE, Forge, ForgeApproval, Trip, events
from hatp.demo import AIRLINE, GATEWAY, HOTEL
from hatp.evidence import digest
from hatp.model import TxnState

OTHER_PLAN = digest({"another": "plan"})


def _room_vote(outcome: Any) -> dict[str, Any]:
    (vote,) = [e for e in events(outcome.record, "txn.prepared") if e["body"]["branchId"] == "room"]
    body: dict[str, Any] = vote["body"]
    return body


def test_a_receipt_signed_by_another_party_counts_as_no_COORD_SIGNER(trip: Trip) -> None:
    """[COORD-SIGNER] the hotel's yes, re-signed with the airline's (trusted) key: ABORTED."""
    forged = Forge(trip.links[HOTEL], trip.world.keys[AIRLINE])
    outcome = trip.run(links={HOTEL: forged})
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == f"room: signed by {AIRLINE}, not by {HOTEL}"
    assert _room_vote(outcome)["problem"] == f"signed by {AIRLINE}, not by {HOTEL}"
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_a_receipt_for_another_plan_counts_as_no_COORD_DIGEST(trip: Trip) -> None:
    """[COORD-DIGEST] the hotel's own key signs a yes naming another plan digest: ABORTED."""
    forged = Forge(trip.links[HOTEL], trip.world.keys[HOTEL], planDigest=OTHER_PLAN)
    outcome = trip.run(links={HOTEL: forged})
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith(f"room: receipt is for plan {OTHER_PLAN}, not sha256:")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_an_approval_signed_by_another_party_does_not_count_COORD_SIGNER(trip: Trip) -> None:
    """[COORD-SIGNER] an approval signed with the airline's key, not the gateway's: ABORTED."""
    key = trip.world.keys[AIRLINE]
    outcome = trip.run(forge=lambda gateway: ForgeApproval(gateway, key))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason == f"approval finance: signed by {AIRLINE}, not by {GATEWAY}"
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_an_approval_for_another_plan_does_not_count_COORD_DIGEST(trip: Trip) -> None:
    """[COORD-DIGEST] the gateway's own key signs an approval of another plan: ABORTED."""
    key = trip.world.keys["gateway"]
    outcome = trip.run(forge=lambda gateway: ForgeApproval(gateway, key, planDigest=OTHER_PLAN))
    assert outcome.state is TxnState.ABORTED
    assert outcome.reason.startswith(f"approval finance: approval is for plan {OTHER_PLAN}")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"fence": 7}, "receipt is for fence 7, not 1"),
        ({"tier": "final"}, "participant prepared tier final, the plan says hold"),
        ({"txnId": "trip-other"}, "receipt is for trip-other/room"),
        ({"branchId": "seat"}, "receipt is for trip-1/seat"),
        ({"participant": AIRLINE}, f"receipt names participant {AIRLINE}"),
    ],
)
def test_a_receipt_for_another_fence_tier_or_branch_counts_as_no_COORD_DIGEST(
    trip: Trip, changes: dict[str, Any], problem: str
) -> None:
    """[COORD-DIGEST] the hotel's own key, but not this fence, tier or branch: ABORTED."""
    forged = Forge(trip.links[HOTEL], trip.world.keys[HOTEL], **changes)
    outcome = trip.run(links={HOTEL: forged})
    assert outcome.state is TxnState.ABORTED
    assert _room_vote(outcome)["problem"] == problem
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_a_no_vote_flipped_to_yes_breaks_its_signature_COORD_SIGNER(open_trip: OpenTrip) -> None:
    """[COORD-SIGNER] the sold-out hotel's no, edited to yes on the wire: still a no."""
    trip = open_trip(rooms=0)
    flipped = Forge(trip.links[HOTEL], None, vote="yes", reason=None)
    outcome = trip.run(links={HOTEL: flipped})
    assert outcome.state is TxnState.ABORTED
    assert _room_vote(outcome)["problem"].startswith("signature: ")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE


def test_a_malformed_receipt_counts_as_no_COORD_DIGEST(trip: Trip) -> None:
    """[COORD-DIGEST] a receipt that is not a PrepareReceipt at all: a no, never a crash."""
    forged = Forge(trip.links[HOTEL], trip.world.keys[HOTEL], vote="maybe")
    outcome = trip.run(links={HOTEL: forged})
    assert outcome.state is TxnState.ABORTED
    assert _room_vote(outcome)["problem"].startswith("malformed prepare receipt: ")
    assert trip.world.effects(outcome.txn_id) == ALL_NONE
