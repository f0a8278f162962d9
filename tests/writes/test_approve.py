"""Propose and approve: an approval binds one plan version's digest, given by a person.

The approver is the principal the caller's authentication layer hands in,
never a field of the plan; a Human Gateway's signed Approval counts only
over this version's digest. Each refusal has a switch-off test showing that
its check, and nothing else, refuses it. Every test runs on both databases.
"""

from __future__ import annotations

import pytest

from hatp import _checks
from hatp.clock import ManualClock
from hatp.errors import (
    ApproverRefused,
    NotApproved,
    WriteDenied,
    WritePlanInvalid,
    WritePlanUnknown,
)
from hatp.evidence import SigningKey
from hatp.store import Store
from hatp.writes import ExecutionStatus, PlanStatus, Principal, Verdict, Writes
from writes.executor_world import (
    ADJUST,
    APPROVER,
    BOT,
    GATEWAY_HUMAN,
    OWNER,
    approved,
    journal_rows,
    make_writes,
    propose,
    signed_approval,
)
from writes.inventory import AGENT, live, make_plan

EDITED = ("adjust_stock", {"sku": "SKU-1", "delta": 6, "reason": "recount, corrected"})


# --- propose ---------------------------------------------------------------


def test_a_proposal_carries_its_digest_decision_and_diff(writes: Writes, store: Store) -> None:
    proposal = propose(writes, store)

    assert proposal.decision.verdict is Verdict.REQUIRE_APPROVAL
    assert [str(c) for c in proposal.diff] == [
        "inventory/SKU-1 on_hand: 10 -> 15",
        "inventory/SKU-1 version: 1 -> 2",
    ]
    status = writes.status("fix-1", 1)
    assert status.plan.status is PlanStatus.PROPOSED
    assert status.plan.digest == proposal.digest
    assert status.approval is None


def test_proposing_the_same_version_again_returns_it(writes: Writes, store: Store) -> None:
    first = propose(writes, store)
    again = propose(writes, store)
    assert again.digest == first.digest


def test_a_stored_version_is_never_changed_WRITE_VERSION(writes: Writes, store: Store) -> None:
    first = approved(writes, store)
    with pytest.raises(WritePlanInvalid) as caught:
        propose(writes, store, corrections=[EDITED])
    assert caught.value.reason == "VERSION"
    assert writes.status("fix-1", 1).plan.digest == first.digest


def test_with_WRITE_VERSION_off_an_approved_version_is_rewritten_but_not_run(
    writes: Writes, store: Store
) -> None:
    first = approved(writes, store)
    with _checks.unsafe_switched_off("WRITE-VERSION"):
        edited = propose(writes, store, corrections=[EDITED])
    assert writes.status("fix-1", 1).plan.digest == edited.digest != first.digest
    # The approval still names the digest it approved: it does not carry over.
    with pytest.raises(NotApproved):
        writes.execute("fix-1", 1, "worker-a")


def test_versions_count_up_from_one_WRITE_VERSION(writes: Writes, store: Store) -> None:
    with pytest.raises(WritePlanInvalid) as caught:
        propose(writes, store, version=2)
    assert caught.value.reason == "VERSION"
    propose(writes, store, version=1)
    with pytest.raises(WritePlanInvalid):
        propose(writes, store, version=3, corrections=[EDITED])


def test_proposed_by_must_be_the_proposer_WRITE_SHAPE(writes: Writes, store: Store) -> None:
    doc = make_plan(store, "fix-1", 1, [ADJUST])
    other = Principal("agent:other-bot", "agent")
    with pytest.raises(WritePlanInvalid) as caught:
        writes.propose(doc, other)
    assert (caught.value.reason, caught.value.data["where"]) == ("SHAPE", "/proposedBy")
    with _checks.unsafe_switched_off("WRITE-SHAPE"):
        writes.propose(doc, other)


def test_a_denied_plan_is_not_stored(writes: Writes, store: Store) -> None:
    # The test policy denies every type it has no rule for; this one is on the allowlist
    # of a registry the policy was not written for.
    doc = make_plan(store, "fix-1", 1, [ADJUST])
    doc["corrections"] = [{"type": "set_unit", "params": {"sku": "SKU-1", "unit": "kg"}}]
    doc["postcondition"]["inventory/SKU-1"] = {"on_hand": 10, "unit": "kg", "version": 2}
    denying = make_writes(store, ManualClock(writes._clock.now()))
    denying._policy = type(denying._policy)(default=denying._policy.default)  # no rules: deny
    with pytest.raises(WriteDenied) as caught:
        denying.propose(doc, BOT)
    assert caught.value.data["reasons"] == ["set_unit: no rule, default deny"]
    with pytest.raises(WritePlanUnknown):
        writes.status("fix-1", 1)


# --- approve ---------------------------------------------------------------


def test_without_an_approval_execute_is_refused_WRITE_APPROVED(
    writes: Writes, store: Store
) -> None:
    propose(writes, store)
    with pytest.raises(NotApproved):
        writes.execute("fix-1", 1, "worker-a")
    assert journal_rows(store) == []
    assert live(store)["SKU-1"] == (10, "each", 1)


def test_with_WRITE_APPROVED_off_an_unapproved_plan_runs(writes: Writes, store: Store) -> None:
    propose(writes, store)
    with _checks.unsafe_switched_off("WRITE-APPROVED"):
        outcome = writes.execute("fix-1", 1, "worker-a")
    assert outcome.status is ExecutionStatus.EXECUTED
    assert writes.journal()[0].source == "unapproved"


def test_an_edited_plan_needs_its_own_approval_WRITE_APPROVED(writes: Writes, store: Store) -> None:
    approved(writes, store, version=1)
    propose(writes, store, version=2, corrections=[EDITED])

    with pytest.raises(NotApproved) as caught:
        writes.execute("fix-1", 2, "worker-a")
    assert caught.value.data["version"] == 2

    writes.approve("fix-1", 2, APPROVER)
    outcome = writes.execute("fix-1", 2, "worker-a")
    assert outcome.status is ExecutionStatus.EXECUTED
    assert live(store)["SKU-1"] == (16, "each", 2)
    # Version 1 was approved too, but its snapshot is gone now: it can never run as well.
    with pytest.raises(Exception, match="DRIFT_DETECTED"):
        writes.execute("fix-1", 1, "worker-a")


def test_approving_records_the_approver_and_the_digest(writes: Writes, store: Store) -> None:
    proposal = approved(writes, store)
    writes.approve("fix-1", 1, Principal("human:frank", "human"))  # the first approval stays
    status = writes.status("fix-1", 1)
    assert status.plan.status is PlanStatus.APPROVED
    assert status.approval is not None
    assert status.approval.approvers == (APPROVER.id,)
    assert (status.approval.digest, status.approval.source) == (proposal.digest, "direct")


def test_an_unknown_plan_cannot_be_approved(writes: Writes) -> None:
    with pytest.raises(WritePlanUnknown):
        writes.approve("nope", 1, APPROVER)


def test_an_agent_principal_never_approves_WRITE_HUMAN(writes: Writes, store: Store) -> None:
    propose(writes, store)
    with pytest.raises(ApproverRefused) as caught:
        writes.approve("fix-1", 1, Principal("agent:helper-bot", "agent"))
    assert caught.value.reason == "NOT_HUMAN"
    assert writes.status("fix-1", 1).approval is None
    with _checks.unsafe_switched_off("WRITE-HUMAN"):
        writes.approve("fix-1", 1, Principal("agent:helper-bot", "agent"))
    assert writes.status("fix-1", 1).approval is not None


@pytest.mark.parametrize(
    "who",
    [Principal(AGENT, "human"), Principal(OWNER, "human")],
    ids=["the-proposer", "on-behalf-of"],
)
def test_the_proposer_and_whom_it_acts_for_never_approve_WRITE_SOD(
    writes: Writes, store: Store, who: Principal
) -> None:
    propose(writes, store)
    with pytest.raises(ApproverRefused) as caught:
        writes.approve("fix-1", 1, who)
    assert caught.value.reason == "SELF_APPROVAL"
    assert writes.status("fix-1", 1).approval is None
    with _checks.unsafe_switched_off("WRITE-SOD"):
        writes.approve("fix-1", 1, who)
    assert writes.status("fix-1", 1).approval is not None


def test_a_principal_is_a_human_or_an_agent() -> None:
    with pytest.raises(ValueError):
        Principal("x", "robot")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Principal("", "human")


# --- approve_signed ----------------------------------------------------------


def test_a_gateway_signed_approval_of_the_digest_is_taken(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = propose(writes, store)
    approval = signed_approval(clock, proposal.digest)
    writes.approve_signed("fix-1", 1, approval)

    outcome = writes.execute("fix-1", 1, "worker-a")
    assert outcome.status is ExecutionStatus.EXECUTED
    [entry] = writes.journal()
    assert (entry.approvers, entry.source) == ((GATEWAY_HUMAN,), "gateway")
    stored = writes.status("fix-1", 1).approval
    assert stored is not None
    assert stored.evidence == approval


def test_a_signed_approval_of_another_digest_is_refused_WRITE_BOUND(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    first = propose(writes, store, version=1)
    propose(writes, store, version=2, corrections=[EDITED])
    of_version_1 = signed_approval(clock, first.digest)

    with pytest.raises(ApproverRefused) as caught:
        writes.approve_signed("fix-1", 2, of_version_1)
    assert caught.value.reason == "OTHER_PLAN"
    assert writes.status("fix-1", 2).approval is None
    with _checks.unsafe_switched_off("WRITE-BOUND"):
        writes.approve_signed("fix-1", 2, of_version_1)
    assert writes.status("fix-1", 2).approval is not None


def test_a_signed_approval_under_an_untrusted_key_is_refused_WRITE_SIGNED(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = propose(writes, store)
    forger = SigningKey.from_seed(bytes([77]) * 32, "gateway-writes-1")  # same kid, other key
    forged = signed_approval(clock, proposal.digest, key=forger)

    with pytest.raises(ApproverRefused) as caught:
        writes.approve_signed("fix-1", 1, forged)
    assert caught.value.reason == "SIGNATURE"
    assert writes.status("fix-1", 1).approval is None
    with _checks.unsafe_switched_off("WRITE-SIGNED"):
        writes.approve_signed("fix-1", 1, forged)
    assert writes.status("fix-1", 1).approval is not None


def test_a_signed_rejection_is_never_an_approval_WRITE_SIGNED(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = propose(writes, store)
    rejection = signed_approval(clock, proposal.digest, decision="reject", approvers=[])

    with pytest.raises(ApproverRefused) as caught:
        writes.approve_signed("fix-1", 1, rejection)
    assert caught.value.reason == "REJECTED"
    assert writes.status("fix-1", 1).approval is None


def test_a_signed_approval_needs_a_gateway_trusted_here(
    store: Store, clock: ManualClock, writes: Writes
) -> None:
    proposal = propose(writes, store)
    untrusting = make_writes(store, clock, gateways=None)
    with pytest.raises(ApproverRefused) as caught:
        untrusting.approve_signed("fix-1", 1, signed_approval(clock, proposal.digest))
    assert caught.value.reason == "SIGNATURE"


def test_a_signed_approval_that_is_not_an_approval_is_refused(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = propose(writes, store)
    doc = signed_approval(clock, proposal.digest)
    del doc["approvers"]
    with pytest.raises(ApproverRefused) as caught:
        writes.approve_signed("fix-1", 1, doc)
    assert caught.value.reason == "SIGNATURE"


def test_a_signed_approval_by_whom_the_agent_acts_for_is_refused_WRITE_SOD(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = propose(writes, store)
    own = signed_approval(clock, proposal.digest, approvers=[OWNER])
    with pytest.raises(ApproverRefused) as caught:
        writes.approve_signed("fix-1", 1, own)
    assert caught.value.reason == "SELF_APPROVAL"


def test_a_signed_approval_naming_nobody_is_refused_WRITE_HUMAN(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = propose(writes, store)
    nobody = signed_approval(clock, proposal.digest, approvers=[])
    with pytest.raises(ApproverRefused) as caught:
        writes.approve_signed("fix-1", 1, nobody)
    assert caught.value.reason == "NOT_HUMAN"
