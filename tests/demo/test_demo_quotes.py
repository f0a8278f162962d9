"""The trip world's participants quote their prices [PART-QUOTE] and place lost holds again
[PART-REPLACE], and the effect each transaction leaves is judged right after a replacement."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hatp.clock import ManualClock
from hatp.demo import AIRLINE, HOTEL, PAYMENTS, TripWorld, trip_plan
from hatp.evidence import digest
from hatp.model import Plan, parse_plan


@pytest.fixture
def world(tmp_path: Path, clock: ManualClock) -> Iterator[TripWorld]:
    with TripWorld.open(tmp_path / "trip", clock) as opened:
        yield opened


def trip(world: TripWorld, txn_id: str = "txn-q1", **options: Any) -> Plan:
    decide_by = world.clock.now() + timedelta(hours=1)
    return parse_plan(trip_plan(txn_id, decide_by=decide_by, **options))


def quote(world: TripWorld, plan: Plan, branch_id: str) -> dict[str, Any]:
    server = world.participants[plan.branch(branch_id).participant]
    return dict(asyncio.run(server.quote(plan, branch_id, 1)))


def test_the_airline_quotes_the_fare_for_thirty_minutes_PART_QUOTE(world: TripWorld) -> None:
    plan = trip(world)
    seat = quote(world, plan, "seat")
    assert seat["participant"] == AIRLINE
    assert (seat["cost"], seat["validUntil"]) == (
        {"value": "420.00", "currency": "USD"},
        "2026-12-02T09:30:00.000Z",
    )
    assert (seat["leaseSeconds"], seat["holdSeconds"]) == (1200.0, 1800.0)
    business = quote(world, trip(world, seat="2A"), "seat")
    assert business["cost"] == {"value": "2140.00", "currency": "USD"}  # above the plan's 420
    nowhere = quote(world, trip(world, seat="99Z"), "seat")
    assert (nowhere["cost"], nowhere["validUntil"]) == (None, None)
    assert world.effects("txn-q1")[AIRLINE] == "none"


def test_the_hotel_quotes_rate_times_nights_for_an_hour_PART_QUOTE(world: TripWorld) -> None:
    room = quote(world, trip(world), "room")
    assert room["participant"] == HOTEL
    assert (room["cost"], room["validUntil"]) == (
        {"value": "310.00", "currency": "USD"},
        "2026-12-02T10:00:00.000Z",
    )
    assert (room["leaseSeconds"], room["holdSeconds"]) == (1200.0, 1800.0)
    assert world.effects("txn-q1")[HOTEL] == "none"


def test_payments_quotes_the_amount_without_expiry_or_lease_PART_QUOTE(world: TripWorld) -> None:
    charge = quote(world, trip(world), "charge")
    assert charge["participant"] == PAYMENTS
    assert (charge["tier"], charge["cost"], charge["validUntil"]) == (
        "final",
        {"value": "730.00", "currency": "USD"},
        None,
    )
    assert (charge["leaseSeconds"], charge["holdSeconds"]) == (None, None)
    assert world.effects("txn-q1")[PAYMENTS] == "none"


@pytest.mark.parametrize("branch_id", ["seat", "room"])
def test_a_replaced_hold_then_committed_is_whole_PART_REPLACE(
    world: TripWorld, branch_id: str
) -> None:
    plan = trip(world)
    server = world.participants[plan.branch(branch_id).participant]
    asyncio.run(server.prepare(plan, branch_id, 1))
    world.clock.advance(1200)  # the lease ends
    asyncio.run(server.sweep())
    again = asyncio.run(server.replace(plan, branch_id, 1, 2))
    assert (again["attempt"], again["vote"]) == (2, "yes")
    committed = asyncio.run(server.commit("txn-q1", branch_id, 1, digest(plan.to_wire()), None))
    assert committed["outcome"] == "committed"
    assert world.effects("txn-q1")[plan.branch(branch_id).participant] == "whole"
