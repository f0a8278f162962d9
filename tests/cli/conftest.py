"""The ``hatp txn`` tests' server: ``hatp serve --demo`` in a process of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.served_demo import Demo, serving


@pytest.fixture
def demo(tmp_path: Path, store_url: str) -> Iterator[Demo]:
    """``hatp serve --demo`` on the parametrized store (SQLite and PostgreSQL)."""
    yield from serving(tmp_path, store_url)


@pytest.fixture
def demo_sqlite(tmp_path: Path) -> Iterator[Demo]:
    """``hatp serve --demo`` on a SQLite file (for what the store does not change)."""
    yield from serving(tmp_path, str(tmp_path / "serve.db"))
