"""Holds: lease and horizon in the receipt; a commit after the lease releases [PART-HOLD]."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock, format_time
from hatp.errors import HoldExpired
from hatp.evidence import digest, verify
from hatp.model import BranchState
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import branch, keyring, plan, run, seat

START = "2026-12-02T09:00:00.000Z"


def test_hold_receipt_carries_lease_capped_at_max_and_horizon_PART_HOLD(
    airline: ParticipantServer,
) -> None:
    # HoldSeat grants at most 600 s and holds at most 900 s; it asks for nothing.
    receipt = run(airline.prepare(plan(), "seat", 1))
    assert receipt["leaseExpiresAt"] == "2026-12-02T09:10:00.000Z"
    assert receipt["holdHorizon"] == "2026-12-02T09:15:00.000Z"
    assert receipt["time"] == START


@pytest.mark.parametrize(
    ("asked", "ends"),
    [(120, "2026-12-02T09:02:00.000Z"), (3600, "2026-12-02T09:10:00.000Z")],
)
def test_asked_lease_is_granted_up_to_the_cap_PART_HOLD(
    airline: ParticipantServer, asked: int, ends: str
) -> None:
    p = plan("txn-1", branch("seat", args={"seat": "12A", "lease": asked}))
    assert run(airline.prepare(p, "seat", 1))["leaseExpiresAt"] == ends


def test_commit_within_the_lease_tickets_the_seat(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    p = plan()
    run(airline.prepare(p, "seat", 1))
    clock.advance(599.999)
    receipt = run(airline.commit("txn-1", "seat", 1, digest(p.to_wire()), None))
    verify(receipt, keyring())
    assert (receipt["kind"], receipt["outcome"], receipt["undoToken"]) == (
        "commit",
        "committed",
        None,
    )
    assert receipt["effect"] == {"ticketed": "12A"}
    assert seat(ledgers) == ("ticketed", "txn-1/seat")


def test_commit_after_the_lease_releases_and_raises_hold_expired_PART_HOLD(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    p = plan()
    run(airline.prepare(p, "seat", 1))
    clock.advance(600)
    with pytest.raises(HoldExpired) as caught:
        run(airline.commit("txn-1", "seat", 1, digest(p.to_wire()), None))
    assert caught.value.data["leaseExpiresAt"] == "2026-12-02T09:10:00.000Z"
    assert seat(ledgers) == ("free", None)
    status = run(airline.status("txn-1", "seat"))
    assert status.state is BranchState.ABORTED
    assert status.receipt is not None
    verify(status.receipt, keyring())
    assert status.receipt["kind"] == "abort"
    assert status.receipt["effect"]["reason"] == "HOLD_EXPIRED"
    # Asked again, it says the same, and still commits nothing.
    with pytest.raises(HoldExpired):
        run(airline.commit("txn-1", "seat", 1, digest(p.to_wire()), None))
    assert seat(ledgers) == ("free", None)


def test_abort_after_an_expiry_returns_the_release_receipt_PART_HOLD(
    airline: ParticipantServer, clock: ManualClock
) -> None:
    p = plan()
    run(airline.prepare(p, "seat", 1))
    clock.advance(601)
    run(airline.sweep())
    released = run(airline.status("txn-1", "seat")).receipt
    assert run(airline.abort("txn-1", "seat", 1)) == released


def test_sweep_releases_only_expired_holds_PART_HOLD(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    p1 = plan("txn-1", branch("seat", args={"seat": "12A", "lease": 60}))
    run(airline.prepare(p1, "seat", 1))
    usd380 = {"value": "380.00", "currency": "USD"}
    p2 = plan("txn-2", branch("seat", args={"seat": "12B"}, amount=usd380))
    run(airline.prepare(p2, "seat", 1))
    clock.advance(60)
    assert run(airline.sweep()) == [("txn-1", "seat")]
    assert seat(ledgers, "12A") == ("free", None)
    assert seat(ledgers, "12B") == ("held", "txn-2/seat")
    assert run(airline.sweep()) == []
    assert format_time(clock.now()) == "2026-12-02T09:01:00.000Z"
    with pytest.raises(HoldExpired):
        run(airline.commit("txn-1", "seat", 1, digest(p1.to_wire()), None))


def test_sweep_leaves_dry_runs_and_committed_holds_alone(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    p = plan()
    run(airline.prepare(p, "seat", 1))
    run(airline.prepare(p, "event", 1))
    run(airline.commit("txn-1", "seat", 1, digest(p.to_wire()), None))
    clock.advance(3600)
    assert run(airline.sweep()) == []
    assert seat(ledgers) == ("ticketed", "txn-1/seat")
    assert run(airline.status("txn-1", "event")).state is BranchState.PREPARED
