"""Planted violations of the routing rules: each person is excluded by one rule, and by it alone.

Each case plants one person who breaks exactly one rule beside one who
breaks none. With every check on, that person is excluded by the rule; with
the rule's check switched off (``hatp._checks.unsafe_switched_off``) they
become a candidate, and every other planted person is still excluded by
their own rule: proof that the named check is what excludes them.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from directory.people import directory, signed
from hatp._checks import unsafe_switched_off
from hatp.directory import RULES, Resolution
from hatp.model import Requirement

#: check id -> (the person planted to break it, the rule recorded)
CASES: dict[str, tuple[str, str]] = {
    "DIR-SKILL": ("no-sox", "skill"),
    "DIR-SOD": ("requester", "separation-of-duties"),
    "DIR-AUTHORITY": ("low-limit", "authority"),
    "DIR-PASSKEY": ("no-passkey", "passkey"),
    "DIR-OFFLINE": ("gone", "offline"),
    "DIR-CAPACITY": ("swamped", "capacity"),
}

PLANTED = directory(
    signed("honest"),
    signed("no-sox", skills=["travel-policy"]),
    signed("requester"),
    signed("low-limit", "500"),
    signed("no-passkey", keys=[]),
    signed("gone", availability={"status": "offline"}),
    signed("swamped", capacity={"maxOpen": 4, "open": 4}),
)


def _resolve() -> Resolution:
    return PLANTED.resolve(
        "human://acme.com/pool/security-leads?skill=sox",
        Requirement(action="approve.spend"),
        amounts={"USD": Decimal("2500")},
        on_behalf_of="human://acme.com/requester",
        passkey_required=True,
    )


def _by_name(resolution: Resolution) -> tuple[list[str], dict[str, str]]:
    candidates = [c.id.rsplit("/", 1)[1] for c in resolution.candidates]
    return candidates, {e.id.rsplit("/", 1)[1]: e.rule.value for e in resolution.excluded}


def test_with_every_check_on_each_planted_person_is_excluded_by_their_rule() -> None:
    """[DIR-SKILL] [DIR-SOD] [DIR-AUTHORITY] [DIR-PASSKEY] [DIR-OFFLINE] [DIR-CAPACITY]"""
    candidates, excluded = _by_name(_resolve())
    assert candidates == ["honest"]
    assert excluded == dict(CASES.values())
    assert {check for _, check, _ in RULES} == set(CASES)


@pytest.mark.parametrize("check", sorted(CASES))
def test_switching_a_check_off_makes_exactly_its_person_a_candidate(check: str) -> None:
    """[DIR-SKILL] [DIR-SOD] [DIR-AUTHORITY] [DIR-PASSKEY] [DIR-OFFLINE] [DIR-CAPACITY]"""
    person, _ = CASES[check]
    with unsafe_switched_off(check):
        candidates, excluded = _by_name(_resolve())
    assert sorted(candidates) == sorted(["honest", person])
    assert excluded == {name: rule for other, (name, rule) in CASES.items() if other != check}
