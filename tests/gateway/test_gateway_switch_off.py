"""Planted votes, each refused by the gateway's check that names it, and only by it.

Each case is a vote built to break one rule of a person's response. With
every check on, each is refused with its reason; with one check switched
off (``hatp._checks.unsafe_switched_off``), exactly the cases that depend on
it are recorded, and every other is still refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from gateway.people import (
    DECIDE_BY,
    FINANCE,
    KEYS,
    START,
    World,
    hold_terms,
    people_directory,
    person_card,
    plan_doc,
    request,
)
from hatp._checks import unsafe_switched_off
from hatp.errors import ResponseRefused
from hatp.evidence import digest
from hatp.gateway import Notice, sign_vote

Vote = Callable[[Notice], dict[str, object]]


@dataclass(frozen=True)
class Case:
    """A planted vote on a 2-of-3 group: ``first`` is voted before it, honestly, by
    the person named (or nobody); ``make`` builds the planted vote from a notice."""

    voter: str  # whose notice the planted vote is built from
    make: Vote
    checks: frozenset[str]
    refusal: str
    first: str | None = None
    terms: bool = False  # asked with hold terms (holds-first)


def _signed(name: str, at: object = START, **payload: str) -> Vote:
    return lambda n: sign_vote(KEYS[name], {**n.payload, **payload}, "approve", at)  # type: ignore[arg-type]


def _without_terms(name: str) -> Vote:
    """``name``'s vote on the plan alone, leaving out the hold terms the ask is about."""

    def make(n: Notice) -> dict[str, object]:
        payload = {k: v for k, v in n.payload.items() if k != "termsDigest"}
        return sign_vote(KEYS[name], payload, "approve", START)

    return make


CASES: dict[str, Case] = {
    "vote-timed-after-the-deadline": Case(
        "alice",
        _signed("alice", DECIDE_BY + timedelta(seconds=1)),
        frozenset({"GW-VOTE-LATE"}),
        "LATE",
    ),
    "vote-for-another-plan": Case(
        "alice",
        _signed("alice", planDigest=digest({"another": "plan"})),
        frozenset({"GW-VOTE-BINDS"}),
        "MISMATCH",
    ),
    "vote-without-the-hold-terms": Case(
        "alice", _without_terms("alice"), frozenset({"GW-VOTE-BINDS"}), "MISMATCH", terms=True
    ),
    "same-person-votes-twice": Case(
        "alice",
        _signed("alice"),
        frozenset({"GW-VOTE-ONCE"}),
        "TWICE",
        first="alice",
    ),
    "vote-by-someone-not-asked": Case(
        "alice",
        _signed("carol", human="human://acme.com/carol"),
        frozenset({"GW-VOTE-ASKED"}),
        "NOT_ASKED",
    ),
    "vote-signed-by-another-persons-key": Case(
        "alice", _signed("bob"), frozenset({"GW-VOTE-SIGNED"}), "SIGNATURE"
    ),
}
CHECKS = sorted({check for case in CASES.values() for check in case.checks})


def _outcome(store_url: str, case: Case) -> str:
    """``recorded`` if the gateway took the planted vote, else the refusal's reason."""
    found = people_directory(person_card("alice"), person_card("bob"), person_card("carol"))
    world = World(store_url, found)

    async def body() -> str:
        asked = request(plan_doc(FINANCE + "?quorum=2-of-3"))
        if case.terms:
            asked = replace(asked, terms=hold_terms(asked))
        pending = await world.gateway.ask(asked)
        (notice,) = world.inbox(case.voter)
        if case.first is not None:
            (mine,) = world.inbox(case.first)
            await world.gateway.submit_vote(pending["askId"], _signed(case.first)(mine))
        try:
            await world.gateway.submit_vote(pending["askId"], case.make(notice))
        except ResponseRefused as exc:
            return exc.reason
        return "recorded"

    try:
        return asyncio.run(body())
    finally:
        world.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_planted_vote_is_refused_by_its_rule(store_url: str, name: str) -> None:
    """[GW-VOTE-LATE] [GW-VOTE-BINDS] [GW-VOTE-ONCE] [GW-VOTE-ASKED] [GW-VOTE-SIGNED]"""
    assert _outcome(store_url, CASES[name]) == CASES[name].refusal


@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_vote_check_off_records_exactly_its_cases(
    sqlite_url: Callable[[], str], check: str
) -> None:
    """[GW-VOTE-LATE] [GW-VOTE-BINDS] [GW-VOTE-ONCE] [GW-VOTE-ASKED] [GW-VOTE-SIGNED]"""
    with unsafe_switched_off(check):
        outcomes = {name: _outcome(sqlite_url(), case) for name, case in CASES.items()}
    for name, case in CASES.items():
        refused = outcomes[name] == case.refusal
        assert refused == (check not in case.checks), (name, outcomes[name])
        assert outcomes[name] in (case.refusal, "recorded"), (name, outcomes[name])
