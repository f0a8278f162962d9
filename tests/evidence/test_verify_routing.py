"""Checking a routing record offline: the verifier recomputes what the gateway checked."""

from __future__ import annotations

from typing import Any

import pytest

from directory.people import DIRECTORY_KEY
from gateway.routes import GATEWAY_KEY, branch, keyring, plan_doc, route_plan
from hatp._checks import unsafe_switched_off
from hatp.evidence import ROUTING_RULES, SigningKey, sign, verify_routing
from hatp.model import Result

PLAN = plan_doc(branch("charge", "25000"))


def _record() -> dict[str, Any]:
    return route_plan(PLAN).record


def _resigned(
    record: dict[str, Any], key: SigningKey = GATEWAY_KEY, **changes: Any
) -> dict[str, Any]:
    body = {k: v for k, v in record.items() if k != "signature"}
    return sign({**body, **changes}, key)


def _results(record: dict[str, Any], plan: Any = PLAN) -> dict[str, Result]:
    return {f.rule: f.result for f in verify_routing(record, plan, keyring())}


def _failing(record: dict[str, Any], plan: Any = PLAN) -> list[str]:
    return sorted(rule for rule, result in _results(record, plan).items() if result is Result.FAIL)


def test_an_honest_record_passes_every_rule() -> None:
    """[RTE-SIGNED] [RTE-DIGEST] [RTE-CHECKED] [RTE-TOTALS]"""
    assert _results(_record()) == dict.fromkeys(ROUTING_RULES, Result.PASS)


def test_checked_lowered_and_resigned_by_the_gateway_fails_the_recomputation() -> None:
    """[RTE-CHECKED] The gateway's key signs it, so only recomputing catches it."""
    lowered = _resigned(_record(), checked=[{"value": "100", "currency": "USD"}])
    assert _failing(lowered) == ["RTE-CHECKED"]
    (finding,) = [f for f in verify_routing(lowered, PLAN, keyring()) if f.rule == "RTE-CHECKED"]
    assert "100 USD" in finding.detail and "25000 USD" in finding.detail
    with unsafe_switched_off("RTE-CHECKED"):
        assert _failing(lowered) == []


def test_a_checked_currency_the_plan_does_not_spend_fails() -> None:
    """[RTE-CHECKED]"""
    extra = [{"value": "25000", "currency": "USD"}, {"value": "1", "currency": "EUR"}]
    assert _failing(_resigned(_record(), checked=extra)) == ["RTE-CHECKED"]
    twice = [{"value": "25000", "currency": "USD"}, {"value": "25000", "currency": "USD"}]
    assert _failing(_resigned(_record(), checked=twice)) == ["RTE-CHECKED"]


def test_a_record_saying_absent_is_absent_not_ok() -> None:
    """[RTE-CHECKED] Absent never counts as a pass."""
    results = _results(_resigned(_record(), checked="absent"))
    assert results["RTE-CHECKED"] is Result.ABSENT
    assert [r for r in results.values() if r is not Result.PASS] == [Result.ABSENT]


def test_plan_totals_lowered_fail() -> None:
    """[RTE-TOTALS]"""
    lowered = _resigned(_record(), planTotals=[{"value": "100", "currency": "USD"}])
    assert _failing(lowered) == ["RTE-TOTALS"]


def test_a_record_for_another_plan_fails_the_digest_rule() -> None:
    """[RTE-DIGEST]"""
    other = plan_doc(branch("charge", "25001"))
    failing = _failing(_record(), other)
    assert "RTE-DIGEST" in failing
    moved = _resigned(_record(), groupId="legal")
    assert "RTE-DIGEST" in _failing(moved)
    assert _results(moved)["RTE-CHECKED"] is Result.ABSENT


def test_a_record_not_signed_by_the_gateway_it_names_fails() -> None:
    """[RTE-SIGNED]"""
    assert _failing(_resigned(_record(), DIRECTORY_KEY)) == ["RTE-SIGNED"]
    edited = {**_record(), "checked": [{"value": "100", "currency": "USD"}]}
    assert "RTE-SIGNED" in _failing(edited)
    other_gateway = _resigned(_record(), gateway="https://gateway.evil.example")
    assert _failing(other_gateway) == ["RTE-SIGNED"]


@pytest.mark.parametrize("broken", [{}, {"kind": "approval"}, {"checked": "skipped"}])
def test_a_document_that_is_not_a_routing_record_fails_and_nothing_else_passes(
    broken: dict[str, Any],
) -> None:
    """[RTE-SIGNED]"""
    doc = {**_record(), **broken} if broken else {}
    results = _results(doc)
    assert results["RTE-SIGNED"] is Result.FAIL
    assert all(results[r] is Result.ABSENT for r in ROUTING_RULES if r != "RTE-SIGNED")


def test_a_record_for_a_plan_the_gateway_must_refuse_fails_the_recomputation() -> None:
    """[RTE-CHECKED] [GW-NEGATIVE] A record routing branches of +25,000 and -24,900."""
    negative = plan_doc(branch("charge", "25000"), branch("refund", "-24900"))
    forged = _resigned(_record(), checked=[{"value": "100", "currency": "USD"}])
    results = _results(forged, negative)
    assert results["RTE-CHECKED"] is Result.FAIL
    assert results["RTE-DIGEST"] is Result.ABSENT
