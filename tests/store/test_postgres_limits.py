"""PostgreSQL sessions wait for nothing without a bound, and a pooled connection the
server dropped is replaced, not failed on."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from databases import fresh_schema_url
from hatp.errors import StoreUnavailable
from hatp.store import DecisionLog, Store, StoreLimits, open_store

LIMITS = StoreLimits(statement_seconds=0.3, lock_seconds=0.2, idle_in_transaction_seconds=7)


@pytest.fixture
def pg_url(pg_database_url: str) -> str:
    return fresh_schema_url(pg_database_url)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = open_store(pg_url, limits=LIMITS)
    yield store
    store.close()


def admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """A plain connection to the test's database, outside any store's pool."""
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return psycopg.connect(plain, autocommit=True)


def test_every_session_bounds_statements_locks_and_idle_transactions_STORE_LIMITS(
    pg_store: Store,
) -> None:
    """[STORE-LIMITS] set at connection start-up from the store's limits."""
    with pg_store.transaction() as conn:
        shown = {
            name: conn.exec_driver_sql(f"SHOW {name}").scalar()
            for name in (
                "statement_timeout",
                "lock_timeout",
                "idle_in_transaction_session_timeout",
                "synchronous_commit",
            )
        }
    assert shown == {
        "statement_timeout": "300ms",
        "lock_timeout": "200ms",
        "idle_in_transaction_session_timeout": "7s",
        "synchronous_commit": "on",
    }


def test_a_statement_past_its_timeout_is_store_unavailable_and_logged_STORE_LIMITS(
    pg_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """[STORE-LIMITS] the server cancels it; the caller gets STORE_UNAVAILABLE."""
    with (
        caplog.at_level(logging.WARNING, logger="hatp.store._engine"),
        pytest.raises(StoreUnavailable, match="statement timeout") as caught,
        pg_store.transaction() as conn,
    ):
        conn.exec_driver_sql("SELECT pg_sleep(30)")
    assert caught.value.data["dialect"] == "postgresql"
    assert any("statement timeout" in r.getMessage() for r in caplog.records)


def test_a_lock_held_elsewhere_is_store_unavailable_at_the_lock_timeout_STORE_LIMITS(
    pg_store: Store, pg_url: str, new_txn: type
) -> None:
    """[STORE-LIMITS] another session holds the log's table locked: the write fails
    typed at ``lock_seconds``, nothing recorded; once the lock is gone it succeeds."""
    log = DecisionLog(pg_store)
    txn = new_txn("txn-behind-a-lock")
    with admin(pg_url) as other:
        schema = make_url(pg_url).query["options"]
        other.execute(f"SET {str(schema).removeprefix('-c').replace('=', ' TO ', 1)}")
        other.execute("BEGIN")
        other.execute("LOCK TABLE hatp_txn IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreUnavailable, match="lock timeout"):
            txn.create(log)
        other.execute("ROLLBACK")
    assert txn.create(log) == 1


def test_the_first_transaction_after_the_server_dropped_the_pool_succeeds_STORE_PRE_PING(
    pg_store: Store, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """[STORE-PRE-PING] as after a server restart: every pooled connection's backend is
    terminated from another session, and the next transaction gets a live one."""
    caplog.set_level(logging.INFO, logger="hatp.store")
    log = DecisionLog(pg_store)
    with pg_store.transaction() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    _terminate(pg_url, pid)
    assert log.open_transactions() == []
    with pg_store.transaction() as conn:
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid
    assert "dropped by the server; replacing it" in caplog.text


def test_a_kept_connection_the_server_dropped_is_replaced_STORE_PRE_PING(
    pg_store: Store, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """[STORE-PRE-PING] the connection a driver transaction kept for the next one is
    terminated from another session while idle: the next driver transaction (a read
    of the log) does not fail on it; it runs on a live connection."""
    caplog.set_level(logging.INFO, logger="hatp.store")
    with pg_store.driver_transaction() as cursor:
        pid = cursor.connection.info.backend_pid
    _terminate(pg_url, pid)
    assert DecisionLog(pg_store).open_transactions() == []
    with pg_store.driver_transaction() as cursor:
        assert cursor.connection.info.backend_pid != pid
    assert "dropped by the server; replacing it" in caplog.text


def _terminate(url: str, pid: int) -> None:
    """End the backend ``pid`` from another session, and wait until it is gone."""
    with admin(url) as other:
        ended = other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        assert ended == (True,)
        gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
        for _ in range(1000):  # the backend exits asynchronously; poll, do not sleep
            if other.execute(gone, (pid,)).fetchone() == (0,):
                break


def test_a_quiet_pooled_connection_leaves_the_pool_without_a_round_trip_STORE_PRE_PING(
    pg_store: Store, pg_url: str
) -> None:
    """[STORE-PRE-PING] a connection the server said nothing on is not pinged at checkout:
    its backend's last statement is still the commit of the transaction before it (a
    ping at every checkout, as SQLAlchemy's pre-ping does, would have left its own)."""
    with pg_store.transaction() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    with pg_store.driver_transaction() as cursor:  # no statement of its own
        assert cursor.connection.info.backend_pid == pid  # the same pooled connection
    with admin(pg_url) as other:
        last = other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,))
        assert last.fetchone() == ("COMMIT",)
