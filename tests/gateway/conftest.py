"""Fixtures shared by the gateway's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Callable[[], str]:
    """A fresh SQLite database URL each call: one store per run of a planted case."""
    count = iter(range(100))
    return lambda: f"sqlite:///{tmp_path / f'gw{next(count)}.db'}"
