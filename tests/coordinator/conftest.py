"""A trip for the coordinator: the decision log on the parametrized store, real participants.

The log runs once on SQLite and once on PostgreSQL (``store``). The four
participants keep their stores on SQLite files in the test's folder, or in
the same PostgreSQL schema as the log when the log is on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinator.trips import Trip
from hatp.clock import ManualClock
from hatp.demo import PARTICIPANT_IDS, TripWorld
from hatp.store import DecisionLog, Store

OpenTrip = Callable[..., Trip]


@pytest.fixture
def log(store: Store) -> DecisionLog:
    return DecisionLog(store)


@pytest.fixture
def open_trip(
    tmp_path: Path, clock: ManualClock, store_url: str, log: DecisionLog
) -> Iterator[OpenTrip]:
    """Open the trip world (``rooms`` a night at the hotel) with the log and clock."""
    worlds: list[TripWorld] = []
    urls = None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)

    def opener(*, rooms: int = 30) -> Trip:
        world = TripWorld.open(tmp_path / "trip", clock, rooms=rooms, store_urls=urls)
        worlds.append(world)
        return Trip(world, log, clock)

    yield opener
    for world in worlds:
        world.close()


@pytest.fixture
def trip(open_trip: OpenTrip) -> Trip:
    """The trip world with rooms to spare, so one test can run many transactions."""
    return open_trip()
