"""The offline verifier's approval rules: what an approval carries must show real people.

Every record here is a committed trip whose finance approval the gateway
signed, with votes, cards and a routing record built to break one rule (the
gateway's and the coordinator's keys are the attacker's). An honest approval
passes every rule; each broken one fails its rule and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import txn_records
from hatp._checks import unsafe_switched_off
from hatp.clock import format_time
from hatp.evidence import (
    APPROVAL_RULES,
    TXN_RULES,
    Keyring,
    SigningKey,
    digest,
    sign,
    verify,
    verify_approval,
    verify_read_approval,
    verify_record,
)
from hatp.model import Approval, Finding, Result, parse_plan
from planted import CASES
from txn_records import (
    ALICE,
    BOB,
    BRANCHES,
    CAROL,
    COMMIT_ORDER,
    COORDINATOR,
    DANA,
    ERIN,
    GATEWAY,
    KEYS,
    PERSON_KEYS,
    START,
    TxnBuilder,
    committed_trip,
    keyring,
    signed_card,
    trip_plan,
)

EVIL = "https://directory.evil.example"
EVIL_KEY = SigningKey.from_seed(bytes([99]) * 32, f"{EVIL}#key-1")
#: A key the gateway made up for Alice.
MADE_UP = SigningKey.from_seed(bytes([98]) * 32, f"{ALICE}#key-2")
LATE = format_time(START + timedelta(minutes=20))


def ring() -> Keyring:
    """The verifier's keyring, which also knows (and does not trust) an evil directory."""
    out = keyring()
    out.add(EVIL_KEY.public, EVIL)
    return out


def failures(record: dict[str, Any]) -> dict[str, list[Finding]]:
    """The failing or absent findings by rule, with evil's key known (not trusted)."""
    return txn_records.failures(record, ring())


def only(rule: str, record: dict[str, Any]) -> list[Finding]:
    """Assert ``record`` fails ``rule`` and nothing else; return its findings."""
    return txn_records.only(rule, record, ring())


Make = Callable[[TxnBuilder], dict[str, Any]]


def committed_on(make: Make, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """A committed trip whose finance approval (event 6) is ``make(builder)``."""
    b = TxnBuilder(plan).voted(approval=None)
    b.approved(approval=make(b)).decided("commit").committed(*COMMIT_ORDER)
    return b.outcome("committed").sealed()


def two_of_three() -> dict[str, Any]:
    return trip_plan(quorum="2-of-3")


# --- honest approvals --------------------------------------------------------------


def test_an_honest_approval_passes_every_approval_rule() -> None:
    """[TXN-ROUTING] [TXN-CARD-SIGNED] [TXN-VOTE-SIGNED] [TXN-APPROVERS] [TXN-QUORUM]
    [TXN-SOD] [TXN-AUTHORITY] [TXN-VOTE-LATE] [TXN-ROUTED]"""
    report = verify_record(committed_trip(), ring())
    findings = {f.rule: f for f in report.findings}
    assert report.ok
    assert set(APPROVAL_RULES) <= set(TXN_RULES)
    assert "1 approving approval" in findings["TXN-VOTE-SIGNED"].detail
    assert "checked 1938" in findings["TXN-ROUTING"].detail


def test_two_of_three_approved_by_two_people_passes() -> None:
    """[TXN-QUORUM] The top two candidates approve a 2-of-3 group."""
    record = committed_on(lambda b: b.approval(), two_of_three())
    assert failures(record) == {}
    details = {f.rule: f.detail for f in verify_record(record, ring()).findings}
    assert "group 'finance': 2 of 2 needed" in details["TXN-QUORUM"]


def test_a_withdrawn_reject_without_votes_passes() -> None:
    """A reject needs no votes: the gateway withdrew its asks at the deadline."""
    b = TxnBuilder().voted(approval=None)
    withdrawn = b.approval(
        decision="reject",
        votes=[],
        withdrawn=True,
        reason="deadline 2026-12-02T17:03:08.123Z passed; nobody decided",
        routing=b.routing(decided={}),
    )
    b.approved(decision="reject", approval=withdrawn).decided("abort", "finance did not approve")
    assert failures(b.aborted(*BRANCHES).outcome("aborted").sealed()) == {}


def test_a_reject_is_still_held_to_its_signature() -> None:
    """[TXN-SIGNER] A withdrawn reject edited after the gateway signed it."""
    b = TxnBuilder().voted(approval=None)
    edited = {**b.approval(decision="reject", votes=[], withdrawn=True), "reason": "approved"}
    b.approved(decision="reject", approval=edited).decided("abort")
    (finding,) = only("TXN-SIGNER", b.aborted(*BRANCHES).outcome("aborted").sealed())
    assert "BAD_SIGNATURE" in finding.detail


def test_a_pending_answer_in_the_record_passes() -> None:
    """[TXN-SIGNER] [TXN-DIGEST] txn.pending carries the gateway's signed PendingVote."""
    b = TxnBuilder().voted(pending=True).decided("commit").committed(*COMMIT_ORDER)
    assert failures(b.outcome("committed").sealed()) == {}


# --- txn.pending -------------------------------------------------------------------


def test_a_pending_answer_signed_by_the_coordinator_fails_TXN_SIGNER() -> None:
    """[TXN-SIGNER] The pending answer is the gateway's word, signed by it."""
    b = TxnBuilder().voted(approval=None)
    b.pending_asked(pending=b.pending(by=COORDINATOR)).approved().decided("commit")
    (finding,) = only("TXN-SIGNER", b.committed(*COMMIT_ORDER).outcome("committed").sealed())
    assert finding.event == 6 and "body.pending" in finding.detail


def test_a_pending_answer_for_another_group_or_plan_fails_TXN_DIGEST() -> None:
    """[TXN-DIGEST] A pending answer names this plan and a group of it."""
    b = TxnBuilder().voted(approval=None)
    b.pending_asked(pending=b.pending(groupId="legal"))
    b.pending_asked("legal", pending=b.pending(groupId="legal"))
    b.approved().decided("commit").committed(*COMMIT_ORDER)
    found = only("TXN-DIGEST", b.outcome("committed").sealed())
    assert [f.event for f in found] == [6, 7]
    assert "groupId 'legal', not 'finance'" in found[0].detail
    assert "'legal', which is not in the plan" in found[1].detail


# --- TXN-VOTE-SIGNED ---------------------------------------------------------------


def test_a_vote_edited_after_signing_fails_TXN_VOTE_SIGNED() -> None:
    """[TXN-VOTE-SIGNED] Alice rejected; the gateway turned her vote into an approve."""
    record = committed_on(
        lambda b: b.approval(votes=[{**b.vote(ALICE, "reject"), "decision": "approve"}])
    )
    (finding,) = only("TXN-VOTE-SIGNED", record)
    assert finding.event == 6 and "BAD_SIGNATURE" in finding.detail
    with unsafe_switched_off("TXN-VOTE-SIGNED"):
        assert verify_record(record, ring()).ok


def test_a_vote_signed_by_a_key_not_on_the_card_fails_TXN_VOTE_SIGNED() -> None:
    """[TXN-VOTE-SIGNED] Signed by the gateway's key, by Bob's, or by a key made up for Alice."""
    for key in (KEYS[GATEWAY], PERSON_KEYS[BOB], MADE_UP):
        record = committed_on(lambda b, key=key: b.approval(votes=[b.vote(ALICE, key=key)]))
        (finding,) = only("TXN-VOTE-SIGNED", record)
        assert f"not signed by an Ed25519 key on {ALICE}'s card" in finding.detail


def test_a_vote_for_another_ask_or_plan_fails_TXN_VOTE_SIGNED() -> None:
    """[TXN-VOTE-SIGNED] A genuine vote is bound to one ask of one group of one plan."""
    other = TxnBuilder(trip_plan(pay="1950.00"))
    changes = [
        {"askId": "ask-txn-trip-0001-legal"},
        {"txnId": "txn-trip-0002"},
        {"planDigest": other.plan_digest},
        {"groupId": "legal"},
    ]
    for change in changes:
        record = committed_on(lambda b, c=change: b.approval(votes=[b.vote(ALICE, **c)]))
        (finding,) = only("TXN-VOTE-SIGNED", record)
        (member,) = change
        assert f"names {member}" in finding.detail


#: The digest of the hold terms a holds-first group was asked about, and of others.
TERMS = digest({"kind": "hold-terms", "approveBy": "2026-12-02T09:20:00.000Z"})
OTHER_TERMS = digest({"kind": "hold-terms", "approveBy": "2026-12-02T09:50:00.000Z"})


def test_votes_naming_the_approvals_hold_terms_pass() -> None:
    """[TXN-VOTE-SIGNED] Holds-first: the approval and every vote name the same terms."""
    b = TxnBuilder()
    approval = b.approval(termsDigest=TERMS, votes=[b.vote(ALICE, termsDigest=TERMS)])
    findings = verify_approval(approval, b.plan, ring())
    assert [(f.rule, f.result) for f in findings] == [(r, Result.PASS) for r in APPROVAL_RULES]


@pytest.mark.parametrize(
    ("approved", "voted"),
    [(TERMS, OTHER_TERMS), (TERMS, None), (None, TERMS)],
    ids=["other-terms", "vote-without-terms", "approval-without-terms"],
)
def test_a_vote_for_other_hold_terms_fails_TXN_VOTE_SIGNED(
    approved: str | None, voted: str | None
) -> None:
    """[TXN-VOTE-SIGNED] A planted approval: people approved other terms than it says
    (or none); switching the rule off lets it through."""
    b = TxnBuilder()
    vote = b.vote(ALICE) if voted is None else b.vote(ALICE, termsDigest=voted)
    approval = (
        b.approval(votes=[vote])
        if approved is None
        else b.approval(termsDigest=approved, votes=[vote])
    )
    findings = verify_approval(approval, b.plan, ring())
    (finding,) = [f for f in findings if f.result is not Result.PASS]
    assert finding.rule == "TXN-VOTE-SIGNED"
    assert f"names termsDigest {voted!r}, not {approved!r}" in finding.detail
    with unsafe_switched_off("TXN-VOTE-SIGNED"):
        findings = verify_approval(approval, b.plan, ring())
        assert {f.result for f in findings} == {Result.PASS}


def test_a_vote_without_its_voters_card_or_form_fails_TXN_VOTE_SIGNED() -> None:
    """[TXN-VOTE-SIGNED] No card, no key to check the vote; and a vote has its form."""
    record = committed_on(lambda b: b.approval(votes=[b.vote(ALICE)], cards=[]))
    found = failures(record)
    assert "whose card the approval does not carry" in found["TXN-VOTE-SIGNED"][0].detail
    assert "carries no card of theirs" in found["TXN-AUTHORITY"][0].detail
    odd = committed_on(lambda b: b.approval(votes=[{"human": ALICE, "decision": "approve"}]))
    assert "is not a HumanVote" in failures(odd)["TXN-VOTE-SIGNED"][0].detail


# --- TXN-CARD-SIGNED ---------------------------------------------------------------


def test_a_card_from_an_untrusted_directory_fails_TXN_CARD_SIGNED() -> None:
    """[TXN-CARD-SIGNED] Alice's card with a made-up key, signed by a directory nobody trusts."""
    card = signed_card("alice", key=EVIL_KEY, issuer=EVIL, keys=[MADE_UP.public.to_jwk()])
    record = committed_on(lambda b: b.approval(votes=[b.vote(ALICE, key=MADE_UP)], cards=[card]))
    (finding,) = only("TXN-CARD-SIGNED", record)
    assert "ISSUER_UNTRUSTED" in finding.detail


def test_a_card_edited_after_signing_fails_TXN_CARD_SIGNED() -> None:
    """[TXN-CARD-SIGNED] Erin's limit raised from 500 to 10,000 on her signed card."""
    card = signed_card("erin")
    card["authority"] = [
        {
            **card["authority"][0],
            "maxAmount": {**card["authority"][0]["maxAmount"], "value": "10000"},
        }
    ]
    record = committed_on(lambda b: b.approval(votes=[b.vote(ERIN)], cards=[card]))
    (finding,) = only("TXN-CARD-SIGNED", record)
    assert "BAD_SIGNATURE" in finding.detail and ERIN in finding.detail


def test_a_card_signed_for_another_issuer_or_twice_fails_TXN_CARD_SIGNED() -> None:
    """[TXN-CARD-SIGNED] The gateway's key signs a card naming acme's directory; a card
    carried twice."""
    forged = signed_card("alice", key=KEYS[GATEWAY])
    record = committed_on(lambda b: b.approval(cards=[forged]))
    (finding,) = only("TXN-CARD-SIGNED", record)
    assert f"signed by {GATEWAY!r}" in finding.detail
    twice = committed_on(lambda b: b.approval(cards=[signed_card("alice"), signed_card("alice")]))
    (finding,) = only("TXN-CARD-SIGNED", twice)
    assert "cards[1]" in finding.detail and "repeats a card id" in finding.detail


# --- TXN-APPROVERS -----------------------------------------------------------------


def test_an_approver_without_a_vote_fails_TXN_APPROVERS() -> None:
    """[TXN-APPROVERS] Bob is listed as approving; only Alice voted."""
    record = committed_on(
        lambda b: b.approval(
            votes=[b.vote(ALICE)],
            approvers=[ALICE, BOB],
            cards=[signed_card("alice"), signed_card("bob")],
        )
    )
    (finding,) = only("TXN-APPROVERS", record)
    assert f"are ['{ALICE}']" in finding.detail


def test_an_approve_with_a_reject_vote_or_withdrawn_fails_TXN_APPROVERS() -> None:
    """[TXN-APPROVERS] Any reject decides the group reject; a withdrawn ask approves nothing."""
    record = committed_on(
        lambda b: b.approval(votes=[b.vote(ALICE), b.vote(BOB, "reject")]), two_of_three()
    )
    found = failures(record)
    assert set(found) == {"TXN-APPROVERS", "TXN-QUORUM"}
    assert f"reject vote by {BOB}" in found["TXN-APPROVERS"][0].detail
    (finding,) = only("TXN-APPROVERS", committed_on(lambda b: b.approval(withdrawn=True)))
    assert "withdrawn" in finding.detail


def test_one_person_voting_twice_counts_once() -> None:
    """[TXN-APPROVERS] [TXN-QUORUM] Alice's two votes are not two approvers of a 2-of-3."""
    record = committed_on(
        lambda b: b.approval(votes=[b.vote(ALICE), b.vote(ALICE)]), two_of_three()
    )
    found = failures(record)
    assert set(found) == {"TXN-APPROVERS", "TXN-QUORUM"}
    assert f"second vote by {ALICE}" in found["TXN-APPROVERS"][0].detail


# --- TXN-QUORUM, TXN-SOD, TXN-AUTHORITY, TXN-VOTE-LATE -----------------------------


def test_too_few_approvers_for_two_of_three_fails_TXN_QUORUM() -> None:
    """[TXN-QUORUM] A 2-of-3 group approved by Alice alone."""
    record = committed_on(lambda b: b.approval(votes=[b.vote(ALICE)]), two_of_three())
    (finding,) = only("TXN-QUORUM", record)
    assert "1 person" in finding.detail and "needs 2" in finding.detail


def test_the_person_the_agent_acts_for_approving_fails_TXN_SOD() -> None:
    """[TXN-SOD] Dana approves the trip the agent books for her."""
    (finding,) = only("TXN-SOD", committed_on(lambda b: b.approval(votes=[b.vote(DANA)])))
    assert DANA in finding.detail


def test_an_approver_below_the_checked_amount_fails_TXN_AUTHORITY() -> None:
    """[TXN-AUTHORITY] Erin (500 USD) approves a trip that needs 1,938 USD."""
    (finding,) = only("TXN-AUTHORITY", committed_on(lambda b: b.approval(votes=[b.vote(ERIN)])))
    assert "limit for approve.spend is 500 USD" in finding.detail


def test_authority_in_another_currency_or_action_fails_TXN_AUTHORITY() -> None:
    """[TXN-AUTHORITY] Currencies are never converted; another action grants nothing."""
    euro = [{"action": "approve.spend", "maxAmount": {"value": "90000", "currency": "EUR"}}]
    other = [{"action": "approve.hire", "maxAmount": {"value": "90000", "currency": "USD"}}]
    for authority, said in ((euro, "in 90000 EUR, not in USD"), (other, "grants no approve.spend")):
        card = signed_card("alice", authority=authority)
        (finding,) = only("TXN-AUTHORITY", committed_on(lambda b, c=card: b.approval(cards=[c])))
        assert said in finding.detail


def test_a_vote_after_decide_by_fails_TXN_VOTE_LATE() -> None:
    """[TXN-VOTE-LATE] Alice voted after decideBy; the gateway dated the approval before it."""
    record = committed_on(lambda b: b.approval(votes=[b.vote(ALICE, time=LATE)]))
    (finding,) = only("TXN-VOTE-LATE", record)
    assert LATE in finding.detail


# --- TXN-ROUTING, TXN-ROUTED -------------------------------------------------------


def test_a_routing_record_claiming_a_check_it_did_not_make_fails_TXN_ROUTING() -> None:
    """[TXN-ROUTING] Erin approves; the routing record says 500 USD was checked, not 1,938."""

    def make(b: TxnBuilder) -> dict[str, Any]:
        lowered = b.routing(
            decided={ERIN: "approve"}, checked=[{"value": "500", "currency": "USD"}]
        )
        return b.approval(votes=[b.vote(ERIN)], routing=lowered)

    record = committed_on(make)
    (finding,) = only("TXN-ROUTING", record)
    assert "RTE-CHECKED" in finding.detail
    with unsafe_switched_off("RTE-CHECKED"):
        assert verify_record(record, ring()).ok


def test_a_routing_record_without_an_amount_check_is_never_a_pass() -> None:
    """[TXN-ROUTING] [TXN-AUTHORITY] checked: absent fails the routing rule and leaves
    authority absent; absent never passes."""
    record = committed_on(
        lambda b: b.approval(routing=b.routing(decided={ALICE: "approve"}, checked="absent"))
    )
    found = failures(record)
    assert set(found) == {"TXN-ROUTING", "TXN-AUTHORITY"}
    assert [f.result for f in found["TXN-AUTHORITY"]] == [Result.ABSENT]
    with unsafe_switched_off("TXN-ROUTING"):
        assert not verify_record(record, ring()).ok


def test_a_missing_or_foreign_routing_record_fails_TXN_ROUTING() -> None:
    """[TXN-ROUTING] An empty routing record; one signed by the coordinator."""
    found = failures(committed_on(lambda b: b.approval(routing={})))
    assert set(found) == {"TXN-ROUTING", "TXN-AUTHORITY", "TXN-ROUTED"}
    assert "RTE-SIGNED" in found["TXN-ROUTING"][0].detail
    assert {f.result for f in found["TXN-ROUTED"]} == {Result.ABSENT}

    def forged(b: TxnBuilder) -> dict[str, Any]:
        routing = {k: v for k, v in b.routing().items() if k != "signature"}
        return b.approval(routing=sign(routing, KEYS[COORDINATOR]))

    (finding,) = only("TXN-ROUTING", committed_on(forged))
    assert "not by the gateway it names" in finding.detail


def test_a_voter_not_shown_as_decided_fails_TXN_ROUTED() -> None:
    """[TXN-ROUTED] Alice's vote counts, but the routing record has her not reached."""
    record = committed_on(lambda b: b.approval(routing=b.routing(decided={})))
    (finding,) = only("TXN-ROUTED", record)
    assert "'not-reached' in it" in finding.detail


def test_a_hidden_reject_fails_TXN_ROUTED() -> None:
    """[TXN-ROUTED] Carol rejected; the gateway left her vote out but not her decision."""
    routing = {ALICE: "approve", CAROL: "reject"}
    record = committed_on(lambda b: b.approval(routing=b.routing(decided=routing)))
    (finding,) = only("TXN-ROUTED", record)
    assert f"no vote by {CAROL}" in finding.detail


# --- the rules are what refuse -------------------------------------------------------


@pytest.mark.parametrize("rule", APPROVAL_RULES)
def test_every_approval_rule_has_a_planted_case(rule: str) -> None:
    """Each approval rule is proved by a planted violation that switching it off lets through."""
    assert rule in {case.check for case in CASES}


def test_an_approval_that_does_not_verify_is_not_read() -> None:
    """[TXN-SIGNER] An approval edited after signing is nobody's word: only the signer rule
    speaks about it, and the approval rules count it as unverified."""
    b = TxnBuilder().voted(approval=None)
    edited = {**b.approval(), "approvers": [ALICE, BOB]}
    b.approved(approval=edited).decided("commit").committed(*COMMIT_ORDER)
    record = b.outcome("committed").sealed()
    only("TXN-SIGNER", record)
    details = {f.rule: f.detail for f in verify_record(record, ring()).findings}
    assert "0 approving approvals (and 1 that do not verify: TXN-SIGNER)" in details["TXN-QUORUM"]


# --- one approval on its own -------------------------------------------------------


def test_verify_approval_checks_one_approval_against_its_plan() -> None:
    """[TXN-SOD] What a coordinator asks before an approval counts: the same rules."""
    b = TxnBuilder()
    honest = verify_approval(b.approval(), b.plan, ring())
    assert [(f.rule, f.result) for f in honest] == [(r, Result.PASS) for r in APPROVAL_RULES]
    own = verify_approval(b.approval(votes=[b.vote(DANA)]), b.plan, ring())
    assert [f.rule for f in own if f.result is not Result.PASS] == ["TXN-SOD"]
    assert own[[f.rule for f in own].index("TXN-SOD")].event is None


def test_verify_approval_reads_no_evidence_it_cannot_trust() -> None:
    """An approval that does not verify, or rejects, or a plan that cannot be read:
    every rule absent, and absent is never a pass."""
    b = TxnBuilder()
    cases = {
        "does not verify": ({**b.approval(), "approvers": [BOB]}, b.plan),
        "does not approve": (b.approval(decision="reject"), b.plan),
        "cannot be read": (b.approval(), {**b.plan, "branches": []}),
    }
    for said, (approval, plan) in cases.items():
        findings = verify_approval(approval, plan, ring())
        assert {f.result for f in findings} == {Result.ABSENT}, said
        assert said in findings[0].detail


def test_verify_read_approval_finds_what_verify_approval_finds() -> None:
    """The coordinator's form (the approval read and verified by the caller, the plan's
    digest known) gives the same findings, passing or failing, as checking it whole."""
    b = TxnBuilder()
    edited = signed_card("erin")
    edited["issuer"] = EVIL
    approvals = {
        "honest": b.approval(),
        "own vote": b.approval(votes=[b.vote(DANA)]),
        "untrusted card": b.approval(
            votes=[b.vote(ALICE, key=MADE_UP)],
            cards=[signed_card("alice", key=EVIL_KEY, issuer=EVIL, keys=[MADE_UP.public.to_jwk()])],
        ),
        "edited card": b.approval(votes=[b.vote(ERIN)], cards=[edited]),
        "card twice": b.approval(cards=[signed_card("alice"), signed_card("alice")]),
        "no routing": b.approval(routing={"kind": "routing"}),
        "rejects": b.approval(decision="reject"),
        "signed by another": b.approval(by=COORDINATOR),
    }
    plan = parse_plan(b.plan)
    plan_digest = digest(plan.to_wire())
    for said, doc in approvals.items():
        read = verify_read_approval(
            doc, Approval.model_validate(doc), verify(doc, ring()), plan, plan_digest, ring()
        )
        assert read == verify_approval(doc, b.plan, ring()), said
    assert any(
        f.result is not Result.PASS
        for f in verify_approval(approvals["edited card"], b.plan, ring())
    )
