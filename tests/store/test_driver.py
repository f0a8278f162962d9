"""Core statements run on the DB-API driver (hatp.store._driver), on both databases."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from hatp.errors import StoreUnavailable
from hatp.store import Store, open_store
from hatp.store._driver import INTEGRITY_ERRORS, DriverSession, DriverStatement
from hatp.store._schema import txn

_ROW = {
    "txn_id": "t-1",
    "plan": "{}",
    "plan_digest": "sha256:x",
    "state": "active",
    "fence": 1,
    "created_at": 5,
    "updated_at": 5,
}
_KEY = sa.bindparam("k_txn_id")
_BUMP = sa.update(txn).where(txn.c.txn_id == _KEY).values(fence=txn.c.fence + 1)
_SET = sa.update(txn).where(txn.c.txn_id == _KEY).returning(txn.c.fence, txn.c.owner)
_GET = sa.select(txn.c.txn_id, txn.c.fence).order_by(txn.c.txn_id)


def test_statements_write_and_read_rows_by_name_and_position(store: Store) -> None:
    with store.driver_session() as session:
        session.executemany(txn.insert(), [_ROW, {**_ROW, "txn_id": "t-2"}])
        # The 1 of fence + 1 is the statement's own value, not a parameter.
        assert session.execute(_BUMP, {"k_txn_id": "t-1"}).all() == []
        # An UPDATE without .values() sets the columns its parameters name.
        changed = session.execute(_SET, {"owner": "coord-a", "k_txn_id": "t-2"}).one()
        assert (changed.fence, changed.owner) == (1, "coord-a")
    with store.driver_session() as session:
        rows = session.execute(_GET).all()
        assert [(row.txn_id, row.fence) for row in rows] == [("t-1", 2), ("t-2", 1)]
        assert [tuple(row) for row in rows] == [("t-1", 2), ("t-2", 1)]
        assert session.execute(_GET).scalars() == ["t-1", "t-2"]
        assert session.execute(_GET.where(txn.c.txn_id == "none")).first() is None


def test_one_refuses_anything_but_one_row(store: Store) -> None:
    with store.driver_session() as session:
        session.executemany(txn.insert(), [_ROW, {**_ROW, "txn_id": "t-2"}])
        with pytest.raises(LookupError, match="expected one row, got 2"):
            session.execute(_GET).one()


def test_a_block_that_raises_records_nothing(store: Store) -> None:
    with pytest.raises(RuntimeError), store.driver_session() as session:
        session.executemany(txn.insert(), [_ROW])
        raise RuntimeError("changed my mind")
    with store.driver_session() as session:
        assert session.execute(_GET).all() == []


def test_a_driver_error_leaves_as_store_unavailable_and_rolls_back(store: Store) -> None:
    with pytest.raises(StoreUnavailable) as raised, store.driver_session() as session:
        session.executemany(txn.insert(), [_ROW])
        session.executemany(txn.insert(), [_ROW])  # the same key again
    assert isinstance(raised.value.__cause__, INTEGRITY_ERRORS)
    with store.driver_session() as session:
        assert session.execute(_GET).all() == []


def test_inside_a_core_transaction_its_statements_share_it(store: Store) -> None:
    with pytest.raises(StoreUnavailable), store.transaction() as conn:
        DriverSession.of(conn).executemany(txn.insert(), [_ROW])
        conn.execute(txn.insert(), _ROW)  # fails on the row the driver wrote: it sees it
    with store.transaction() as conn:
        DriverSession.of(conn).executemany(txn.insert(), [_ROW])
        assert conn.execute(sa.select(txn.c.txn_id)).scalars().all() == ["t-1"]


def test_a_statement_with_an_in_list_is_refused() -> None:
    expanding = sa.select(txn.c.txn_id).where(txn.c.state.in_(["active", "preparing"]))
    with pytest.raises(ValueError, match="IN list"):
        DriverStatement("sqlite", expanding)


def test_a_read_session_reads_and_refuses_to_write(store: Store) -> None:
    with store.driver_session() as session:
        session.executemany(txn.insert(), [_ROW])
    with store.read_session() as session:
        assert session.execute(_GET).scalars() == ["t-1"]
        assert session.execute(sa.select(sa.func.max(txn.c.fence))).scalar() == 1
        with pytest.raises(TypeError, match="read-only"):
            session.execute(_BUMP, {"k_txn_id": "t-1"})
        with pytest.raises(TypeError, match="read-only"):
            session.executemany(txn.insert(), [{**_ROW, "txn_id": "t-2"}])
    with store.read_session() as session:
        assert session.execute(_GET.where(txn.c.txn_id == "t-1")).all()[0].fence == 1


def test_a_sqlite_read_session_takes_no_write_lock(tmp_path: Path) -> None:
    store = open_store(tmp_path / "read.db")
    try:
        with store.driver_session() as writing, store.read_session() as reading:
            # A writer holds the lock (BEGIN IMMEDIATE); a reader is not held up
            # by it and sees the last committed state.
            writing.executemany(txn.insert(), [_ROW])
            assert reading.execute(_GET).all() == []
    finally:
        store.close()


# --- the connections the driver path keeps between its transactions ------------------------


class _PoolTraffic:
    """Counts the connections checked out of a store's pool and given back to it."""

    def __init__(self, store: Store) -> None:
        self.out = self.back = 0
        self._engine = store._engine
        sa.event.listen(self._engine, "checkout", self._checkout)
        sa.event.listen(self._engine, "checkin", self._checkin)

    def _checkout(self, *_: object) -> None:
        self.out += 1

    def _checkin(self, *_: object) -> None:
        self.back += 1

    def remove(self) -> None:
        sa.event.remove(self._engine, "checkout", self._checkout)
        sa.event.remove(self._engine, "checkin", self._checkin)


def test_driver_transactions_one_after_another_keep_one_connection(store: Store) -> None:
    """The pool's checkout and check-in are paid once, not at every transaction."""
    traffic = _PoolTraffic(store)
    try:
        for number in range(5):
            with store.driver_session() as session:
                session.executemany(txn.insert(), [{**_ROW, "txn_id": f"t-{number}"}])
            with store.read_session() as session:
                assert len(session.execute(_GET).all()) == number + 1
        assert (traffic.out, traffic.back) == (1, 0)
    finally:
        traffic.remove()


def test_a_driver_transaction_that_raised_gives_its_connection_back(store: Store) -> None:
    """Only a connection whose transaction ended normally is kept; the pool resets the rest."""
    traffic = _PoolTraffic(store)
    try:
        with pytest.raises(StoreUnavailable), store.driver_session() as session:
            session.executemany(txn.insert(), [_ROW, _ROW])  # the same key twice
        with pytest.raises(RuntimeError), store.driver_session() as session:
            raise RuntimeError("changed my mind")
        assert (traffic.out, traffic.back) == (2, 2)
        with store.driver_session() as session:
            assert session.execute(_GET).all() == []
        assert (traffic.out, traffic.back) == (3, 2)
    finally:
        traffic.remove()


def test_the_connections_kept_are_few_and_given_back_at_close(store_url: str) -> None:
    """Eight threads in driver transactions at once: two connections stay kept, the
    others go back to the pool; closing the store gives the kept ones back too."""
    store = open_store(store_url)
    traffic = _PoolTraffic(store)
    inside = threading.Barrier(8)

    def one() -> None:
        with store.read_session() as session:
            inside.wait(timeout=30)  # all eight hold a connection at once
            session.execute(_GET).all()

    try:
        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (traffic.out, traffic.back) == (8, 6)
    finally:
        store.close()
    assert traffic.back == 8
