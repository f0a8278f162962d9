"""Concurrent executes: one effect, whoever races; aborted transactions are run again.

50 threads, each its own worker, execute one approved plan at once (on
PostgreSQL with real concurrency through the pool; on SQLite serialized by
``BEGIN IMMEDIATE``): exactly one applies it, every other gets the stored
result or ``CONCURRENT_EXECUTION``. A transaction the database aborts as a
serialization failure or deadlock is retried from its start: through the
test hook ``Writes._on_attempt`` (called inside each attempt of the main
transaction, after the key is locked) on both databases, and with a real
deadlock on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from hatp import _checks
from hatp.clock import ManualClock
from hatp.errors import ConcurrentExecution, StoreUnavailable
from hatp.store import Store
from hatp.store._schema import lease_end
from hatp.writes import ExecutionStatus, KeyState, WriteOutcome, Writes, _book, derive_key
from hatp.writes._executor import MAX_ATTEMPTS
from writes.executor_world import ADJUST, LEASE_SECONDS, approved, journal_rows, key_row
from writes.inventory import inventory, live

WORKERS = 50
BOUND_SECONDS = 60.0


def test_50_concurrent_executes_have_exactly_one_effect_WRITE_ONCE(
    writes: Writes, store: Store
) -> None:
    approved(writes, store)
    barrier = threading.Barrier(WORKERS)
    outcomes: list[Any] = [None] * WORKERS

    def run(index: int) -> None:
        barrier.wait(timeout=BOUND_SECONDS)
        try:
            outcomes[index] = writes.execute("fix-1", 1, f"worker-{index}")
        except ConcurrentExecution as refused:
            outcomes[index] = refused
        except BaseException as error:
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=BOUND_SECONDS)
    assert not any(t.is_alive() for t in threads)

    executed = [o for o in outcomes if isinstance(o, WriteOutcome) and o.status == "executed"]
    replays = [
        o for o in outcomes if isinstance(o, WriteOutcome) and o.status == "already-executed"
    ]
    refused = [o for o in outcomes if isinstance(o, ConcurrentExecution)]
    assert len(executed) == 1, outcomes
    assert len(executed) + len(replays) + len(refused) == WORKERS, outcomes
    assert all(r.result == executed[0].result for r in replays)
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert len(journal_rows(store)) == 1


def reserve(store: Store, clock: ManualClock, owner: str = "worker-elsewhere") -> str:
    """Reserve fix-1 v1's key for another worker, as its execute would, under a fresh lease."""
    key = derive_key("fix-1", 1)
    until = lease_end(clock.now(), LEASE_SECONDS)
    with store.transaction() as conn:
        assert _book.reserve_key_txn(conn, key, "fix-1", 1, owner, until, clock.now())
    return key


def test_a_reserved_key_with_a_live_lease_is_refused_WRITE_CONCURRENT(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    key = reserve(store, clock)
    clock.advance(LEASE_SECONDS - 1)

    with pytest.raises(ConcurrentExecution) as caught:
        writes.execute("fix-1", 1, "worker-a")

    assert caught.value.data["owner"] == "worker-elsewhere"
    assert live(store)["SKU-1"] == (10, "each", 1)
    assert journal_rows(store) == []
    row = key_row(store, key)
    assert row is not None
    assert (row.state, row.owner, row.fence) == ("reserved", "worker-elsewhere", 1)


def test_with_WRITE_CONCURRENT_off_a_live_reservation_is_taken(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    reserve(store, clock)

    with _checks.unsafe_switched_off("WRITE-CONCURRENT"):
        outcome = writes.execute("fix-1", 1, "worker-a")

    assert outcome.status is ExecutionStatus.EXECUTED  # beside a worker that may still run it


def aborted(store: Store) -> sa.exc.OperationalError:
    """What the driver raises when the database aborts a transaction for another's sake."""
    orig: Exception
    if store.dialect == "postgresql":
        orig = psycopg.errors.SerializationFailure("could not serialize access")
    else:
        orig = sqlite3.OperationalError("database is locked")
    return sa.exc.OperationalError("UPDATE inventory ...", {}, orig)


def test_a_serialization_failure_is_retried_without_a_trace(writes: Writes, store: Store) -> None:
    approved(writes, store)
    attempts: list[int] = []

    def fail_first(conn: sa.Connection, attempt: int) -> None:
        attempts.append(attempt)
        if attempt == 1:
            # Half the work is done when the database aborts the transaction.
            conn.execute(inventory.update().values(on_hand=inventory.c.on_hand + 100))
            raise aborted(store)

    writes._on_attempt = fail_first
    outcome = writes.execute("fix-1", 1, "worker-a")

    assert attempts == [1, 2]
    assert outcome.status is ExecutionStatus.EXECUTED
    assert live(store) == {"SKU-1": (15, "each", 2), "SKU-2": (5, "box", 1)}
    assert len(journal_rows(store)) == 1


def test_retries_are_bounded_and_leave_the_key_to_recovery(writes: Writes, store: Store) -> None:
    approved(writes, store)
    attempts: list[int] = []

    def always(conn: sa.Connection, attempt: int) -> None:
        attempts.append(attempt)
        raise aborted(store)

    writes._on_attempt = always
    with pytest.raises(StoreUnavailable):
        writes.execute("fix-1", 1, "worker-a")

    assert attempts == list(range(1, MAX_ATTEMPTS + 1))
    assert live(store)["SKU-1"] == (10, "each", 1)
    assert writes.status("fix-1", 1).key.state is KeyState.RESERVED  # type: ignore[union-attr]


def test_other_database_failures_are_not_retried(writes: Writes, store: Store) -> None:
    approved(writes, store)
    attempts: list[int] = []

    def broken(conn: sa.Connection, attempt: int) -> None:
        attempts.append(attempt)
        raise sa.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))

    writes._on_attempt = broken
    with pytest.raises(StoreUnavailable):
        writes.execute("fix-1", 1, "worker-a")
    assert attempts == [1]


def test_a_real_deadlock_on_postgresql_is_retried(writes: Writes, store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite's BEGIN IMMEDIATE serializes writers: it has no deadlocks")
    approved(writes, store, corrections=[ADJUST, ("set_unit", {"sku": "SKU-2", "unit": "kg"})])
    attempts: list[int] = []
    writes._on_attempt = lambda conn, attempt: attempts.append(attempt)
    engine = sa.create_engine(store.url, poolclass=NullPool)
    outcome: list[Any] = []
    try:
        with engine.connect() as other, engine.connect() as watcher:
            # Let the executor's deadlock check fire first, so it is the one aborted.
            other.exec_driver_sql("SET deadlock_timeout = '20s'")
            other.commit()
            sku = inventory.c.sku
            # The other transaction holds SKU-2; the executor locks SKU-1, then waits on SKU-2.
            other.execute(sa.select(inventory).where(sku == "SKU-2").with_for_update())
            worker = threading.Thread(
                target=lambda: outcome.append(writes.execute("fix-1", 1, "worker-a"))
            )
            worker.start()
            _wait_for_a_lock_wait(watcher)
            # Now it asks for SKU-1: a cycle, which PostgreSQL breaks by aborting the executor.
            other.execute(sa.select(inventory).where(sku == "SKU-1").with_for_update())
            other.rollback()
            worker.join(timeout=BOUND_SECONDS)
    finally:
        engine.dispose()

    assert attempts == [1, 2]
    [done] = outcome
    assert done.status is ExecutionStatus.EXECUTED
    assert live(store) == {"SKU-1": (15, "each", 2), "SKU-2": (5, "kg", 2)}
    assert len(journal_rows(store)) == 1


def _wait_for_a_lock_wait(watcher: sa.Connection) -> None:
    give_up = time.monotonic() + BOUND_SECONDS
    query = sa.text(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
    )
    while watcher.execute(query).scalar_one() == 0:
        watcher.rollback()
        if time.monotonic() > give_up:
            pytest.fail("the executor never waited on the other transaction's lock")
        time.sleep(0.01)
    watcher.rollback()
