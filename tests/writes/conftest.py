"""Fixtures of the executor tests (the world they share is in executor_world.py)."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock
from hatp.store import Store
from hatp.writes import Writes
from writes.executor_world import ROWS, make_writes
from writes.inventory import stock


@pytest.fixture
def writes(store: Store, clock: ManualClock) -> Writes:
    """A stocked inventory (ROWS) and a Writes on the same database, SQLite or PostgreSQL."""
    stock(store, ROWS)
    return make_writes(store, clock)
