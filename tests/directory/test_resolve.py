"""Resolving an address: ranked candidates, and everyone passed over with the rule why."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from directory.people import PASSED_OVER_AT_25000, directory, signed
from hatp.directory import Directory, ExclusionRule, Resolution
from hatp.errors import AddressInvalid
from hatp.model import Requirement

SPEND = Requirement(action="approve.spend")
FINANCE = "human://acme.com/role/finance-approver"


def _resolve(found: Directory, address: str = FINANCE, **options: Any) -> Resolution:
    options.setdefault("amounts", {"USD": Decimal("1000")})
    options.setdefault("on_behalf_of", "human://acme.com/zed")
    return found.resolve(address, SPEND, **options)


def _excluded(resolution: Resolution) -> list[tuple[str, str, str]]:
    return [(e.id.rsplit("/", 1)[1], e.rule.value, e.detail) for e in resolution.excluded]


def test_the_25000_request_from_the_post_has_no_candidates_and_three_exclusions() -> None:
    """[DIR-AUTHORITY] [DIR-SOD] Alice's limit is too low, Dana is who the agent acts
    for, Erin's limit is too low: nobody is eligible, and the record says why for each."""
    found = directory(signed("alice", "10000"), signed("dana", "50000"), signed("erin", "500"))
    resolution = _resolve(
        found, amounts={"USD": Decimal("25000")}, on_behalf_of="human://acme.com/dana"
    )
    assert resolution.candidates == ()
    assert not resolution.enough
    assert [e.to_json() for e in resolution.excluded] == PASSED_OVER_AT_25000


def test_authority_is_checked_in_each_currency_and_never_converted() -> None:
    """[DIR-AUTHORITY]"""
    eur = {"action": "approve.spend", "maxAmount": {"value": "1000000", "currency": "EUR"}}
    both = [eur, {"action": "approve.spend", "maxAmount": {"value": "5000", "currency": "USD"}}]
    other = [{"action": "approve.wire", "maxAmount": {"value": "1000000", "currency": "USD"}}]
    found = directory(
        signed("bob", authority=[eur]),
        signed("carol", authority=both),
        signed("dave", authority=other),
        signed("eve", "1000"),
    )
    resolution = _resolve(found, amounts={"USD": Decimal("1000"), "EUR": Decimal("200")})
    assert resolution.candidate_ids == ["human://acme.com/carol"]
    assert _excluded(resolution) == [
        ("bob", "authority", "no limit in USD for approve.spend"),
        ("dave", "authority", "no authority for approve.spend"),
        ("eve", "authority", "no limit in EUR for approve.spend"),
    ]


def test_a_limit_equal_to_the_amount_covers_it() -> None:
    """[DIR-AUTHORITY]"""
    found = directory(signed("bob", "1020.00"))
    assert _resolve(found, amounts={"USD": Decimal("1020")}).candidate_ids == [
        "human://acme.com/bob"
    ]
    assert _resolve(found, amounts={"USD": Decimal("1020.01")}).candidates == ()


def test_the_initiators_principal_cannot_approve() -> None:
    """[DIR-SOD]"""
    found = directory(signed("bob"), signed("carol"))
    resolution = _resolve(found, initiator_principal="human://acme.com/carol")
    assert resolution.candidate_ids == ["human://acme.com/bob"]
    assert _excluded(resolution) == [
        ("carol", "separation-of-duties", "they are the initiator's principal")
    ]


def test_a_full_queue_is_excluded_by_capacity() -> None:
    """[DIR-CAPACITY]"""
    found = directory(signed("bob", capacity={"maxOpen": 3, "open": 3}), signed("carol"))
    resolution = _resolve(found)
    assert _excluded(resolution) == [("bob", "capacity", "open 3 >= maxOpen 3")]
    assert resolution.candidate_ids == ["human://acme.com/carol"]


def test_an_offline_person_is_excluded() -> None:
    """[DIR-OFFLINE]"""
    found = directory(signed("bob", availability={"status": "offline"}), signed("carol"))
    assert _excluded(_resolve(found)) == [("bob", "offline", "status offline")]


def test_a_group_requiring_passkeys_asks_only_people_with_one() -> None:
    """[DIR-PASSKEY]"""
    found = directory(signed("bob", keys=[]), signed("carol"))
    assert _resolve(found).candidate_ids == ["human://acme.com/bob", "human://acme.com/carol"]
    resolution = _resolve(found, passkey_required=True)
    assert resolution.candidate_ids == ["human://acme.com/carol"]
    assert [(e.rule, e.id) for e in resolution.excluded] == [
        (ExclusionRule.PASSKEY, "human://acme.com/bob")
    ]


def test_a_pool_is_filtered_by_skill() -> None:
    """[DIR-SKILL] Pool membership is the card's ``pools`` list."""
    found = directory(
        signed("bob", skills=["travel-policy"]),
        signed("carol"),
        signed("dan", pools=["other"]),
    )
    resolution = _resolve(found, "human://acme.com/pool/security-leads?skill=sox")
    assert resolution.candidate_ids == ["human://acme.com/carol"]
    assert _excluded(resolution) == [("bob", "skill", "no skill sox")]
    no_skill = _resolve(found, "human://acme.com/pool/security-leads")
    assert no_skill.candidate_ids == ["human://acme.com/bob", "human://acme.com/carol"]


def test_candidates_are_ranked_by_status_then_load_then_sla_then_id() -> None:
    """[DIR-RANK]"""
    found = directory(
        signed("away", availability={"status": "away"}, capacity={"open": 0}),
        signed("busy", availability={"status": "busy"}, capacity={"open": 0}),
        signed("heavy", capacity={"maxOpen": 10, "open": 8}),
        signed("light", capacity={"maxOpen": 10, "open": 1}),
        signed("slow", capacity={"maxOpen": 10, "open": 1}, sla={"decideSeconds": 7200}),
        signed("light-twin", capacity={"maxOpen": 20, "open": 2}),
    )
    resolution = _resolve(found, deadline_seconds=3600)
    assert [c.id.rsplit("/", 1)[1] for c in resolution.candidates] == [
        "light",
        "light-twin",
        "slow",
        "heavy",
        "busy",
        "away",
    ]
    assert [c.sla_fits for c in resolution.candidates][:3] == [True, True, False]
    # Without a deadline every SLA fits, so the tie between light and slow goes by id.
    untimed = _resolve(found)
    assert [c.id.rsplit("/", 1)[1] for c in untimed.candidates][:3] == [
        "light",
        "light-twin",
        "slow",
    ]


def test_quorum_needs_that_many_distinct_candidates() -> None:
    """[DIR-QUORUM]"""
    found = directory(signed("bob"), signed("carol"), signed("dana", "10"))
    two = _resolve(found, FINANCE + "?quorum=2-of-3")
    assert (two.needed, two.enough, len(two.candidates)) == (2, True, 2)
    three = _resolve(found, FINANCE + "?quorum=3-of-3")
    assert (three.needed, three.enough) == (3, False)
    one = _resolve(found)
    assert (one.needed, one.enough) == (1, True)


def test_a_person_address_matches_that_person_only_and_only_in_their_org() -> None:
    """[DIR-RANK] [ADDR-FORM]"""
    found = directory(signed("bob"), signed("carol"))
    assert _resolve(found, "human://acme.com/bob").candidate_ids == ["human://acme.com/bob"]
    nobody = _resolve(found, "human://other.com/bob")
    assert (nobody.candidates, nobody.excluded, nobody.enough) == ((), (), False)
    assert _resolve(found, "human://other.com/role/finance-approver").candidates == ()


def test_an_agent_address_or_a_malformed_one_does_not_resolve() -> None:
    """[ADDR-FORM]"""
    found = directory(signed("bob"))
    with pytest.raises(AddressInvalid) as caught:
        _resolve(found, "agent://acme.com/travel-bot")
    assert caught.value.reason == "NOT_HUMAN"
    with pytest.raises(AddressInvalid) as caught:
        _resolve(found, FINANCE + "?quorum=2-of-1")
    assert caught.value.reason == "QUORUM"
