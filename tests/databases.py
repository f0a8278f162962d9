"""Databases for tests: every store test runs on SQLite and on PostgreSQL.

SQLite: a fresh file in the test's ``tmp_path``. PostgreSQL: one database
per test session, created on the server that ``HATP_TEST_POSTGRES`` names
(default :data:`DEFAULT_ADMIN_URL`) and dropped when the session ends; each
test gets a schema of its own in it, selected by ``search_path`` in the URL,
so no test sees another's rows and none waits for a database to be copied.
The URL carries the schema, so a child process opening it sees the same rows.

Without a server the PostgreSQL tests are skipped, except on CI
(``CI=true``), where they fail.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from hatp.store import Store, open_store

ADMIN_ENV = "HATP_TEST_POSTGRES"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DATABASES = ["sqlite", "postgresql"]

_schemas = itertools.count(1)


def admin_url() -> URL:
    """The URL of a database to issue CREATE/DROP DATABASE from."""
    url = make_url(os.environ.get(ADMIN_ENV) or DEFAULT_ADMIN_URL)
    return url.set(drivername="postgresql+psycopg")


def postgres_url() -> str:
    """Create a fresh, empty database for this test session and return its URL.

    Drop it with :func:`drop_postgres_database`. Skips the calling test when
    no server answers (fails it when ``CI=true``).
    """
    admin = admin_url()
    name = f"hatp_test_{os.getpid()}_{secrets.token_hex(4)}"
    engine = sa.create_engine(
        admin, isolation_level="AUTOCOMMIT", poolclass=NullPool, connect_args={"connect_timeout": 5}
    )
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except exc.DBAPIError as error:
        where = admin.render_as_string(hide_password=True)
        detail = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        message = (
            f"PostgreSQL not reachable at {where} ({detail}); "
            f"set {ADMIN_ENV}=postgresql+psycopg://user@host:port/db to run these"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    finally:
        engine.dispose()
    return admin.set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    """Drop a database made by :func:`postgres_url`, closing any session still in it."""
    name = make_url(url).database
    engine = sa.create_engine(admin_url(), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        engine.dispose()


def fresh_schema_url(database_url: str) -> str:
    """Create an empty schema in the database and return a URL whose sessions use only it."""
    schema = f"t{next(_schemas)}_{secrets.token_hex(3)}"
    plain = make_url(database_url).set(drivername="postgresql")
    with psycopg.connect(plain.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_database_url(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL database of this test session's own, dropped at its end."""
    url = postgres_url()
    request.addfinalizer(lambda: drop_postgres_database(url))
    return url


@pytest.fixture(params=DATABASES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty database, once for SQLite and once for PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hatp.db'}"
    return fresh_schema_url(request.getfixturevalue("pg_database_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open store on a fresh database (see :func:`store_url`), closed after the test."""
    opened = open_store(store_url)
    yield opened
    opened.close()
