"""Fixtures of the system-of-record tests (the world they share is in sor_world.py)."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock
from hatp.lease import SystemOfRecord
from hatp.store import Store
from lease.sor_world import Desk, ticket_world


@pytest.fixture
def desk() -> Desk:
    """The escrow desk the ticket system tells of HUMAN_ESCROW recoveries."""
    return Desk()


@pytest.fixture
def sor(store: Store, clock: ManualClock, desk: Desk) -> SystemOfRecord:
    """The demo's ticket system with tickets 4711 and 4712, on SQLite and on PostgreSQL."""
    return ticket_world(store, clock, escrow=desk)
