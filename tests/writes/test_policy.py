"""The write policy: deterministic verdicts from configured rules, never a model."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.writes import CheckedPlan, Policy, PolicyDecision, TypeRule, Verdict, check_plan
from writes.inventory import offline_plan, registry

ALLOW, DENY, ASK = Verdict.ALLOW, Verdict.DENY, Verdict.REQUIRE_APPROVAL
SKUS = [f"SKU-{n}" for n in range(1, 6)]
ROWS = {sku: (1_000_000, "each") for sku in SKUS}


def adjust(sku: str, delta: int) -> tuple[str, dict[str, Any]]:
    return ("adjust_stock", {"sku": sku, "delta": delta, "reason": "count"})


def relabel(sku: str, unit: str = "box") -> tuple[str, dict[str, Any]]:
    return ("set_unit", {"sku": sku, "unit": unit})


def checked(*corrections: tuple[str, dict[str, Any]]) -> CheckedPlan:
    return check_plan(offline_plan("p", 1, list(corrections), ROWS), registry())


def test_a_type_with_no_rule_gets_the_default() -> None:
    plan = checked(adjust("SKU-1", 1))
    assert Policy().decide(plan) == PolicyDecision(
        ASK, ("adjust_stock: no rule, default require-approval",)
    )
    assert Policy(default=ALLOW).decide(plan).verdict is ALLOW
    assert Policy(default=DENY).decide(plan).verdict is DENY


@pytest.mark.parametrize(
    ("adjust_rule", "unit_rule", "verdict"),
    [
        (ALLOW, ALLOW, ALLOW),
        (ALLOW, ASK, ASK),
        (ASK, ALLOW, ASK),
        (ASK, ASK, ASK),
        (ALLOW, DENY, DENY),
        (DENY, ASK, DENY),
        (DENY, DENY, DENY),
    ],
)
def test_deny_beats_approval_which_beats_allow(
    adjust_rule: Verdict, unit_rule: Verdict, verdict: Verdict
) -> None:
    policy = Policy({"adjust_stock": TypeRule(adjust_rule), "set_unit": TypeRule(unit_rule)})
    decision = policy.decide(checked(adjust("SKU-1", 3), relabel("SKU-2")))
    assert decision.verdict is verdict
    assert decision.reasons  # only the reasons for the verdict reached
    assert all(verdict.value in why or "allow" in why for why in decision.reasons)


def test_the_reasons_are_those_of_the_verdict() -> None:
    policy = Policy({"adjust_stock": TypeRule(ALLOW), "set_unit": TypeRule(DENY)})
    assert policy.decide(checked(adjust("SKU-1", 3), relabel("SKU-2"))).reasons == (
        "set_unit: deny",
    )


@pytest.mark.parametrize(
    ("deltas", "verdict"),
    [([10], ALLOW), ([-10], ALLOW), ([11], ASK), ([-11], ASK), ([6, -5], ASK), ([5, 5], ALLOW)],
)
def test_allow_holds_up_to_the_threshold_summed_over_the_plan(
    deltas: list[int], verdict: Verdict
) -> None:
    policy = Policy({"adjust_stock": TypeRule(ALLOW, allow_up_to=10)})
    plan = checked(*(adjust("SKU-1", d) for d in deltas))
    decision = policy.decide(plan)
    assert decision.verdict is verdict
    if verdict is ASK:
        assert "above the 10 allowed without approval" in decision.reasons[0]


def test_a_decimal_threshold_compares_exactly() -> None:
    policy = Policy({"adjust_stock": TypeRule(ALLOW, allow_up_to=Decimal("2.5"))})
    assert policy.decide(checked(adjust("SKU-1", 2))).verdict is ALLOW
    assert policy.decide(checked(adjust("SKU-1", 3))).verdict is ASK


def test_allow_holds_up_to_the_types_max_records() -> None:
    policy = Policy({"set_unit": TypeRule(ALLOW, max_records=2)})
    assert policy.decide(checked(relabel("SKU-1"), relabel("SKU-2"))).verdict is ALLOW
    assert policy.decide(checked(relabel("SKU-1"), relabel("SKU-1", "kg"))).verdict is ALLOW
    three = policy.decide(checked(relabel("SKU-1"), relabel("SKU-2"), relabel("SKU-3")))
    assert three == PolicyDecision(
        ASK, ("set_unit: touches 3 records, above the 2 allowed without approval",)
    )


def test_the_policys_max_records_denies_a_plan_that_touches_too_many() -> None:
    policy = Policy({"set_unit": TypeRule(ALLOW)}, max_records=2)
    assert policy.decide(checked(relabel("SKU-1"), relabel("SKU-2"))).verdict is ALLOW
    decision = policy.decide(checked(*(relabel(s) for s in SKUS[:3])))
    assert decision == PolicyDecision(DENY, ("plan touches 3 records, more than 2",))


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: TypeRule(ALLOW, allow_up_to=2.5), TypeError),
        (lambda: TypeRule(ALLOW, allow_up_to=True), TypeError),
        (lambda: TypeRule(ALLOW, allow_up_to=-1), ValueError),
        (lambda: TypeRule(ALLOW, allow_up_to=Decimal("NaN")), ValueError),
        (lambda: TypeRule(ALLOW, max_records=1.0), TypeError),
        (lambda: TypeRule("allow"), TypeError),
        (lambda: Policy(default="allow"), TypeError),
        (lambda: Policy(max_records=-1), ValueError),
        (lambda: Policy({"set_unit": ALLOW}), TypeError),
    ],
)
def test_a_policy_is_refused_when_it_is_misconfigured(make: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        make()


def test_a_policy_cannot_be_changed_after_it_is_made() -> None:
    rules = {"set_unit": TypeRule(ALLOW)}
    policy = Policy(rules)
    rules["set_unit"] = TypeRule(DENY)
    assert policy.decide(checked(relabel("SKU-1"))).verdict is ALLOW


# --- properties ------------------------------------------------------------------------

verdicts = st.sampled_from(list(Verdict))
limits = st.none() | st.integers(0, 50)
rules = st.builds(TypeRule, verdicts, allow_up_to=limits, max_records=st.none() | st.integers(0, 5))
steps = st.lists(
    st.one_of(
        st.builds(adjust, st.sampled_from(SKUS), st.integers(-40, 40).filter(bool)),
        st.builds(relabel, st.sampled_from(SKUS), st.sampled_from(["box", "kg"])),
    ),
    min_size=1,
    max_size=6,
)


@given(
    corrections=steps,
    adjust_rule=st.none() | rules,
    unit_rule=st.none() | rules,
    default=verdicts,
    cap=st.none() | st.integers(0, 6),
)
def test_decide_is_deterministic_and_never_allows_above_a_threshold(
    corrections: list[tuple[str, dict[str, Any]]],
    adjust_rule: TypeRule | None,
    unit_rule: TypeRule | None,
    default: Verdict,
    cap: int | None,
) -> None:
    configured = {
        name: rule
        for name, rule in (("adjust_stock", adjust_rule), ("set_unit", unit_rule))
        if rule is not None
    }
    policy = Policy(configured, default=default, max_records=cap)
    plan = checked(*corrections)
    decision = policy.decide(plan)
    assert policy.decide(check_plan(plan.plan.to_wire(), registry())) == decision
    assert Policy(dict(configured), default=default, max_records=cap).decide(plan) == decision

    used = {name for name, _ in corrections}
    size = sum(abs(p["delta"]) for name, p in corrections if name == "adjust_stock")
    for name in used:
        rule = configured.get(name)
        verdict = default if rule is None else rule.verdict
        if verdict is DENY:
            assert decision.verdict is DENY
        if decision.verdict is ALLOW:
            assert verdict is ALLOW
            touched = {p["sku"] for n, p in corrections if n == name}
            if rule is not None and rule.max_records is not None:
                assert len(touched) <= rule.max_records
            if name == "adjust_stock" and rule is not None and rule.allow_up_to is not None:
                assert size <= rule.allow_up_to
            if name == "set_unit" and rule is not None and rule.allow_up_to is not None:
                assert sum(1 for n, _ in corrections if n == name) <= rule.allow_up_to
    if cap is not None and len(plan.records) > cap:
        assert decision.verdict is DENY
