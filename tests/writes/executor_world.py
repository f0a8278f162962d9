"""The executor tests' world: a stocked inventory, a policy, principals, a trusted gateway.

Every test that takes the ``writes`` fixture (conftest.py) runs on SQLite and
on PostgreSQL (the ``store`` fixture): the inventory table and hatp's
bookkeeping tables live in the same database, as in production.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from hatp.clock import ManualClock, format_time
from hatp.evidence import Keyring, SigningKey, sign
from hatp.store import Store
from hatp.version import PROTOCOL_VERSION
from hatp.writes import Policy, Principal, Proposal, TypeRule, Verdict, Writes
from hatp.writes._tables import write_journal, write_key
from writes.inventory import AGENT, OWNER, make_plan, registry

#: The person who approves, as the caller's authentication layer names them.
APPROVER = Principal("human:erin", "human")
#: The agent that proposes (its principal, from the same layer).
BOT = Principal(AGENT, "agent")
#: The gateway whose signed approvals are taken, and a person it says approved.
GATEWAY = "https://gateway.acme.example"
GATEWAY_KEY = SigningKey.from_seed(bytes([41]) * 32, "gateway-writes-1")
GATEWAY_HUMAN = "human://acme.example/erin"
LEASE_SECONDS = 60.0

#: Small stock adjustments run without a person; every other write needs one.
POLICY = Policy(
    {
        "adjust_stock": TypeRule(Verdict.ALLOW, allow_up_to=2),
        "set_unit": TypeRule(Verdict.REQUIRE_APPROVAL),
    },
    default=Verdict.DENY,
)
#: The stock every test starts from: {sku: (on_hand, unit)}, at version 1.
ROWS = {"SKU-1": (10, "each"), "SKU-2": (5, "box")}
#: A correction that needs an approval (delta above 2).
ADJUST = ("adjust_stock", {"sku": "SKU-1", "delta": 5, "reason": "recount"})

__all__ = [
    "ADJUST",
    "APPROVER",
    "BOT",
    "GATEWAY",
    "GATEWAY_HUMAN",
    "GATEWAY_KEY",
    "LEASE_SECONDS",
    "OWNER",
    "POLICY",
    "ROWS",
    "SWITCH_OFF_TESTS",
    "approved",
    "gateways",
    "journal_rows",
    "key_row",
    "make_writes",
    "propose",
    "signed_approval",
]


def gateways() -> Keyring:
    """The gateways trusted here: one, under its own id."""
    return Keyring([(GATEWAY_KEY.public, GATEWAY)], trusted_issuers=[GATEWAY])


def make_writes(store: Store, clock: ManualClock, **options: Any) -> Writes:
    """A Writes on ``store`` with the test policy and gateway (``options`` override)."""
    settings: dict[str, Any] = {"lease_seconds": LEASE_SECONDS, "gateways": gateways()}
    settings.update(options)
    return Writes(store, registry(), POLICY, clock, **settings)


def propose(
    writes: Writes,
    store: Store,
    plan_id: str = "fix-1",
    version: int = 1,
    corrections: Sequence[tuple[str, Mapping[str, Any]]] = (ADJUST,),
) -> Proposal:
    """The agent drafts a plan from the live rows and proposes it."""
    return writes.propose(make_plan(store, plan_id, version, corrections), BOT)


def approved(
    writes: Writes,
    store: Store,
    plan_id: str = "fix-1",
    version: int = 1,
    corrections: Sequence[tuple[str, Mapping[str, Any]]] = (ADJUST,),
) -> Proposal:
    """Propose a plan and have :data:`APPROVER` approve it."""
    proposal = propose(writes, store, plan_id, version, corrections)
    writes.approve(plan_id, version, APPROVER)
    return proposal


def signed_approval(
    clock: ManualClock,
    plan_digest: str,
    *,
    key: SigningKey = GATEWAY_KEY,
    **change: Any,
) -> dict[str, Any]:
    """A Human Gateway's signed Approval of ``plan_digest`` (``change`` overrides members)."""
    approval = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "approval",
        "askId": "ask-writes-0001",
        "txnId": "fix-1",
        "planDigest": plan_digest,
        "groupId": "stock",
        "decision": "approve",
        "approvers": [GATEWAY_HUMAN],
        "reason": "1 of stock approved",
        "withdrawn": False,
        "votes": [],
        "cards": [],
        "routing": {},
        "gateway": GATEWAY,
        "decidedAt": format_time(clock.now()),
        **change,
    }
    return sign(approval, key)


def key_row(store: Store, key: str) -> sa.Row[Any] | None:
    """The execution key's row as stored."""
    with store.transaction() as conn:
        return conn.execute(sa.select(write_key).where(write_key.c.key == key)).first()


def journal_rows(store: Store) -> list[sa.Row[Any]]:
    """Every journal row as stored."""
    with store.transaction() as conn:
        return list(conn.execute(sa.select(write_journal).order_by(write_journal.c.seq)))


#: Each executor check (its rule id) and the switch-off tests that show it alone refuses
#: its planted case (for tests/test_planted.py's inventory of switchable checks).
SWITCH_OFF_TESTS: dict[str, tuple[str, ...]] = {
    "WRITE-APPROVED": ("test_approve.py::test_with_WRITE_APPROVED_off_an_unapproved_plan_runs",),
    "WRITE-BOUND": (
        "test_approve.py::test_a_signed_approval_of_another_digest_is_refused_WRITE_BOUND",
    ),
    "WRITE-CONCURRENT": (
        "test_concurrent.py::test_with_WRITE_CONCURRENT_off_a_live_reservation_is_taken",
    ),
    "WRITE-DRIFT": (
        "test_execute.py::test_with_WRITE_DRIFT_off_the_drifted_record_is_overwritten",
    ),
    "WRITE-HUMAN": ("test_approve.py::test_an_agent_principal_never_approves_WRITE_HUMAN",),
    "WRITE-ONCE": ("test_recover.py::test_with_WRITE_ONCE_off_a_completed_key_runs_again",),
    "WRITE-RECOVER": (
        "test_recover.py::test_with_WRITE_RECOVER_off_an_ambiguous_key_is_retried_blindly",
    ),
    "WRITE-SHAPE": ("test_approve.py::test_proposed_by_must_be_the_proposer_WRITE_SHAPE",),
    "WRITE-SIGNED": (
        "test_approve.py::test_a_signed_approval_under_an_untrusted_key_is_refused_WRITE_SIGNED",
    ),
    "WRITE-SOD": (
        "test_approve.py::test_the_proposer_and_whom_it_acts_for_never_approve_WRITE_SOD",
    ),
    "WRITE-VERIFY": ("test_execute.py::test_with_WRITE_VERIFY_off_the_wrong_write_commits",),
    "WRITE-VERSION": (
        "test_approve.py::test_with_WRITE_VERSION_off_an_approved_version_is_rewritten_but_not_run",
    ),
}
