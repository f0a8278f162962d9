"""Participant-side faults for the crash tests and the soak: a store full or down, a
participant silent, a reply lost (:mod:`hatp.demo._faulty`)."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hatp.clock import SystemClock
from hatp.demo import HOTEL, TripWorld, trip_plan
from hatp.demo._child import SERVICES, faulty_links
from hatp.demo._faulty import EVERY, Fault, FaultyParticipant, parse_faults
from hatp.errors import ParticipantUnavailable, StoreUnavailable
from hatp.model import parse_plan


@pytest.fixture
def world(tmp_path: Path) -> Any:
    with TripWorld.open(tmp_path / "trip", SystemClock()) as opened:
        yield opened


def test_a_fault_spec_names_the_service_the_call_the_kind_and_how_often() -> None:
    spec = "hotel.abort=store-full, payments.commit=unreachable*2,"
    assert parse_faults(spec, tuple(SERVICES)) == [
        Fault("hotel", "abort", "store-full", EVERY),
        Fault("payments", "commit", "unreachable", 2),
    ]
    assert parse_faults("", tuple(SERVICES)) == []
    assert str(Fault("payments", "commit", "unreachable", 2)) == "payments.commit=unreachable*2"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("bank.abort=store-full", "the service is one of airline, hotel"),
        ("hotel.close=store-full", "the call is one of prepare"),
        ("hotel.abort=fire", "the kind is one of store-full"),
        ("hotel.abort=store-full*0", "a whole number above 0"),
        ("hotel.abort=store-full*x", "a whole number above 0"),
        ("hotel", "the call is one of"),
    ],
)
def test_a_malformed_fault_spec_is_refused_saying_what_is_allowed(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_faults(spec, tuple(SERVICES))


def test_the_crash_child_refuses_a_malformed_fault_spec(world: TripWorld) -> None:
    with pytest.raises(SystemExit, match=r"HATP_CHILD_FAULTS: fault 'hotel\.abort=fire'"):
        faulty_links(world, "hotel.abort=fire", {})


def _plan(world: TripWorld) -> Any:
    return parse_plan(trip_plan("trip-faulty", decide_by=world.clock.now() + timedelta(minutes=5)))


def test_a_full_store_is_the_stores_own_refusal_and_nothing_is_done(world: TripWorld) -> None:
    """store-full: the StoreUnavailable the store raises for SQLite's "disk is full"."""
    hotel = FaultyParticipant(
        world.participants[HOTEL], world.stores[HOTEL], [Fault("hotel", "prepare", "store-full", 1)]
    )
    plan = _plan(world)
    with pytest.raises(StoreUnavailable, match="database or disk is full") as refused:
        asyncio.run(hotel.prepare(plan, "room", 1))
    assert isinstance(refused.value.__cause__.orig, sqlite3.OperationalError)  # type: ignore[union-attr]
    assert world.ledger(HOTEL) == []
    receipt = asyncio.run(hotel.prepare(plan, "room", 1))  # only once: the next one runs
    assert receipt["vote"] == "yes"
    assert hotel.failed["prepare"] == 1


@pytest.mark.parametrize(("kind", "kinds"), [("unreachable", []), ("lost-reply", ["held"])])
def test_a_silent_participant_did_nothing_and_a_lost_reply_did_it_all(
    world: TripWorld, kind: str, kinds: list[str]
) -> None:
    (hotel,) = faulty_links(world, f"hotel.prepare={kind}", {}).values()
    with pytest.raises(ParticipantUnavailable):
        asyncio.run(hotel.prepare(_plan(world), "room", 1))
    assert [line.kind for line in world.ledger(HOTEL)] == kinds


def test_a_store_that_cannot_be_reached_refuses_every_call_it_is_on(world: TripWorld) -> None:
    (hotel,) = faulty_links(world, "hotel.abort=store-unavailable", {}).values()
    for _ in range(3):
        with pytest.raises(StoreUnavailable, match="could not be reached"):
            asyncio.run(hotel.abort("trip-faulty", "room", 1))
    assert world.ledger(HOTEL) == []
