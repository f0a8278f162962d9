"""Store test fixtures: extra stores on the same database, and real signed record events.

(Fixtures rather than importable helpers: with ``--import-mode=importlib`` a
``conftest`` cannot be imported by name from test modules.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from hatp.clock import ManualClock
from hatp.evidence import RecordWriter, SigningKey, digest
from hatp.store import DecisionLog, Store, open_store

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
COORDINATOR = SigningKey.from_seed(bytes([70]) * 32, "coordinator-1")
PLAN: dict[str, Any] = {"hatpVersion": "0.1", "planId": "plan-1", "branches": [{"id": "flight"}]}
PLAN_DIGEST = digest(PLAN)


class Txn:
    """A transaction's record being written, as a coordinator would."""

    start = START
    plan = PLAN
    plan_digest = PLAN_DIGEST

    def __init__(self, txn_id: str, start: datetime = START) -> None:
        self.txn_id = txn_id
        self.clock = ManualClock(start)
        self.writer = RecordWriter(txn_id, self.clock)

    def event(self, event_type: str = "txn.prepared", **body: Any) -> dict[str, Any]:
        """Sign and return the next event (one second after the one before)."""
        self.clock.advance(1)
        return self.writer.append(event_type, {"planDigest": PLAN_DIGEST, **body}, COORDINATOR)

    def create(self, log: DecisionLog, owner: str = "coord-a", lease_seconds: float = 30.0) -> int:
        """Log the transaction with its ``txn.planned`` event; return the fence."""
        planned = self.writer.append(
            "txn.planned",
            {"planDigest": PLAN_DIGEST, "plan": PLAN, "coordinator": owner, "fence": 1},
            COORDINATOR,
        )
        return log.create(
            self.txn_id, PLAN, PLAN_DIGEST, owner, self.clock.now(), lease_seconds, [planned]
        )


@pytest.fixture
def new_txn() -> type[Txn]:
    """``new_txn(txn_id, start=START)``: a transaction whose signed events tests log."""
    return Txn


@pytest.fixture
def log(store: Store) -> DecisionLog:
    return DecisionLog(store)


@pytest.fixture
def open_more(store_url: str) -> Iterator[Callable[[], Store]]:
    """Open further stores on the test's database (as other processes would); closed after."""
    opened: list[Store] = []

    def more() -> Store:
        opened.append(open_store(store_url))
        return opened[-1]

    yield more
    for each in opened:
        each.close()
