"""Planted violations of the gateway's amount rules, each refused by its rule.

Each case is a plan built to break one rule, with every check its refusal
depends on. With every check on, each is refused as it names; with one
check switched off (``hatp._checks.unsafe_switched_off``), exactly the
cases that depend on it get through, and every other is still refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from directory.people import directory, signed
from gateway.routes import branch, plan_doc, route_plan, unvalidated
from hatp._checks import unsafe_switched_off
from hatp.directory import Directory
from hatp.errors import PlanInvalid, RequirementBelowTotal
from hatp.model import Plan


@dataclass(frozen=True)
class Case:
    """A plan built to break one rule, and every check its refusal depends on."""

    make: Callable[[], tuple[dict[str, Any] | Plan, Directory]]
    checks: frozenset[str]
    refusal: str
    #: What the gateway does with each of ``checks`` off: the harm it prevents (someone
    #: who may not approve the amount is asked), or another rule's refusal behind it.
    through: Mapping[str, str]


ERIN = "routed to ['human://acme.com/erin']"
BOB = "routed to ['human://acme.com/bob']"


def _planted() -> dict[str, Case]:
    low = directory(signed("erin", "500"))
    usd_only = directory(signed("bob", "10000"))
    return {
        "requirement-below-total": Case(
            lambda: (
                plan_doc(branch("charge", "25000"), declared={"value": "100", "currency": "USD"}),
                low,
            ),
            frozenset({"GW-BELOW-TOTAL", "GW-AMOUNT"}),
            "REQUIREMENT_BELOW_TOTAL",
            {
                "GW-AMOUNT": ERIN,
                "GW-BELOW-TOTAL": "excluded authority: limit 500 USD < 25000 USD",
            },
        ),
        "branches-25000-and-minus-24900": Case(
            lambda: (
                unvalidated(
                    plan_doc(branch("charge", "25000"), branch("refund", "1")), refund="-24900"
                ),
                low,
            ),
            frozenset({"GW-NEGATIVE"}),
            "PLAN_INVALID NEGATIVE_AMOUNT",
            {"GW-NEGATIVE": ERIN},  # 25,000 - 24,900: erin's 500 USD limit covers 100
        ),
        "tolerance-minus-99-percent": Case(
            lambda: (unvalidated(plan_doc(branch("charge", "25000")), tolerance="-0.99"), low),
            frozenset({"GW-NEGATIVE"}),
            "PLAN_INVALID NEGATIVE_TOLERANCE",
            {"GW-NEGATIVE": ERIN},  # 1 % of 25,000 is 250 USD
        ),
        "authority-too-low": Case(
            lambda: (plan_doc(branch("charge", "25000")), low),
            frozenset({"GW-AMOUNT", "DIR-AUTHORITY"}),
            "excluded authority: limit 500 USD < 25000 USD",
            {"GW-AMOUNT": ERIN, "DIR-AUTHORITY": ERIN},
        ),
        "currency-mismatch": Case(
            lambda: (plan_doc(branch("charge", "2000", currency="EUR")), usd_only),
            frozenset({"GW-AMOUNT", "DIR-AUTHORITY"}),
            "excluded authority: no limit in EUR for approve.spend",
            {"GW-AMOUNT": BOB, "DIR-AUTHORITY": BOB},
        ),
    }


CASES = _planted()
CHECKS = sorted({check for case in CASES.values() for check in case.checks})


def _outcome(case: Case) -> str:
    """How the gateway answers: the refusal, or ``routed to …`` when someone may approve."""
    plan, found = case.make()
    try:
        routed = route_plan(plan, found)
    except (PlanInvalid, RequirementBelowTotal) as exc:
        reason = exc.data.get("reason")
        return f"{exc.code} {reason}" if isinstance(exc, PlanInvalid) else exc.code
    if routed.resolution.candidates:
        return f"routed to {routed.resolution.candidate_ids}"
    (exclusion,) = routed.resolution.excluded
    return f"excluded {exclusion.rule.value}: {exclusion.detail}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_planted_violation_is_refused_by_its_rule(name: str) -> None:
    """[GW-BELOW-TOTAL] [GW-NEGATIVE] [GW-AMOUNT] [DIR-AUTHORITY]"""
    assert _outcome(CASES[name]) == CASES[name].refusal


@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_check_off_lets_by_exactly_the_cases_that_depend_on_it(check: str) -> None:
    """[GW-BELOW-TOTAL] [GW-NEGATIVE] [GW-AMOUNT] [DIR-AUTHORITY]"""
    with unsafe_switched_off(check):
        outcomes = {name: _outcome(case) for name, case in CASES.items()}
    for name, case in CASES.items():
        wanted = case.through[check] if check in case.checks else case.refusal
        assert outcomes[name] == wanted, (name, outcomes[name])
