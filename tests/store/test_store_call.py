"""Store work off the event loop: Store.call runs on the store's own threads, within a
bound, and a call its caller gave up on records nothing."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from hatp.errors import StoreUnavailable, TransactionUnknown
from hatp.store import DecisionLog, Store, StoreLimits, open_store

#: How long a test's caller waits for a call it expects to hang (not a timing claim).
SHORT = StoreLimits(call_seconds=0.2, busy_seconds=60, workers=1)


def test_a_call_runs_on_a_worker_thread_and_returns_its_answer_STORE_OFF_LOOP(
    store: Store,
) -> None:
    """[STORE-OFF-LOOP] the function runs on another thread than the loop's; its answer
    and its errors come back as they are."""

    def where(extra: int) -> tuple[str, int]:
        store.ping()
        return threading.current_thread().name, extra

    def refuse() -> None:
        raise KeyError("no such thing")

    async def body() -> tuple[str, int]:
        with pytest.raises(KeyError, match="no such thing"):
            await store.call(refuse)
        return await store.call(where, extra=7)

    name, extra = asyncio.run(body())
    assert name.startswith(f"hatp-store-{store.dialect}")
    assert name != threading.current_thread().name
    assert extra == 7


def test_a_sqlite_connection_made_on_a_worker_is_used_on_another_thread_STORE_OFF_LOOP(
    tmp_path: Path,
) -> None:
    """[STORE-OFF-LOOP] the pool hands a connection to any thread, one at a time: a
    connection a worker opened serves the main thread next."""
    store = open_store(tmp_path / "hatp.db", limits=StoreLimits(workers=1))
    try:
        asyncio.run(store.call(store.ping))
        with store.transaction() as conn:  # the same pooled connection, on this thread
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    finally:
        store.close()


def test_a_held_write_lock_fails_the_call_at_its_bound_and_the_loop_goes_on_STORE_OFF_LOOP(
    tmp_path: Path, new_txn: Callable[..., object], caplog: pytest.LogCaptureFixture
) -> None:
    """[STORE-OFF-LOOP] another connection holds SQLite's write lock: the call waits on
    its worker, the loop keeps running other work, the caller gets STORE_UNAVAILABLE at
    ``call_seconds``; the worker, once it gets the lock, records nothing for the caller
    that left; with the lock free, calls succeed again."""
    path = tmp_path / "hatp.db"
    store = open_store(path, limits=SHORT)
    log = DecisionLog(store)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    txn = new_txn("txn-locked")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def body() -> None:
        ticker = asyncio.create_task(tick())
        try:
            with pytest.raises(StoreUnavailable, match=r"no answer within 0\.2 s") as caught:
                await store.call(txn.create, log)  # type: ignore[attr-defined]
        finally:
            ticker.cancel()
        assert caught.value.data["timeout"] == 0.2
        assert caught.value.data["dialect"] == "sqlite"
        assert ticks > 1  # the loop ran other work while the call waited
        holder.execute("ROLLBACK")
        # One worker: this runs after the abandoned create has finished on it.
        await store.call(store.ping)

    try:
        with caplog.at_level(logging.WARNING, logger="hatp.store._engine"):
            asyncio.run(body())
        with pytest.raises(TransactionUnknown):
            log.get("txn-locked")
        assert any("gave no answer within 0.2 s" in r.message for r in caplog.records)
    finally:
        holder.close()
        store.close()


def test_a_call_whose_caller_gave_up_before_it_started_never_runs_STORE_OFF_LOOP(
    tmp_path: Path,
) -> None:
    """[STORE-OFF-LOOP] the one worker is busy; a queued call times out and is dropped,
    not run later."""
    store = open_store(tmp_path / "hatp.db", limits=SHORT)
    release = threading.Event()
    ran: list[str] = []

    def busy() -> None:
        release.wait(timeout=30)

    async def body() -> None:
        first = asyncio.ensure_future(store.call(busy))
        await asyncio.sleep(0)  # let it hand busy to the worker first
        with pytest.raises(StoreUnavailable):
            await store.call(ran.append, "queued")
        with pytest.raises(StoreUnavailable):
            await first
        release.set()
        await store.call(ran.append, "after")

    try:
        asyncio.run(body())
    finally:
        release.set()
        store.close()
    assert ran == ["after"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("call_seconds", 0), ("lock_seconds", -1), ("busy_seconds", float("inf")), ("workers", 0)],
)
def test_limits_refuse_a_wait_without_bound(field: str, value: float) -> None:
    """[STORE-LIMITS] every wait has a positive, finite bound."""
    with pytest.raises(ValueError, match=field):
        StoreLimits(**{field: value})


def test_calls_in_a_lane_run_one_at_a_time_in_the_order_made_STORE_OFF_LOOP(
    tmp_path: Path,
) -> None:
    """[STORE-OFF-LOOP] the gateway's lane: its store work in the order the loop asked for
    it, never two at once, though the store has several workers."""
    store = open_store(tmp_path / "hatp.db", limits=StoreLimits(workers=4))
    lane = store.lane()
    order: list[int] = []
    running = threading.Semaphore(1)

    def step(number: int) -> None:
        if not running.acquire(blocking=False):
            raise AssertionError("two calls of one lane ran at once")
        try:
            store.ping()
            order.append(number)
        finally:
            running.release()

    async def body() -> None:
        await asyncio.gather(*(store.call_in(lane, step, n) for n in range(8)))

    try:
        asyncio.run(body())
    finally:
        store.close()
    assert order == list(range(8))
