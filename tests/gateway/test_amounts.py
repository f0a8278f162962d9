"""The gateway works the amount out itself: totals per currency, plus tolerance."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.routes import branch, plan_doc, unvalidated
from hatp._checks import unsafe_switched_off
from hatp.errors import AskInvalid, PlanInvalid, RequirementBelowTotal
from hatp.gateway import RequiredAmount, required_amounts


def test_1000_usd_with_2_percent_tolerance_needs_an_approver_for_1020() -> None:
    """[GW-AMOUNT]"""
    required = required_amounts(plan_doc(branch("charge", "1000"), tolerance="0.02"), "finance")
    assert required == {"USD": RequiredAmount(Decimal("1000"), Decimal("0.02"), Decimal("1020"))}
    assert str(required["USD"].with_tolerance) == "1020.00"


def test_each_payment_is_counted_once_and_currencies_are_never_converted() -> None:
    """[GW-AMOUNT] The charge settles the seat and the room; the EUR branch stays EUR."""
    doc = plan_doc(
        branch("seat", "420.00"),
        branch("room", "310.00"),
        branch("charge", "730.00", settles=("seat", "room")),
        branch("taxi", "40", currency="EUR"),
        branch("calendar", None),
        tolerance="0.1",
    )
    required = required_amounts(doc, "finance")
    assert {c: (str(r.total), str(r.with_tolerance)) for c, r in required.items()} == {
        "EUR": ("40", "44.0"),
        "USD": ("730.00", "803.000"),
    }


def test_an_amount_finer_than_a_cent_is_rounded_up_to_the_next_cent() -> None:
    """[GW-AMOUNT]"""
    required = required_amounts(plan_doc(branch("fee", "0.10"), tolerance="0.333"), "finance")
    assert str(required["USD"].with_tolerance) == "0.14"
    assert (
        str(required_amounts(plan_doc(branch("fee", "0.001")), "finance")["USD"].with_tolerance)
        == "0.01"
    )


def test_a_plan_that_spends_nothing_requires_nothing() -> None:
    """[GW-AMOUNT]"""
    assert required_amounts(plan_doc(branch("calendar", None)), "finance") == {}


def test_branches_of_25000_and_minus_24900_are_refused_by_the_gateway_from_a_raw_doc() -> None:
    """[GW-NEGATIVE] The gateway's own check fires before the plan is parsed."""
    doc = plan_doc(branch("charge", "25000"), branch("refund", "-24900"))
    with pytest.raises(PlanInvalid) as caught:
        required_amounts(doc, "finance")
    assert caught.value.reason == "NEGATIVE_AMOUNT"
    assert caught.value.data["rule"] == "GW-NEGATIVE"
    assert caught.value.data["where"] == "/branches/1/amount/value"


def test_a_plan_object_that_skipped_validation_is_still_refused() -> None:
    """[GW-NEGATIVE]"""
    plan = unvalidated(plan_doc(branch("charge", "25000"), branch("refund", "1")), refund="-24900")
    with pytest.raises(PlanInvalid) as caught:
        required_amounts(plan, "finance")
    assert (caught.value.reason, caught.value.data["rule"]) == ("NEGATIVE_AMOUNT", "GW-NEGATIVE")
    with unsafe_switched_off("GW-NEGATIVE"):
        assert required_amounts(plan, "finance")["USD"].with_tolerance == Decimal("100")


def test_an_unvalidated_plan_is_refused_by_its_wire_form_when_a_member_is_mistyped() -> None:
    """[GW-NEGATIVE] The check reads a plan object's own fields; one that is not of its
    type (here an amount's value given as a Decimal) sends it to the whole wire form,
    which still names the negative tolerance and where it is."""
    plan = unvalidated(plan_doc(branch("charge", "25000")), tolerance="-0.5")
    with pytest.raises(PlanInvalid) as caught:
        required_amounts(plan, "finance")
    assert caught.value.data["where"] == "/approvals/0/requirement/tolerance"
    charge = plan.branches[0]
    assert charge.amount is not None
    odd = charge.model_copy(
        update={"amount": charge.amount.model_copy(update={"value": Decimal("-24900")})}
    )
    mistyped = plan.model_copy(update={"branches": [odd]})
    with pytest.warns(UserWarning), pytest.raises(PlanInvalid) as caught:
        required_amounts(mistyped, "finance")
    assert caught.value.data["where"] == "/branches/0/amount/value"


def test_a_tolerance_of_minus_99_percent_is_refused() -> None:
    """[GW-NEGATIVE]"""
    with pytest.raises(PlanInvalid) as caught:
        required_amounts(plan_doc(branch("charge", "25000"), tolerance="-0.99"), "finance")
    assert caught.value.reason == "NEGATIVE_TOLERANCE"
    assert caught.value.data["where"] == "/approvals/0/requirement/tolerance"


def test_a_requirement_below_the_total_is_refused() -> None:
    """[GW-BELOW-TOTAL]"""
    doc = plan_doc(branch("charge", "25000"), declared={"value": "100", "currency": "USD"})
    with pytest.raises(RequirementBelowTotal) as caught:
        required_amounts(doc, "finance")
    assert caught.value.code == "REQUIREMENT_BELOW_TOTAL"
    assert caught.value.data == {
        "declared": {"value": "100", "currency": "USD"},
        "required": [{"value": "25000", "currency": "USD"}],
    }
    with unsafe_switched_off("GW-BELOW-TOTAL"):
        assert required_amounts(doc, "finance")["USD"].with_tolerance == Decimal("25000")


def test_a_requirement_must_cover_the_tolerance_too() -> None:
    """[GW-BELOW-TOTAL]"""
    short = plan_doc(
        branch("charge", "1000"), tolerance="0.02", declared={"value": "1000", "currency": "USD"}
    )
    with pytest.raises(RequirementBelowTotal):
        required_amounts(short, "finance")
    enough = plan_doc(
        branch("charge", "1000"), tolerance="0.02", declared={"value": "1020", "currency": "USD"}
    )
    assert required_amounts(enough, "finance")["USD"].with_tolerance == Decimal("1020")


def test_a_requirement_in_a_currency_the_plan_does_not_spend_is_refused() -> None:
    """[GW-BELOW-TOTAL] Currencies are never converted."""
    doc = plan_doc(branch("charge", "2000"), declared={"value": "1000000", "currency": "EUR"})
    with pytest.raises(RequirementBelowTotal) as caught:
        required_amounts(doc, "finance")
    assert caught.value.data["required"] == [{"value": "2000", "currency": "USD"}]


def test_an_unknown_group_is_refused_as_an_invalid_ask() -> None:
    with pytest.raises(AskInvalid) as caught:
        required_amounts(plan_doc(branch("charge", "1")), "legal")
    assert caught.value.data["reason"] == "UNKNOWN_GROUP"
    assert "finance" in caught.value.message
