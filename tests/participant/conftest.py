"""The airline participant, on the parametrized store, with its ledgers stocked."""

from __future__ import annotations

import pytest

from hatp.clock import ManualClock
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import server, setup_ledgers


@pytest.fixture
def ledgers(store: Store) -> Store:
    setup_ledgers(store)
    return store


@pytest.fixture
def airline(ledgers: Store, clock: ManualClock) -> ParticipantServer:
    return server(ledgers, clock)
