"""acme's key-set keys for the key-set tests: its root (and a stranger's under the same
kid), a gateway key rotated mid-year, and a coordinator key, with the helper that lists
a key in a set."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hatp.clock import format_time
from hatp.evidence import SigningKey, thumbprint

ORG = "https://acme.com"
GATEWAY = "https://gateway.acme.com"
COORDINATOR = "https://coordinator.acme.com"
ROOT = SigningKey.from_seed(bytes([21]) * 32, "acme-root-1")
OTHER_ROOT = SigningKey.from_seed(bytes([22]) * 32, "acme-root-1")
GATEWAY_OLD = SigningKey.from_seed(bytes([23]) * 32, "gateway-2026-01")
GATEWAY_NEW = SigningKey.from_seed(bytes([24]) * 32, "gateway-2026-06")
COORD = SigningKey.from_seed(bytes([25]) * 32, "coordinator-2026-01")
PIN = thumbprint(ROOT.public)

NOW = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
JAN = datetime(2026, 1, 1, tzinfo=UTC)


def listed(key: SigningKey, role: str, issuer: str, **members: Any) -> dict[str, Any]:
    """``key`` as a key set lists it: active from January unless ``members`` say else."""
    return {
        **key.public.to_jwk(),
        "role": role,
        "issuer": issuer,
        "notBefore": format_time(JAN),
        "status": "active",
        **members,
    }
