"""Shared fixtures: deterministic parties, keyrings and a manual clock."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, settings

from databases import pg_database_url, store, store_url  # noqa: F401
from hatp.clock import ManualClock
from hatp.evidence import Keyring, SigningKey

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")

ISSUER = "https://directory.acme.example"
START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def parties() -> dict[str, SigningKey]:
    return {
        name: SigningKey.from_seed(bytes([i + 1]) * 32, f"{name}-1")
        for i, name in enumerate(("coordinator", "airline", "gateway"))
    }


@pytest.fixture
def keyring(parties: dict[str, SigningKey]) -> Keyring:
    return Keyring(((k.public, ISSUER) for k in parties.values()), trusted_issuers=[ISSUER])
