"""The offline verifier's timing rules: [TXN-MODE], [TXN-APPROVE-BY], [TXN-LEASE].

And what the new events ``txn.mode`` and ``txn.replaced`` mean to the older
rules: the quotes and chain estimates a mode rests on are held to
[TXN-SIGNER] and [TXN-DIGEST] like every other signed object, and a hold
placed again votes, for [TXN-VOTES], by its latest replace.

Every record is written by :class:`txn_records.TxnBuilder` with the
coordinator's key (the chain is intact: the attacker holds that key); the
trip's builder writes one event a second from ``START``. A record built to
break one rule fails that rule and nothing else.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hatp._checks import unsafe_switched_off
from hatp.clock import format_time
from hatp.evidence import digest, verify_record
from hatp.model import Result
from txn_records import (
    ALICE,
    BOB,
    BRANCHES,
    COMMIT_ORDER,
    COORDINATOR,
    GATEWAY,
    HOTEL,
    START,
    TxnBuilder,
    committed_trip,
    failures,
    keyring,
    only,
    trip_plan,
)


def at(seconds: float) -> str:
    """The wire time ``seconds`` after the builder's start."""
    return format_time(START + timedelta(seconds=seconds))


def commit(b: TxnBuilder) -> dict[str, Any]:
    """Decide commit, commit in tier order, conclude committed, seal."""
    b.decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def abort(b: TxnBuilder) -> dict[str, Any]:
    """Decide abort, release every branch, conclude aborted, seal."""
    b.decided("abort", "not every vote is yes").aborted(*BRANCHES)
    return b.outcome("aborted").sealed()


def details(record: dict[str, Any]) -> dict[str, str]:
    return {f.rule: f.detail for f in verify_record(record, keyring()).findings}


def asked(b: TxnBuilder) -> TxnBuilder:
    """Every branch prepared (parallel mode), then finance approves."""
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    return b.approved()


def prepared_with(b: TxnBuilder, **flight: Any) -> TxnBuilder:
    """Every branch prepared; the airline's receipt with ``flight``'s members changed."""
    b.prepared("flight", receipt=b.prepare_receipt("flight", **flight))
    for branch_id in ("hotel", "calendar", "pay"):
        b.prepared(branch_id)
    return b


# --- TXN-MODE ------------------------------------------------------------------------


def test_an_honest_auto_record_passes_TXN_MODE_and_says_what_it_chose() -> None:
    """[TXN-MODE] 900 s at worst + 60 s to commit fit in 1800 s holds: parallel."""
    record = committed_trip()
    assert [e["type"] for e in record["events"][:2]] == ["txn.planned", "txn.mode"]
    detail = details(record)["TXN-MODE"]
    assert "mode 'parallel' (requested 'auto') chosen at event 1" in detail


@pytest.mark.parametrize("mode", ["parallel", "approval-first"])
def test_an_explicit_mode_is_taken_as_it_is_TXN_MODE(mode: str) -> None:
    """[TXN-MODE] A plan's parallel or approval-first is chosen as it is; approval-first
    asks first and prepares after."""
    b = TxnBuilder(trip_plan(mode=mode)).planned()
    if mode == "approval-first":
        b.approved()
        for branch_id in BRANCHES:
            b.prepared(branch_id)
    else:
        for branch_id in BRANCHES:
            b.prepared(branch_id)
        b.approved()
    assert failures(commit(b)) == {}


def test_auto_without_holds_is_parallel_TXN_MODE() -> None:
    """[TXN-MODE] Auto with nothing to fit inside is parallel, and nothing more is needed."""
    plan = trip_plan()
    plan["branches"] = [b for b in plan["branches"] if b["tier"] != "hold"]
    plan["branches"][1]["settles"] = []
    plan["branches"][1]["amount"]["value"] = "1900.00"
    b = TxnBuilder(plan).planned().prepared("calendar").prepared("pay").approved()
    record = b.decided("commit").committed("calendar", "pay").outcome("committed").sealed()
    assert failures(record) == {}
    assert "mode 'parallel' (requested 'auto')" in details(record)["TXN-MODE"]
    b = TxnBuilder(plan).planned(mode=False).moded(chosen="approval-first")
    (finding,) = failures(b.outcome("aborted").sealed())["TXN-MODE"]
    assert "with no hold to fit inside, auto is 'parallel'" in finding.detail


def test_parallel_when_the_signed_numbers_say_approval_first_fails_TXN_MODE() -> None:
    """[TXN-MODE] Asking finance could take 1800 s (alice, then bob), the holds last
    1800 s and commit needs 60 s: approval-first, yet the record says parallel."""
    b = TxnBuilder().planned(mode=False)
    b.moded(estimates=[b.estimate(chain=(ALICE, BOB))], worstSeconds=1800)
    (finding,) = only("TXN-MODE", commit(asked(b)))
    assert finding.event == 1
    assert "chose 'parallel', but its signed numbers give 'approval-first'" in finding.detail
    assert "worstSeconds 1800 + commitSeconds 60 is more than shortestHoldSeconds 1800" in (
        finding.detail
    )


def test_stated_numbers_not_borne_out_by_the_signed_ones_fail_TXN_MODE() -> None:
    """[TXN-MODE] worstSeconds, shortestHoldSeconds and basis are the signed objects'."""
    b = TxnBuilder().planned(mode=False)
    b.moded(worstSeconds=300, shortestHoldSeconds=3600, basis="calendar")
    found = only("TXN-MODE", commit(asked(b)))
    assert [f.event for f in found] == [1, 1, 1]
    assert "worstSeconds 300; its signed chain estimates give 900" in found[0].detail
    assert "shortestHoldSeconds 3600; its signed quotes give 1800" in found[1].detail
    assert "basis 'calendar'; the shortest hold is ['flight', 'hotel']" in found[2].detail


def test_auto_rests_on_one_estimate_per_group_and_one_quote_per_hold_TXN_MODE() -> None:
    """[TXN-MODE] A missing estimate or quote, or a second one, leaves nothing to recompute."""
    b = TxnBuilder().planned(mode=False)
    body = b.mode_body()
    b.moded(estimates=[], quotes=[*body["quotes"], b.quote("hotel")], commitSeconds="1 min")
    found = only("TXN-MODE", abort(b))
    assert [f.detail.split(" ", 3)[3] for f in found] == [
        "carries 0 chain estimates for approval group 'finance', not 1",
        "carries 2 quotes for hold 'hotel', not 1",
        "states commitSeconds '1 min', not a number of seconds",
    ]


def test_a_mode_the_plan_did_not_ask_for_fails_TXN_MODE() -> None:
    """[TXN-MODE] The plan asks approval-first; the record says parallel was requested."""
    b = TxnBuilder(trip_plan(mode="approval-first")).planned(mode=False)
    b.moded(requested="parallel", chosen="parallel", quotes=[])
    (finding,) = only("TXN-MODE", commit(asked(b)))
    assert "requested 'parallel'; the plan's mode is 'approval-first'" in finding.detail
    b = TxnBuilder(trip_plan(mode="parallel")).planned(mode=False).moded(chosen="holds-first")
    (finding,) = failures(b.outcome("aborted").sealed())["TXN-MODE"]
    assert "chose 'holds-first'" in finding.detail


def test_a_prepare_before_the_approval_in_approval_first_fails_TXN_MODE() -> None:
    """[TXN-MODE] In approval-first nothing is prepared before every group approved."""
    b = TxnBuilder(trip_plan(mode="approval-first")).planned()
    b.prepared("flight").prepared("hotel").approved().prepared("calendar").prepared("pay")
    found = only("TXN-MODE", commit(b))
    assert [f.event for f in found] == [2, 3]
    assert "branch 'flight' in approval-first mode before approval group 'finance'" in (
        found[0].detail
    )


def test_no_mode_or_a_second_or_late_one_fails_TXN_MODE() -> None:
    """[TXN-MODE] Exactly one txn.mode, before anything is prepared or asked."""
    b = TxnBuilder().planned(mode=False).prepared("flight").moded()
    b.prepared("hotel").prepared("calendar").prepared("pay").approved().moded()
    found = only("TXN-MODE", commit(b))
    assert [f.event for f in found] == [7, 1]
    assert "chooses the mode again; it was chosen at event 2" in found[0].detail
    assert "event 1 (txn.prepared) comes before the mode was chosen" in found[1].detail
    b = TxnBuilder().planned(mode=False).prepared("flight").prepared("hotel")
    b.prepared("calendar").prepared("pay").approved()
    (finding,) = only("TXN-MODE", commit(b))
    assert finding.event == 1 and "the record has no txn.mode" in finding.detail


def test_an_abort_before_the_mode_was_chosen_needs_no_mode_TXN_MODE() -> None:
    """[TXN-MODE] No quote or estimate to be had: abort before anything is prepared or
    asked, no txn.mode (the abort receipts name no plan)."""
    b = TxnBuilder().planned(mode=False).decided("abort", "flight: no quote")
    for branch_id in BRANCHES:
        b.phase2("txn.aborted", branch_id, b.outcome_receipt(branch_id, "abort", planDigest=None))
    record = b.outcome("aborted").sealed()
    assert failures(record) == {}
    assert details(record)["TXN-MODE"] == "no mode was chosen, and nothing was prepared or asked"


def test_an_unreadable_plan_leaves_the_timing_rules_absent() -> None:
    """[TXN-MODE] [TXN-APPROVE-BY] [TXN-LEASE] need the plan; absent is never a pass."""
    plan = trip_plan()
    plan["mode"] = "whenever"
    b = TxnBuilder()
    b.plan_digest = digest(plan)
    b.planned(plan=plan, mode=False).outcome("aborted")
    found = failures(b.sealed())
    assert "UNKNOWN_MODE" in found["TXN-PLAN"][0].detail
    for rule in ("TXN-MODE", "TXN-APPROVE-BY", "TXN-LEASE"):
        (finding,) = found[rule]
        assert finding.result is Result.ABSENT and "the plan cannot be read" in finding.detail


# --- the signed objects txn.mode carries: TXN-SIGNER, TXN-DIGEST ----------------------


def test_an_estimate_forged_by_the_coordinator_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] The coordinator signs finance's chain estimate itself: only its word
    that asking finance fits in the holds."""
    b = TxnBuilder().planned(mode=False).moded(estimates=[TxnBuilder().estimate(by=COORDINATOR)])
    (finding,) = only("TXN-SIGNER", commit(asked(b)))
    assert finding.event == 1 and "body.estimates[0] is signed by" in finding.detail
    assert f"not by the gateway it names {GATEWAY!r}" in finding.detail


def test_an_estimate_from_a_gateway_that_never_asked_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] An estimate is its group's gateway's: the one that answered the ask."""
    forged = TxnBuilder().estimate(by=COORDINATOR, gateway=COORDINATOR)
    b = TxnBuilder().planned(mode=False).moded(estimates=[forged])
    (finding,) = only("TXN-SIGNER", commit(asked(b)))
    assert f"is from gateway {COORDINATOR!r}, but approval group 'finance' was asked of " in (
        finding.detail
    )


def test_a_quote_signed_by_another_participant_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] The hotel signs the airline's quote."""
    b = TxnBuilder().planned(mode=False)
    quotes = [b.quote("flight", by=HOTEL), b.quote("hotel")]
    b.moded(quotes=quotes)
    (finding,) = only("TXN-SIGNER", commit(asked(b)))
    assert "body.quotes[0]" in finding.detail and "participant of branch 'flight'" in (
        finding.detail
    )


def test_quotes_and_estimates_for_another_plan_or_branch_fail_TXN_DIGEST() -> None:
    """[TXN-DIGEST] Each quote and estimate names this plan, this transaction, and a
    branch or approval group of the plan."""
    b = TxnBuilder().planned(mode=False)
    other = digest(trip_plan(pay="1950.00"))
    body = b.mode_body()
    estimate = b.estimate(planDigest=other)
    quotes = [b.quote("flight", txnId="txn-old-77"), body["quotes"][1], b.quote("calendar")]
    quotes[2] = {**quotes[2], "branchId": "rental-car"}
    b.moded(estimates=[estimate], quotes=quotes)
    found = failures(b.outcome("aborted").sealed())
    digest_findings = [f.detail for f in found["TXN-DIGEST"]]
    assert len(digest_findings) == 3
    assert f"carries estimates[0] for plan {other!r}" in digest_findings[0]
    assert "carries quotes[0] for transaction 'txn-old-77'" in digest_findings[1]
    assert (
        "carries quotes[2] for branchId 'rental-car', which is not in the plan"
        in (digest_findings[2])
    )


# --- TXN-APPROVE-BY ------------------------------------------------------------------


def test_an_approval_after_the_recorded_deadline_fails_TXN_APPROVE_BY() -> None:
    """[TXN-APPROVE-BY] The holds moved the approval deadline to 00:06.5; finance
    approved at 00:07, and the commit counted it."""
    b = TxnBuilder().voted(approval=None).deadline(at(6.5)).approved()
    (finding,) = only("TXN-APPROVE-BY", commit(b))
    assert finding.event == 7
    assert f"approved at {at(7)}, after the approval deadline {at(6.5)} (event 6" in (
        finding.detail
    )


def test_an_approval_within_every_recorded_deadline_passes_TXN_APPROVE_BY() -> None:
    """[TXN-APPROVE-BY] The earliest deadline recorded before the decision is the one;
    one recorded after the decision does not move it."""
    b = TxnBuilder().voted(approval=None).deadline(at(600)).deadline(at(300), "hotel")
    b.approved().decided("commit").deadline(at(1))
    record = b.committed(*COMMIT_ORDER).outcome("committed").sealed()
    assert failures(record) == {}
    assert details(record)["TXN-APPROVE-BY"] == (
        f"1 approvals counted in the commit were decided by the approval deadline {at(300)} "
        "(event 7 (txn.deadline))"
    )


def test_no_deadline_recorded_or_no_commit_passes_TXN_APPROVE_BY() -> None:
    """[TXN-APPROVE-BY] Without a recorded deadline decideBy is [TXN-VOTES]' alone."""
    assert "no approval deadline was recorded" in details(committed_trip())["TXN-APPROVE-BY"]
    b = TxnBuilder().voted(approval="reject").deadline(at(1)).decided("abort")
    record = b.aborted(*BRANCHES).outcome("aborted").sealed()
    assert details(record)["TXN-APPROVE-BY"] == "nothing was decided or concluded as commit"


def test_an_unreadable_deadline_fails_TXN_APPROVE_BY() -> None:
    """[TXN-APPROVE-BY] approveBy is a time."""
    b = TxnBuilder().voted().deadline("soon")
    (finding,) = only("TXN-APPROVE-BY", commit(b))
    assert finding.event == 7 and "'soon', which is not a time" in finding.detail


# --- TXN-LEASE -----------------------------------------------------------------------


def test_a_final_commit_after_a_holds_lease_fails_TXN_LEASE() -> None:
    """[TXN-LEASE] The seat's lease ended at 00:08.5; the card was charged at 00:09 and
    the seat converted at 00:10, by their participants' own signed times."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(8.5)).approved()
    found = only("TXN-LEASE", commit(b))
    assert [f.event for f in found] == [9, 10]
    assert f"final branch 'pay' committed at {at(9)} (its signed time), but hold 'flight'" in (
        found[0].detail
    )
    assert f"lease ended at {at(8.5)} (event 2 (txn.prepared))" in found[0].detail
    assert "hold branch 'flight' committed" in found[1].detail and "its own lease" in (
        found[1].detail
    )


def test_a_hold_committed_after_its_own_lease_fails_TXN_LEASE() -> None:
    """[TXN-LEASE] The card was charged in time; the seat's own commit came after its lease."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(9.5)).approved()
    (finding,) = only("TXN-LEASE", commit(b))
    assert finding.event == 10 and "its own lease ended" in finding.detail


def test_a_compensate_commit_undone_after_a_lapse_passes_TXN_LEASE() -> None:
    """[TXN-LEASE] The calendar entry (undoable) was made after the seat's lease ended at
    00:07.5; the coordinator captured nothing, undid the entry and released the rest."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(7.5)).approved()
    b.decided("commit").committed("calendar").unwinding("pay", "HOLD_EXPIRED")
    b.compensated("calendar").aborted("pay", "flight", "hotel")
    assert failures(b.outcome("aborted").sealed()) == {}


def test_a_renewal_is_what_keeps_a_commit_within_the_lease_TXN_LEASE() -> None:
    """[TXN-LEASE] The latest lease counts: a renewal extends the prepare's."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(8.5)).renewed("flight")
    record = commit(b.approved())
    assert failures(record) == {}
    assert details(record)["TXN-LEASE"] == (
        "3 final and hold commits within the leases of the holds they relied on, and 3 leases "
        "within their holds' horizons"
    )


def test_a_lease_past_its_horizon_fails_TXN_LEASE() -> None:
    """[TXN-LEASE] The airline renews the seat past the horizon of its own prepare."""
    b = TxnBuilder().planned().prepared("flight").prepared("hotel")
    past = format_time(START + timedelta(minutes=45))
    b.renewed("flight", b.renew_receipt("flight", leaseExpiresAt=past))
    b.prepared("calendar").prepared("pay").approved()
    (finding,) = only("TXN-LEASE", commit(b))
    assert finding.event == 4
    assert f"leased until {past}, past its horizon {b.horizons['flight']}" in finding.detail
    b = TxnBuilder().planned()
    prepared_with(b, leaseExpiresAt=past, holdHorizon=at(1800)).approved()
    (finding,) = only("TXN-LEASE", commit(b))
    assert finding.event == 2


def test_a_lease_is_read_from_signed_receipts_only_TXN_LEASE() -> None:
    """[TXN-LEASE] A refused receipt (kept as evidence, with a problem) grants nothing."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(8.5))
    late = b.prepare_receipt("flight", attempt=2, leaseExpiresAt=at(900))
    b.event("txn.replaced", branchId="flight", receipt=late, problem="tier mismatch")
    found = failures(commit(b.approved()))
    assert set(found) == {"TXN-LEASE", "TXN-VOTES"}
    assert [f.event for f in found["TXN-LEASE"]] == [10, 11]


# --- txn.replaced: TXN-VOTES, TXN-LEASE, TXN-SIGNER, TXN-DIGEST ------------------------


def test_a_lost_hold_placed_again_is_leased_anew_TXN_VOTES_TXN_LEASE() -> None:
    """[TXN-VOTES] [TXN-LEASE] The seat's lease ended at 00:05; it was placed again
    (attempt 2), and the commits rely on the new lease."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(5)).replaced("flight")
    record = commit(b.approved())
    assert failures(record) == {}


def test_a_lost_hold_not_placed_again_fails_TXN_VOTES() -> None:
    """[TXN-VOTES] The replace failed (null receipt and a problem): the seat is gone, and a
    commit cannot count its old yes."""
    b = prepared_with(TxnBuilder().planned(), leaseExpiresAt=at(8.5))
    b.replaced("flight", problem="HOLD_EXPIRED: seat 12A was sold").approved()
    found = failures(commit(b))
    assert "'flight' was lost and not placed again" in found["TXN-VOTES"][0].detail


def test_a_replace_receipt_is_held_to_the_signer_and_digest_rules() -> None:
    """[TXN-SIGNER] [TXN-DIGEST] A replace receipt is a prepare receipt of a later
    attempt, signed by the branch's participant, for this plan and branch."""
    b = TxnBuilder().voted(approval=None).replaced("flight", attempt=1)
    (finding,) = only("TXN-SIGNER", commit(b.approved()))
    assert finding.event == 6 and "is attempt 1" in finding.detail
    b = TxnBuilder().voted(approval=None)
    b.replaced("flight", receipt=b.prepare_receipt("flight", attempt=2, by=HOTEL))
    (finding,) = only("TXN-SIGNER", commit(b.approved()))
    assert "participant of branch 'flight'" in finding.detail
    b = TxnBuilder().voted(approval=None)
    b.replaced("flight", receipt=b.prepare_receipt("hotel", attempt=2))
    (finding,) = only("TXN-DIGEST", commit(b.approved()))
    assert "branchId 'hotel', not 'flight'" in finding.detail


# --- the rules are what refuse ----------------------------------------------------------


@pytest.mark.parametrize("rule", ["TXN-MODE", "TXN-APPROVE-BY", "TXN-LEASE"])
def test_switching_a_timing_rule_off_passes_only_its_violation(rule: str) -> None:
    """[TXN-MODE] [TXN-APPROVE-BY] [TXN-LEASE] are switchable, each alone."""
    builds = {
        "TXN-MODE": lambda: TxnBuilder(trip_plan(mode="approval-first")).voted(),
        "TXN-APPROVE-BY": lambda: TxnBuilder().voted(approval=None).deadline(at(6.5)).approved(),
        "TXN-LEASE": lambda: prepared_with(
            TxnBuilder().planned(), leaseExpiresAt=at(9.5)
        ).approved(),
    }
    record = commit(builds[rule]())
    assert set(failures(record)) == {rule}
    with unsafe_switched_off(rule):
        assert verify_record(record, keyring()).ok
    others = [r for r in builds if r != rule]
    with unsafe_switched_off(*others):
        assert not verify_record(record, keyring()).ok
