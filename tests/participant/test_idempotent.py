"""Every call is idempotent by (txnId, branchId) [PART-IDEMPOTENT] and durable before it
answers [PART-DURABLE]."""

from __future__ import annotations

import asyncio

import pytest

from hatp.clock import ManualClock
from hatp.evidence import canonicalize, digest
from hatp.model import BranchState
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import branch, charge_count, plan, run, seat, seen, server, slot


def test_repeated_commit_returns_the_same_receipt_and_one_effect_PART_IDEMPOTENT(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    p = plan()
    voted = run(airline.prepare(p, "charge", 1))
    first = run(airline.commit("txn-1", "charge", 1, digest(p.to_wire()), seen(voted)))
    clock.advance(30)
    again = run(airline.commit("txn-1", "charge", 1, digest(p.to_wire()), seen(voted)))
    assert canonicalize(again) == canonicalize(first)
    assert charge_count(ledgers) == 1


def test_repeated_abort_returns_the_same_receipt_PART_IDEMPOTENT(
    airline: ParticipantServer, clock: ManualClock, ledgers: Store
) -> None:
    run(airline.prepare(plan(), "seat", 1))
    first = run(airline.abort("txn-1", "seat", 1))
    clock.advance(30)
    assert canonicalize(run(airline.abort("txn-1", "seat", 1))) == canonicalize(first)
    assert seat(ledgers) == ("free", None)


def test_receipts_survive_a_restart_PART_DURABLE(
    airline: ParticipantServer, ledgers: Store, clock: ManualClock
) -> None:
    p = plan()
    voted = run(airline.prepare(p, "event", 1))
    committed = run(airline.commit("txn-1", "event", 1, digest(p.to_wire()), seen(voted)))
    restarted = server(ledgers, clock)
    assert run(restarted.prepare(p, "event", 1)) == voted
    again = run(restarted.commit("txn-1", "event", 1, digest(p.to_wire()), seen(voted)))
    assert again == committed
    assert slot(ledgers) == (2, "Flight to Berlin")
    assert run(restarted.status("txn-1", "event")).receipt == committed


def test_failed_commit_keeps_neither_effect_nor_state_PART_DURABLE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    args = {"cost": {"value": "420.00", "currency": "USD"}, "fail_after_write": True}
    p = plan("txn-1", branch("charge", args=args))
    voted = run(airline.prepare(p, "charge", 1))
    with pytest.raises(RuntimeError):
        run(airline.commit("txn-1", "charge", 1, digest(p.to_wire()), seen(voted)))
    assert charge_count(ledgers) == 0  # the operation's write rolled back with the state
    assert run(airline.status("txn-1", "charge")).state is BranchState.PREPARED


def test_status_changes_nothing(airline: ParticipantServer) -> None:
    status = run(airline.status("txn-1", "seat"))
    assert (status.state, status.fence, status.receipt, status.flags) == (
        BranchState.UNKNOWN,
        0,
        None,
        [],
    )
    assert run(airline.status("txn-1", "seat")) == status


def test_concurrent_repeats_commit_once_PART_IDEMPOTENT(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan()
    voted = run(airline.prepare(p, "charge", 1))

    async def all_at_once() -> list[dict[str, object]]:
        calls = (
            airline.commit("txn-1", "charge", 1, digest(p.to_wire()), seen(voted)) for _ in range(5)
        )
        return list(await asyncio.gather(*calls))

    receipts = run(all_at_once())
    assert all(receipt == receipts[0] for receipt in receipts)
    assert charge_count(ledgers) == 1
