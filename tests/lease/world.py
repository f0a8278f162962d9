"""A small world for lease tests: a ticket system of record, a verifier, fixed keys and times."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hatp.clock import ManualClock
from hatp.errors import LeaseRefused
from hatp.evidence import Keyring, SigningKey, digest, sign
from hatp.lease import CheckedLease, LeaseBinding, RecoveryMode, grant, verify_lease

START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
TICKETS = "https://tickets.example"
CRM = "https://crm.example"
GATEWAY = "https://gateway.example"
RESOURCE = "ticket/4711"
STATE: dict[str, Any] = {"id": 4711, "status": "open", "assignee": "dana", "credit": "12.50"}
EPOCH = 7
MUTATION: dict[str, Any] = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
PLAN_DIGEST = digest({"plan": "trip"})


def _key(name: str, seed: int) -> SigningKey:
    return SigningKey.from_seed(bytes([seed]) * 32, f"{name}-1")


SOR = _key("tickets", 41)
CRM_KEY = _key("crm", 42)
OUTSIDER = _key("outsider", 43)
VERIFIER = _key("gate", 44)

INVERSES: dict[RecoveryMode, dict[str, Any] | None] = {
    RecoveryMode.COMPENSATING_ACTION: {
        "action": "tickets.update",
        "params": {"id": 4711, "status": "open", "assignee": "dana"},
    },
    RecoveryMode.SNAPSHOT_RESTORE: None,  # grant stages the pre-image itself
    RecoveryMode.DRY_RUN_SHADOW: {
        "shadow": {**STATE, "status": "closed"},
        "result": {"ok": True},
    },
    RecoveryMode.HUMAN_ESCROW: {
        "address": "human://acme/role/support-lead",
        "instructions": "Reopen ticket 4711 and reassign it to dana.",
    },
}


def keyring() -> Keyring:
    """Two trusted systems of record, a trusted verifier, an untrusted outsider."""
    ring = Keyring(trusted_issuers=[TICKETS, CRM, GATEWAY])
    ring.add(SOR.public, TICKETS)
    ring.add(CRM_KEY.public, CRM)
    ring.add(VERIFIER.public, GATEWAY)
    ring.add(OUTSIDER.public, "https://keys.evil.example")
    return ring


def lease(
    mode: RecoveryMode = RecoveryMode.COMPENSATING_ACTION,
    *,
    t_req_ms: int = 300_000,
    max_window_ms: int = 600_000,
    at: datetime = START,
    binding: LeaseBinding | None = None,
) -> dict[str, Any]:
    """An honest lease on the ticket, granted at ``at``."""
    return grant(
        resource=RESOURCE,
        state=STATE,
        epoch=EPOCH,
        mutation=MUTATION,
        t_req_ms=t_req_ms,
        mode=mode,
        inverse=INVERSES[mode],
        key=SOR,
        issuer=TICKETS,
        clock=ManualClock(at),
        max_window_ms=max_window_ms,
        binding=binding,
        lease_id="lease-ticket4711",
    )


def resigned(doc: dict[str, Any], key: SigningKey = SOR, **changes: Any) -> dict[str, Any]:
    """``doc`` with its members ``changes`` replaced, signed again by ``key``."""
    body = {k: copy.deepcopy(v) for k, v in doc.items() if k != "signature"}
    body.update(changes)
    return sign(body, key)


def check(
    doc: dict[str, Any] | bytes,
    *,
    resource: str = RESOURCE,
    state: Any = STATE,
    epoch: int = EPOCH,
    now: datetime = START,
    binding: LeaseBinding | None = None,
    mutation: dict[str, Any] = MUTATION,
    fence_token: int | None = None,
) -> CheckedLease:
    """Verify ``doc`` as the gateway in front of the ticket system would."""
    return verify_lease(
        doc,
        resource=resource,
        current_state=state,
        current_epoch=epoch,
        mutation=mutation,
        keyring=keyring(),
        clock=ManualClock(now),
        verifier_key=VERIFIER,
        binding=binding,
        fence_token=fence_token,
    )


def refused_by(doc: dict[str, Any] | bytes, **kwargs: Any) -> str | None:
    """The rule that refuses ``doc`` (``None`` if it passes)."""
    try:
        check(doc, **kwargs)
    except LeaseRefused as exc:
        return str(exc.data["rule"])
    return None
