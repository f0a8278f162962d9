"""Opening a store by URL, its durability settings, and the one error it raises."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc

from hatp.errors import HatpError, StoreUnavailable
from hatp.store import BranchStore, DecisionLog, Store, open_store
from hatp.store._engine import URL_HELP


def test_durability_settings_are_in_force_STORE_DURABLE(store: Store) -> None:
    """[STORE-DURABLE] SQLite: WAL, synchronous=FULL (2), busy timeout, foreign keys.
    PostgreSQL: synchronous_commit=on."""
    with store.transaction() as conn:
        if store.dialect == "sqlite":
            settings = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
            }
            assert settings == {
                "journal_mode": "wal",
                "synchronous": 2,
                "busy_timeout": 15_000,
                "foreign_keys": 1,
            }
        else:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"


def test_sqlite_transactions_take_the_write_lock_at_begin_STORE_ATOMIC(tmp_path: Path) -> None:
    """[STORE-ATOMIC] BEGIN IMMEDIATE: even a transaction that only reads so far holds
    the write lock, so its later writes never fail on a lock upgrade."""
    path = tmp_path / "hatp.db"
    store = open_store(path)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with store.transaction() as conn:
            conn.exec_driver_sql("SELECT 1")
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # free again after the commit
        other.execute("ROLLBACK")
    finally:
        other.close()
        store.close()


def test_postgres_url_without_driver_uses_psycopg_STORE_URL(pg_database_url: str) -> None:
    """[STORE-URL] postgresql:// and postgres:// open through psycopg 3."""
    rest = pg_database_url.split("://", 1)[1]
    for scheme in ("postgresql", "postgres"):
        store = open_store(f"{scheme}://{rest}")
        try:
            assert store.dialect == "postgresql"
            assert store.url.startswith("postgresql+psycopg://")
            assert repr(store).startswith("<PostgresStore postgresql+psycopg://")
        finally:
            store.close()


@pytest.mark.parametrize("form", ["str", "path", "url"])
def test_a_plain_path_opens_sqlite_at_its_absolute_place_STORE_URL(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """[STORE-URL] a file path, a Path or a relative sqlite:/// URL all name one file."""
    monkeypatch.chdir(tmp_path)
    forms: dict[str, str | Path] = {
        "str": "hatp.db",
        "path": Path("hatp.db"),
        "url": "sqlite:///hatp.db",
    }
    given = forms[form]
    store = open_store(given)
    try:
        assert store.dialect == "sqlite"
        assert store.url == f"sqlite:///{tmp_path / 'hatp.db'}"
        assert (tmp_path / "hatp.db").exists()
    finally:
        store.close()


def test_opening_again_keeps_what_is_there_STORE_URL(
    store_url: str, log: DecisionLog, new_txn: Callable[..., Any]
) -> None:
    """[STORE-URL] table creation is idempotent: a second open finds the log intact."""
    new_txn("txn-1").create(log)
    again = open_store(store_url)
    try:
        assert DecisionLog(again).open_transactions() == ["txn-1"]
    finally:
        again.close()


BAD_URLS = {
    "empty": ("", "empty"),
    "blank": ("   ", "empty"),
    "mysql": ("mysql://u:secret@db.example/hatp", "not mysql"),
    "psycopg2": ("postgresql+psycopg2://u@db.example/hatp", "psycopg 3, not psycopg2"),
    "no-database": ("postgresql+psycopg://u@db.example", "names no database"),
    "bad-port": ("postgresql+psycopg://u:secret@db.example:port/hatp", "not a database URL"),
    "memory": ("sqlite://", "does not outlive the process"),
    "memory-named": ("sqlite:///:memory:", "does not outlive the process"),
    "aiosqlite": ("sqlite+aiosqlite:///x.db", "through sqlite3"),
    "sqlite-options": ("sqlite:///x.db?timeout=0", "no ?options"),
}


@pytest.mark.parametrize(("url", "why"), BAD_URLS.values(), ids=BAD_URLS.keys())
def test_a_url_hatp_cannot_use_is_refused_with_what_to_fix_STORE_URL(url: str, why: str) -> None:
    """[STORE-URL] the message names the problem and the URL forms that work, and
    never repeats a password."""
    with pytest.raises(StoreUnavailable) as caught:
        open_store(url)
    error = caught.value
    assert why in error.message
    assert URL_HELP in error.message
    assert error.code == "STORE_UNAVAILABLE"
    assert "secret" not in str(error.to_dict())


def test_a_sqlite_file_in_a_missing_directory_is_refused_STORE_URL(tmp_path: Path) -> None:
    """[STORE-URL]"""
    with pytest.raises(StoreUnavailable, match="directory exists") as caught:
        open_store(tmp_path / "missing" / "hatp.db")
    assert caught.value.data["dialect"] == "sqlite"
    assert isinstance(caught.value.__cause__, exc.DBAPIError)


def test_a_file_that_is_not_sqlite_is_refused_STORE_URL(tmp_path: Path) -> None:
    """[STORE-URL]"""
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not a database, just some text long enough " * 20)
    with pytest.raises(StoreUnavailable, match="cannot open the store"):
        open_store(path)


def test_an_unreachable_postgres_server_is_refused_STORE_URL() -> None:
    """[STORE-URL] nothing listens on port 1: the message says to check the server."""
    with pytest.raises(StoreUnavailable, match="server is running") as caught:
        open_store("postgresql+psycopg://hatp:secret@127.0.0.1:1/hatp")
    error = caught.value
    assert error.data["dialect"] == "postgresql"
    assert "127.0.0.1" in error.message
    assert "secret" not in str(error.to_dict())
    assert isinstance(error.__cause__, exc.OperationalError)


def test_a_missing_postgres_database_is_refused_STORE_URL(pg_database_url: str) -> None:
    """[STORE-URL]"""
    missing = pg_database_url.rsplit("/", 1)[0] + "/hatp_no_such_database"
    with pytest.raises(StoreUnavailable, match="hatp_no_such_database"):
        open_store(missing)


def test_a_failing_statement_rolls_back_and_becomes_store_unavailable_STORE_ATOMIC(
    store: Store,
) -> None:
    """[STORE-ATOMIC] a driver error mid-transaction undoes what came before it."""
    branches = BranchStore(store)
    failed = pytest.raises(StoreUnavailable, match="nothing of it was recorded")
    with failed as caught, store.transaction() as conn:
        branches.lock(conn, "airline", "txn-1", "flight")
        conn.exec_driver_sql("SELECT * FROM hatp_no_such_table")
    assert isinstance(caught.value.__cause__, exc.DBAPIError)
    assert caught.value.data["dialect"] == store.dialect
    assert branches.get("airline", "txn-1", "flight") is None


UPSTREAM = [
    exc.InterfaceError("SELECT 1", None, Exception("connection closed")),
    exc.DatabaseError("SELECT 1", None, Exception("disk I/O error")),
    exc.OperationalError("SELECT 1", None, Exception("server closed the connection")),
    exc.IntegrityError("INSERT", None, Exception("duplicate key")),
    exc.ProgrammingError("SELECT", None, Exception("syntax error")),
    exc.DataError("INSERT", None, Exception("value too long")),
    exc.InternalError("SELECT 1", None, Exception("internal")),
    exc.NotSupportedError("SELECT 1", None, Exception("not supported")),
    exc.TimeoutError("QueuePool limit reached"),
]


@pytest.mark.parametrize("upstream", UPSTREAM, ids=lambda e: type(e).__name__)
def test_every_driver_error_is_mapped_to_store_unavailable(
    store: Store, upstream: Exception
) -> None:
    """Driver and pool errors leave the store layer as StoreUnavailable, the
    original kept as the cause; hatp errors pass through."""
    with pytest.raises(StoreUnavailable) as caught, store.transaction():
        raise upstream
    assert caught.value.__cause__ is upstream
    assert isinstance(caught.value, HatpError)
