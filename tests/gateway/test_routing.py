"""Routing an approval group: the gateway's amounts, the directory, a signed record."""

from __future__ import annotations

import pytest

from directory.people import PASSED_OVER_AT_25000, directory, signed
from gateway.routes import (
    GATEWAY_ID,
    GATEWAY_KEY,
    START,
    branch,
    keyring,
    plan_doc,
    post_directory,
    route_plan,
)
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.errors import AskInvalid
from hatp.evidence import verify_routing
from hatp.gateway import route
from hatp.model import Result, RoutingRecord

USD = {"currency": "USD", "value": "25000"}


def test_the_25000_request_from_the_post_is_routed_with_a_signed_record() -> None:
    """[GW-AMOUNT] [RTE-SIGNED] [RTE-DIGEST] [RTE-CHECKED] [RTE-TOTALS] Alice's and Erin's
    limits are too low, Dana is who the agent acts for; the record says so and verifies."""
    doc = plan_doc(branch("charge", "25000"))
    routed = route_plan(doc)
    assert routed.resolution.candidates == ()
    record = routed.record
    assert record["planTotals"] == [USD]
    assert record["checked"] == [USD]
    assert record["humans"] == PASSED_OVER_AT_25000
    assert RoutingRecord.model_validate(record).gateway == "https://gateway.acme.com"
    findings = verify_routing(record, doc, keyring())
    assert [(f.rule, f.result) for f in findings] == [
        ("RTE-SIGNED", Result.PASS),
        ("RTE-DIGEST", Result.PASS),
        ("RTE-CHECKED", Result.PASS),
        ("RTE-TOTALS", Result.PASS),
    ]


def test_candidates_are_listed_best_first_before_the_excluded() -> None:
    """[GW-AMOUNT]"""
    found = directory(signed("bob", "30000"), signed("carol", "30000", capacity={"open": 0}))
    record = route_plan(plan_doc(branch("charge", "25000")), found).record
    assert record["humans"] == [
        {"id": "human://acme.com/carol", "result": "candidate", "rule": None, "detail": None},
        {"id": "human://acme.com/bob", "result": "candidate", "rule": None, "detail": None},
    ]


def test_authority_is_checked_against_the_total_plus_tolerance() -> None:
    """[GW-AMOUNT] [DIR-AUTHORITY] $1,000 with 2% needs someone who covers $1,020."""
    found = directory(signed("bob", "1000"), signed("carol", "1020"))
    routed = route_plan(plan_doc(branch("charge", "1000"), tolerance="0.02"), found)
    assert routed.resolution.candidate_ids == ["human://acme.com/carol"]
    assert routed.record["checked"] == [{"value": "1020.00", "currency": "USD"}]
    assert routed.record["humans"][1]["detail"] == "limit 1000 USD < 1020.00 USD"


def test_a_wrong_plan_digest_is_refused() -> None:
    with pytest.raises(AskInvalid, match="not the digest") as caught:
        route(
            plan_doc(branch("charge", "1")),
            "sha256:" + "A" * 43,
            "finance",
            post_directory(),
            gateway_id=GATEWAY_ID,
            key=GATEWAY_KEY,
            clock=ManualClock(START),
        )
    assert caught.value.data["reason"] == "DIGEST_MISMATCH"


def test_an_ask_for_a_group_the_plan_does_not_have_is_refused() -> None:
    with pytest.raises(AskInvalid) as caught:
        route_plan(plan_doc(branch("charge", "1")), group="legal")
    assert caught.value.data["reason"] == "UNKNOWN_GROUP"


def test_with_the_amount_check_off_the_record_says_absent_and_never_passes() -> None:
    """[GW-AMOUNT] [RTE-CHECKED] Without the check the gateway routes on the agent's
    number (here none), Erin's $500 limit lets a $25,000 plan through, and the
    record says absent, which the offline verifier reports as absent, not a pass."""
    doc = plan_doc(branch("charge", "25000"))
    with unsafe_switched_off("GW-AMOUNT"):
        routed = route_plan(doc)
    assert routed.record["checked"] == "absent"
    assert routed.resolution.candidate_ids == [
        "human://acme.com/alice",
        "human://acme.com/erin",
    ]
    findings = {f.rule: f for f in verify_routing(routed.record, doc, keyring())}
    assert findings["RTE-CHECKED"].result is Result.ABSENT
    assert "absent" in findings["RTE-CHECKED"].detail
    assert not all(f.result is Result.PASS for f in findings.values())
    assert findings["RTE-SIGNED"].result is Result.PASS
