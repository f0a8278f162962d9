"""The offline verifier's transaction rules (TXN-*), on realistic trip records.

Every record here is written by :class:`txn_records.TxnBuilder` with the
coordinator's key, so the chain is intact: the attacker holds that key. A
good record passes every rule; a record built to break one rule fails that
rule and nothing else, at the event that breaks it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hatp._checks import unsafe_switched_off
from hatp.clock import format_time
from hatp.evidence import CHAIN_RULES, TXN_RULES, RecordWriter, digest, sign, verify_record
from hatp.model import RenewReceipt, Result
from txn_records import (
    AIRLINE,
    BRANCHES,
    COMMIT_ORDER,
    COORDINATOR,
    HOTEL,
    KEYS,
    PAYMENTS,
    START,
    TxnBuilder,
    committed_trip,
    failures,
    held_trip,
    keyring,
    only,
    rejected_trip,
    sold_out_trip,
    trip_plan,
    unwound_trip,
)

ROOT = Path(__file__).parents[2]


def voted_and_decided(**voted: Any) -> TxnBuilder:
    return TxnBuilder().voted(**voted).decided("commit")


# --- good records ------------------------------------------------------------------


GOOD = {
    "committed": committed_trip,
    "rejected": rejected_trip,
    "held": held_trip,
    "unwound": unwound_trip,
    "sold-out": sold_out_trip,
}


@pytest.mark.parametrize("build", GOOD.values(), ids=GOOD.keys())
def test_good_trip_record_passes_every_chain_and_txn_rule(
    build: Callable[[], dict[str, Any]],
) -> None:
    """[TXN-PLAN] [TXN-DIGEST] [TXN-SIGNER] [TXN-DECIDED] [TXN-VOTES] [TXN-ORDER]
    [TXN-FINAL] [TXN-AFTER-ABORT] [TXN-OUTCOME] [TXN-SETTLED] all pass on an honest record."""
    report = verify_record(build(), keyring())
    assert report.ok, [(f.rule, f.detail) for f in report.findings if f.result is not Result.PASS]
    assert [f.rule for f in report.findings] == [*CHAIN_RULES, *TXN_RULES]


def test_a_record_without_txn_events_is_checked_by_the_chain_rules_only() -> None:
    writer = RecordWriter("notes-1", TxnBuilder().clock)
    writer.append("note.added", {"text": "hello"}, KEYS[COORDINATOR])
    writer.seal(KEYS[COORDINATOR])
    report = verify_record(writer.to_json(), keyring())
    assert report.ok
    assert {f.rule for f in report.findings} == set(CHAIN_RULES)


def test_pass_details_say_what_was_checked() -> None:
    """A pass names what it counted, so a rule that ran differs from one that did not."""
    details = {f.rule: f.detail for f in verify_record(committed_trip(), keyring()).findings}
    assert "4 branches" in details["TXN-PLAN"]
    assert details["TXN-SIGNER"].startswith("12 signed receipts, approvals, quotes and estimates")
    assert "event 7" in details["TXN-DECIDED"]


def test_every_txn_rule_is_in_the_spec() -> None:
    text = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    for rule in TXN_RULES:
        assert f"[{rule}]" in text, rule


# --- TXN-PLAN ----------------------------------------------------------------------


def test_plan_edited_after_its_digest_fails_TXN_PLAN() -> None:
    """[TXN-PLAN] The card charge raised in the logged plan; every party signed the old digest."""
    b = TxnBuilder()
    b.planned(plan=trip_plan(pay="9900.00"))
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-PLAN", b.sealed())
    assert finding.event == 0
    assert "digests to" in finding.detail


def test_record_filed_under_another_transaction_fails_TXN_PLAN() -> None:
    """[TXN-PLAN] A whole record re-filed under another transaction's id."""
    b = TxnBuilder()
    b.writer = RecordWriter("txn-trip-0002", b.clock)
    b.voted().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-PLAN", b.sealed())
    assert "'txn-trip-0001'" in finding.detail and "'txn-trip-0002'" in finding.detail


def test_second_planned_event_fails_TXN_PLAN() -> None:
    """[TXN-PLAN] Only event 0 states the plan."""
    b = TxnBuilder().voted()
    b.planned(mode=False)
    record = b.decided("commit").committed(*COMMIT_ORDER).outcome("committed").sealed()
    (finding,) = only("TXN-PLAN", record)
    assert finding.event == 7


def test_unreadable_plan_fails_TXN_PLAN_and_leaves_the_plan_rules_absent() -> None:
    """[TXN-PLAN] A plan with two final steps is no plan; rules that need it are absent,
    and absent is never a pass."""
    plan = trip_plan()
    plan["branches"][2] = {**plan["branches"][2], "tier": "final"}
    b = TxnBuilder()
    b.plan_digest = digest(plan)
    b.planned(plan=plan).outcome("aborted")
    found = failures(b.sealed())
    assert "SECOND_FINAL" in found["TXN-PLAN"][0].detail
    for rule in ("TXN-DIGEST", "TXN-SIGNER", "TXN-VOTES", "TXN-ORDER", "TXN-FINAL"):
        assert [f.result for f in found[rule]] == [Result.ABSENT], rule


def test_record_not_starting_with_its_plan_fails_TXN_PLAN() -> None:
    """[TXN-PLAN] txn.* events without a txn.planned first are still checked, and fail."""
    b = TxnBuilder()
    b.prepared("flight").decided("abort").aborted("flight").outcome("aborted")
    found = failures(b.sealed())
    assert found["TXN-PLAN"][0].event == 0
    assert "starts with txn.planned" in found["TXN-PLAN"][0].detail


# --- TXN-DIGEST --------------------------------------------------------------------


def test_vote_for_another_plan_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] The airline's yes was for another version of the plan."""
    b = TxnBuilder().planned()
    other = digest(trip_plan(pay="1950.00"))
    b.prepared("flight", receipt=b.prepare_receipt("flight", planDigest=other))
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-DIGEST", b.sealed())
    assert finding.event == 2
    assert other in finding.detail


def test_receipt_from_another_transaction_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] A genuine receipt replayed from another transaction."""
    b = voted_and_decided()
    b.committed("calendar", "pay", "flight")
    b.phase2("txn.committed", "hotel", b.outcome_receipt("hotel", "commit", txnId="txn-old-77"))
    (finding,) = only("TXN-DIGEST", b.outcome("committed").sealed())
    assert finding.event == 11 and "txn-old-77" in finding.detail


def test_event_naming_another_plan_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] Every txn body carries the plan digest."""
    b = voted_and_decided().committed(*COMMIT_ORDER)
    b.event("txn.outcome", state="committed", planDigest=digest({"another": "plan"}))
    (finding,) = only("TXN-DIGEST", b.sealed())
    assert finding.event == 12


def test_receipt_filed_under_another_branch_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] The hotel's yes filed as the airline's vote."""
    b = TxnBuilder().planned()
    b.prepared("flight", receipt=b.prepare_receipt("hotel"))
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-DIGEST", b.sealed())
    assert "branchId 'hotel', not 'flight'" in finding.detail


def test_unknown_branch_or_group_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] Events name branches and approval groups of the plan."""
    b = TxnBuilder().voted()
    b.event("txn.in-doubt", branchId="rental-car", attempt=1, detail="no answer")
    b.event("txn.approval", groupId="legal", approval=None, problem="nobody answered")
    b.decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    found = only("TXN-DIGEST", b.sealed())
    assert [f.event for f in found] == [7, 8]


def test_planless_abort_after_a_yes_vote_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] A null planDigest is for an abort before any prepare; the airline voted yes."""
    b = TxnBuilder().voted(approval="reject").decided("abort")
    b.phase2("txn.aborted", "flight", b.outcome_receipt("flight", "abort", planDigest=None))
    b.aborted("hotel", "calendar", "pay").outcome("aborted")
    (finding,) = only("TXN-DIGEST", b.sealed())
    assert finding.event == 8 and "None" in finding.detail


# --- TXN-SIGNER --------------------------------------------------------------------


def test_vote_forged_by_the_coordinator_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] The coordinator signs the hotel's yes itself."""
    b = TxnBuilder().planned().prepared("flight")
    b.prepared("hotel", receipt=b.prepare_receipt("hotel", by=COORDINATOR))
    b.prepared("calendar").prepared("pay").approved().decided("commit")
    (finding,) = only("TXN-SIGNER", b.committed(*COMMIT_ORDER).outcome("committed").sealed())
    assert finding.event == 3
    assert f"signed by {COORDINATOR!r}" in finding.detail and HOTEL in finding.detail


def test_receipt_signed_by_another_participant_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] The hotel signs a commit receipt for the airline's branch."""
    b = voted_and_decided().committed("calendar", "pay")
    b.phase2("txn.committed", "flight", b.outcome_receipt("flight", "commit", by=HOTEL))
    (finding,) = only("TXN-SIGNER", b.committed("hotel").outcome("committed").sealed())
    assert finding.event == 10 and AIRLINE in finding.detail


def _renewed(b: TxnBuilder, branch_id: str, *, by: str | None = None, **change: Any) -> None:
    """A RenewReceipt for a hold, signed by its participant (or ``by``), as ``txn.renewed``."""
    receipt = {
        **b._head("renew", branch_id, b.plan_digest),
        "leaseExpiresAt": format_time(START + timedelta(minutes=30)),
        "holdHorizon": format_time(START + timedelta(minutes=30)),
        "time": b.now(),
        **change,
    }
    signed = b._signed(receipt, by or BRANCHES[branch_id][0], RenewReceipt)
    b.event("txn.renewed", branchId=branch_id, receipt=signed)


def test_renewals_in_the_record_verify_TXN_SIGNER_COORD_RENEW() -> None:
    """[TXN-SIGNER] [COORD-RENEW] a txn.renewed receipt is checked like a prepare receipt."""
    b = TxnBuilder().voted(approval=None)
    _renewed(b, "flight")
    _renewed(b, "hotel")
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    assert failures(b.sealed()) == {}


def test_renewal_signed_by_another_participant_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] The hotel signs a renewal of the airline's hold."""
    b = TxnBuilder().voted(approval=None)
    _renewed(b, "flight", by=HOTEL)
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-SIGNER", b.sealed())
    assert finding.event == 6 and AIRLINE in finding.detail


def test_renewal_for_another_plan_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] A renewal names another plan."""
    b = TxnBuilder().voted(approval=None)
    _renewed(b, "flight", planDigest=digest({"another": "plan"}))
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-DIGEST", b.sealed())
    assert finding.event == 6


def test_receipt_naming_another_participant_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] receipt.participant is the branch's participant."""
    b = voted_and_decided().committed("calendar")
    receipt = b.outcome_receipt("pay", "commit", participant=HOTEL, by=HOTEL)
    b.phase2("txn.committed", "pay", receipt).committed("flight", "hotel")
    (finding,) = only("TXN-SIGNER", b.outcome("committed").sealed())
    assert "names participant" in finding.detail and PAYMENTS in finding.detail


def test_approval_flipped_after_signing_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] Bob rejected; the coordinator edits the gateway's approval to approve."""
    b = TxnBuilder().voted(approval=None)
    approval = {**b.approval(decision="reject"), "decision": "approve"}
    b.approved(approval=approval).decided("commit").committed(*COMMIT_ORDER)
    (finding,) = only("TXN-SIGNER", b.outcome("committed").sealed())
    assert finding.event == 6 and "BAD_SIGNATURE" in finding.detail


def test_approval_signed_by_someone_but_its_gateway_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] An approval's issuer is the gateway it names."""
    b = TxnBuilder().voted(approval=None)
    b.approved(approval=b.approval(by=COORDINATOR)).decided("commit").committed(*COMMIT_ORDER)
    (finding,) = only("TXN-SIGNER", b.outcome("committed").sealed())
    assert "the gateway it names" in finding.detail


def test_receipt_not_of_its_wire_form_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] Embedded objects validate against PrepareReceipt/OutcomeReceipt/Approval."""
    b = TxnBuilder().planned()
    unsigned = {k: v for k, v in b.prepare_receipt("flight").items() if k != "signature"}
    odd = sign({**unsigned, "approvedBy": "the airline's CEO"}, KEYS[AIRLINE])
    b.prepared("flight", receipt=odd)
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    b.approved().decided("commit").committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-SIGNER", b.sealed())
    assert "not a PrepareReceipt" in finding.detail and "approvedBy" in finding.detail


def test_wrong_kind_or_missing_receipt_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] txn.committed carries a commit receipt, and one is required."""
    b = voted_and_decided().committed("calendar", "pay", "flight")
    b.phase2("txn.committed", "hotel", b.outcome_receipt("hotel", "abort"))
    b.event("txn.committed", branchId="hotel", receipt=None)
    found = failures(b.outcome("committed").sealed())
    assert [f.event for f in found["TXN-SIGNER"]] == [11, 12]
    assert "kind 'abort'" in found["TXN-SIGNER"][0].detail
    assert "missing" in found["TXN-SIGNER"][1].detail


# --- TXN-DECIDED -------------------------------------------------------------------


def test_commit_before_the_decision_fails_TXN_DECIDED() -> None:
    """[TXN-DECIDED] The calendar committed before the decision was logged."""
    b = TxnBuilder().voted().committed("calendar").decided("commit")
    b.committed("pay", "flight", "hotel").outcome("committed")
    (finding,) = only("TXN-DECIDED", b.sealed())
    assert finding.event == 7 and "before the decision" in finding.detail


def test_outcome_without_a_decision_fails_TXN_DECIDED() -> None:
    """[TXN-DECIDED] A record with an outcome but no decision."""
    b = TxnBuilder().voted().committed(*COMMIT_ORDER).outcome("committed")
    found = only("TXN-DECIDED", b.sealed())
    assert [f.event for f in found] == [7, 8, 9, 10, 11]


def test_second_or_bad_decision_fails_TXN_DECIDED() -> None:
    """[TXN-DECIDED] Exactly one decision, commit or abort."""
    b = TxnBuilder().voted().decided("commit").decided("commit")
    (finding,) = only("TXN-DECIDED", b.committed(*COMMIT_ORDER).outcome("committed").sealed())
    assert finding.event == 8
    b = TxnBuilder().voted().decided("maybe").aborted(*BRANCHES).outcome("aborted")
    (finding,) = only("TXN-DECIDED", b.sealed())
    assert "'maybe'" in finding.detail


# --- TXN-VOTES ---------------------------------------------------------------------


def test_commit_without_the_approval_fails_TXN_VOTES() -> None:
    """[TXN-VOTES] Finance never answered; the coordinator committed anyway."""
    b = voted_and_decided(approval=None).committed(*COMMIT_ORDER).outcome("committed")
    (finding,) = only("TXN-VOTES", b.sealed())
    assert finding.event == 6 and "'finance'" in finding.detail


def test_commit_on_a_late_approval_fails_TXN_VOTES() -> None:
    """[TXN-VOTES] An approval decided after plan.deadlines.decideBy does not count."""
    b = TxnBuilder().voted(approval=None)
    late = format_time(START.replace(hour=17, minute=30))
    b.approved(approval=b.approval(decidedAt=late)).decided("commit")
    (finding,) = only("TXN-VOTES", b.committed(*COMMIT_ORDER).outcome("committed").sealed())
    assert "decided by 2026-12-02T17:03:08.123Z" in finding.detail


def test_commit_despite_a_rejection_or_a_no_vote_fails_TXN_VOTES() -> None:
    """[TXN-VOTES] A no vote or a rejection rules commit out."""
    b = voted_and_decided(approval="reject").committed(*COMMIT_ORDER).outcome("committed")
    assert "rejected" in only("TXN-VOTES", b.sealed())[0].detail
    b = TxnBuilder().planned().prepared("flight").prepared("hotel", "no")
    b.prepared("calendar").prepared("pay").approved().decided("commit")
    b.committed(*COMMIT_ORDER).outcome("committed")
    assert "'hotel' has no yes vote" in only("TXN-VOTES", b.sealed())[0].detail


def test_votes_logged_after_the_decision_fail_TXN_VOTES() -> None:
    """[TXN-VOTES] The decision rests on the votes in before it."""
    b = TxnBuilder().planned().decided("commit")
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.approved().committed(*COMMIT_ORDER).outcome("committed")
    found = only("TXN-VOTES", b.sealed())
    assert len(found) == 5 and {f.event for f in found} == {2}


# --- TXN-ORDER, TXN-FINAL ----------------------------------------------------------


def test_holds_committed_before_the_final_step_fail_TXN_ORDER() -> None:
    """[TXN-ORDER] The holds converted before the card was charged."""
    b = voted_and_decided().committed("calendar", "flight", "hotel", "pay")
    found = only("TXN-ORDER", b.outcome("committed").sealed())
    assert [f.event for f in found] == [11]
    assert "final branch 'pay' after hold branch 'hotel'" in found[0].detail


def test_final_step_committed_twice_fails_TXN_FINAL() -> None:
    """[TXN-FINAL] The card captured twice."""
    b = voted_and_decided().committed("calendar", "pay", "pay", "flight", "hotel")
    (finding,) = only("TXN-FINAL", b.outcome("committed").sealed())
    assert finding.event == 10 and "already committed at event 9" in finding.detail


# --- TXN-AFTER-ABORT ---------------------------------------------------------------


def test_commit_after_unwinding_began_fails_TXN_AFTER_ABORT() -> None:
    """[TXN-AFTER-ABORT] The hotel's commit failed; the coordinator kept committing."""
    b = voted_and_decided().committed("calendar", "pay").unwinding("hotel")
    b.committed("flight", "hotel").outcome("committed")
    found = only("TXN-AFTER-ABORT", b.sealed())
    assert [f.event for f in found] == [11, 12]
    assert "unwinding began at event 10" in found[0].detail


def test_commit_after_an_abort_decision_fails_TXN_AFTER_ABORT() -> None:
    """[TXN-AFTER-ABORT] Finance rejected, abort was logged, and the trip was committed."""
    b = TxnBuilder().voted(approval="reject").decided("abort")
    b.committed(*COMMIT_ORDER).outcome("committed")
    found = failures(b.sealed())
    assert [f.event for f in found["TXN-AFTER-ABORT"]] == [8, 9, 10, 11]


# --- TXN-OUTCOME -------------------------------------------------------------------


def test_committed_without_every_commit_receipt_fails_TXN_OUTCOME() -> None:
    """[TXN-OUTCOME] The outcome says committed; the hotel was never committed."""
    b = voted_and_decided().committed("calendar", "pay", "flight").outcome("committed")
    (finding,) = only("TXN-OUTCOME", b.sealed())
    assert finding.event == 11 and "'hotel' has no commit receipt" in finding.detail


def test_aborted_with_an_effect_left_behind_fails_TXN_OUTCOME() -> None:
    """[TXN-OUTCOME] Aborted, yet the calendar entry was never undone and the card charged."""
    b = voted_and_decided().committed("calendar").unwinding("pay")
    b.aborted("pay", "flight", "hotel").outcome("aborted")
    (finding,) = only("TXN-OUTCOME", b.sealed())
    assert finding.event == 8 and "no compensate receipt follows" in finding.detail
    b = voted_and_decided().committed("calendar", "pay").unwinding("flight")
    b.compensated("calendar").aborted("flight", "hotel").outcome("aborted")
    (finding,) = only("TXN-OUTCOME", b.sealed())
    assert finding.event == 9 and "final effect stays" in finding.detail


def test_aborted_with_a_yes_vote_never_released_fails_TXN_SETTLED() -> None:
    """[TXN-SETTLED] Aborted, yet nothing shows the seat's hold released."""
    b = TxnBuilder().voted(approval="reject").decided("abort")
    b.aborted("calendar", "pay", "hotel").outcome("aborted")
    (finding,) = only("TXN-SETTLED", b.sealed())
    assert "branch 'flight' voted yes" in finding.detail
    assert finding.event == 11


def test_a_release_before_the_yes_vote_does_not_settle_it_TXN_SETTLED() -> None:
    """[TXN-SETTLED] An abort receipt counts only after the vote it releases."""
    b = TxnBuilder().planned()
    b.phase2("txn.aborted", "flight")
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.approved("finance", "reject").decided("abort").aborted("calendar", "pay", "hotel")
    (finding,) = only("TXN-SETTLED", b.outcome("aborted").sealed())
    assert "branch 'flight'" in finding.detail


def test_needs_attention_must_name_every_branch_still_held_TXN_SETTLED() -> None:
    """[TXN-SETTLED] [TXN-OUTCOME] needs-attention covers only the branches it names, and
    must name one."""
    b = TxnBuilder().voted(approval="reject").decided("abort")
    b.aborted("calendar", "hotel").held("pay").outcome("needs-attention", held=["pay"])
    (finding,) = only("TXN-SETTLED", b.sealed())
    assert "branch 'flight'" in finding.detail and "without naming it held" in finding.detail
    b = TxnBuilder().voted(approval="reject").decided("abort").aborted(*BRANCHES)
    (finding,) = only("TXN-OUTCOME", b.outcome("needs-attention", held=[]).sealed())
    assert "names nothing held" in finding.detail


def test_missing_extra_late_or_unknown_outcome_fails_TXN_OUTCOME() -> None:
    """[TXN-OUTCOME] Exactly one outcome, committed or aborted, last before the seal."""
    rejected = TxnBuilder().voted(approval="reject").decided("abort").aborted(*BRANCHES)
    assert only("TXN-OUTCOME", rejected.sealed())[0].event == 11
    b = TxnBuilder().voted(approval="reject").decided("abort").aborted(*BRANCHES)
    b.outcome("aborted").outcome("aborted")
    assert only("TXN-OUTCOME", b.sealed())[0].event == 13
    b = TxnBuilder().voted(approval="reject").decided("abort").aborted(*BRANCHES)
    b.outcome("aborted").event("txn.in-doubt", branchId="pay", attempt=1, detail="late")
    assert "not the last event" in only("TXN-OUTCOME", b.sealed())[0].detail
    b = TxnBuilder().voted(approval="reject").decided("abort").aborted(*BRANCHES)
    assert "'done'" in only("TXN-OUTCOME", b.outcome("done").sealed())[0].detail


def test_committed_yet_a_branch_undone_fails_TXN_OUTCOME() -> None:
    """[TXN-OUTCOME] A committed outcome has no compensated or aborted branch."""
    b = voted_and_decided().committed(*COMMIT_ORDER).compensated("calendar")
    (finding,) = only("TXN-OUTCOME", b.outcome("committed").sealed())
    assert finding.event == 12


# --- the rules are what refuse ----------------------------------------------------


def test_switching_a_txn_rule_off_passes_only_its_violation() -> None:
    """[TXN-ORDER] With the order check off, the out-of-order record verifies."""
    b = voted_and_decided().committed("calendar", "flight", "hotel", "pay")
    record = b.outcome("committed").sealed()
    with unsafe_switched_off("TXN-ORDER"):
        assert verify_record(record, keyring()).ok
    with unsafe_switched_off("TXN-FINAL"):
        assert not verify_record(record, keyring()).ok


STEPS: list[tuple[str, Callable[[TxnBuilder], Any]]] = [
    ("planned", lambda b: b.planned()),
    *[(f"prepared {x}", lambda b, x=x: b.prepared(x)) for x in BRANCHES],
    ("approved", lambda b: b.approved()),
    ("decided", lambda b: b.decided("commit")),
    *[(f"committed {x}", lambda b, x=x: b.committed(x)) for x in COMMIT_ORDER],
    ("outcome", lambda b: b.outcome("committed")),
]


@pytest.mark.parametrize("dropped", [name for name, _ in STEPS])
def test_every_step_of_a_committed_trip_is_needed(dropped: str) -> None:
    """[TXN-PLAN] [TXN-VOTES] [TXN-DECIDED] [TXN-OUTCOME]: a key holder who leaves any
    one step out of a committed trip's record, chain re-signed, is caught."""
    b = TxnBuilder()
    for name, step in STEPS:
        if name != dropped:
            step(b)
    assert failures(b.sealed()), f"dropping {dropped} went unnoticed"


def test_detail_names_the_event_position() -> None:
    b = voted_and_decided().committed("calendar", "flight", "hotel", "pay")
    (finding,) = only("TXN-ORDER", b.outcome("committed").sealed())
    assert re.match(r"event 11 \(txn\.committed\)", finding.detail)
