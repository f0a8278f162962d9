"""Fixtures shared by the gateway's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.people import World, finance_directory
from gateway.servers import Keeper, mail_server


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Callable[[], str]:
    """A fresh SQLite database URL each call: one store per run of a planted case."""
    count = iter(range(100))
    return lambda: f"sqlite:///{tmp_path / f'gw{next(count)}.db'}"


@pytest.fixture
def world(store_url: str) -> Iterator[World]:
    """acme's finance people on the parametrized store, closed after the test."""
    made = World(store_url, finance_directory())
    yield made
    made.close()


@pytest.fixture
def smtp() -> Iterator[tuple[Keeper, int]]:
    """A real SMTP server on 127.0.0.1 and what it keeps."""
    with mail_server() as running:
        yield running
