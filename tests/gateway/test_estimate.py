"""The gateway's ChainEstimate: how long asking a group could take, nobody answering."""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.people import (
    DECIDE_BY,
    FINANCE,
    START,
    World,
    human,
    keyring,
    people_directory,
    person_card,
    plan_doc,
    request,
    run,
)
from gateway.routes import GATEWAY_ID
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.directory import Directory
from hatp.errors import AskInvalid
from hatp.evidence import digest, verify
from hatp.model import ChainEstimate, RoutingRecord
from hatp.store import AskStore


def link(
    name: str, starts: float, ends: float, *, sla: int = 900, of: str | None = None
) -> dict[str, Any]:
    return {
        "human": human(name),
        "sla": sla,
        "delegateOf": None if of is None else human(of),
        "startsAt": starts,
        "endsAt": ends,
    }


def chain_of(estimate: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(link) for link in estimate["chain"]]


def estimate_in(
    store_url: str, found: Directory, doc: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The estimate of group ``finance`` of ``doc`` from a gateway over ``found``; checks it is
    the gateway's signed word on that group of that plan and that nothing was stored or sent."""
    w = World(store_url, found)
    out: dict[str, Any] = {}

    async def body(w: World) -> None:
        out.update(await w.gateway.estimate(request(doc)))

    try:
        run(w, body)
        assert AskStore(w.stores[-1]).open_asks() == []
        assert w.channel.delivered == []
    finally:
        w.close()
    assert verify(out, keyring()).issuer == GATEWAY_ID
    parsed = ChainEstimate.model_validate(out)
    plan = request(doc).plan
    assert (parsed.txn_id, parsed.plan_digest, parsed.group_id, parsed.gateway) == (
        plan.txn_id,
        digest(plan.to_wire()),
        "finance",
        GATEWAY_ID,
    )
    assert parsed.time == "2026-12-02T09:00:00.000Z"
    return out


def test_one_approver_waits_their_sla(store_url: str) -> None:
    """[GW-ESTIMATE]"""
    estimate = estimate_in(store_url, people_directory(person_card("alice")))
    assert chain_of(estimate) == [link("alice", 0, 900)]
    assert estimate["worstSeconds"] == 900


def test_a_delegate_extends_the_chain_after_the_sla(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-ESCALATE] the delegate is asked when the approver's SLA runs out."""
    found = people_directory(
        person_card("alice", delegates=[human("carol")]),
        person_card("carol", roles=["travel"]),
    )
    estimate = estimate_in(store_url, found)
    assert chain_of(estimate) == [link("alice", 0, 900), link("carol", 900, 1800, of="alice")]
    assert estimate["worstSeconds"] == 1800


def test_a_clock_finer_than_the_wire_still_starts_the_chain_at_0(store_url: str) -> None:
    """[GW-ESTIMATE] a real clock reads microseconds; the ask's times are on the wire's
    millisecond grid, and the chain is measured on the same grid (never -0.001 s)."""
    found = people_directory(
        person_card("alice", delegates=[human("carol")]),
        person_card("carol", roles=["travel"]),
    )
    w = World(store_url, found, clock=ManualClock(START + timedelta(microseconds=123_456)))
    out: dict[str, Any] = {}

    async def body(w: World) -> None:
        out.update(await w.gateway.estimate(request()))

    try:
        run(w, body)
    finally:
        w.close()
    assert chain_of(out) == [link("alice", 0, 900), link("carol", 900, 1800, of="alice")]
    assert out["time"] == "2026-12-02T09:00:00.123Z"


def test_the_next_candidate_follows_the_delegates(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-ESCALATE] a delegate who misses their SLA too passes it on."""
    found = people_directory(
        person_card("alice", delegates=[human("carol")], sla={"decideSeconds": 600}),
        person_card("bob", sla={"decideSeconds": 1200}),
        person_card("carol", roles=["travel"], sla={"decideSeconds": 300}),
    )
    estimate = estimate_in(store_url, found)
    assert chain_of(estimate) == [
        link("alice", 0, 600, sla=600),
        link("carol", 600, 900, sla=300, of="alice"),
        link("bob", 900, 2100, sla=1200),
    ]
    assert estimate["worstSeconds"] == 2100


def test_a_quorum_asks_its_first_people_together(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-QUORUM] 2-of-3: two asked at once, the third when they miss."""
    found = people_directory(person_card("alice"), person_card("bob"), person_card("carol"))
    estimate = estimate_in(store_url, found, plan_doc(FINANCE + "?quorum=2-of-3"))
    assert chain_of(estimate) == [
        link("alice", 0, 900),
        link("bob", 0, 900),
        link("carol", 900, 1800),
    ]
    assert estimate["worstSeconds"] == 1800


def test_an_unreachable_candidate_is_passed_over(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-CHANNEL] nobody is waited for who cannot be reached."""
    found = people_directory(person_card("alice", channels=["sms"]), person_card("bob"))
    estimate = estimate_in(store_url, found)
    assert chain_of(estimate) == [link("bob", 0, 900)]


def test_excluded_people_are_not_in_the_chain(store_url: str) -> None:
    """[GW-ESTIMATE] [DIR-SOD] [DIR-AUTHORITY] the exclusions of a real ask apply, with the
    amount the gateway computes for the plan."""
    found = people_directory(
        person_card("alice", "900"),  # below the plan's 1,000 USD
        person_card("bob"),
        person_card("dana", "50000"),  # the agent acts on her behalf
    )
    estimate = estimate_in(store_url, found)
    assert chain_of(estimate) == [link("bob", 0, 900)]


def test_a_passkey_group_waits_only_for_people_with_a_passkey(store_url: str) -> None:
    """[GW-ESTIMATE] [DIR-PASSKEY]"""
    found = people_directory(person_card("alice", keys=[]), person_card("bob"))
    estimate = estimate_in(store_url, found, plan_doc(passkey_required=True))
    assert chain_of(estimate) == [link("bob", 0, 900)]


def test_nobody_eligible_is_an_empty_chain(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-FEW] the ask itself would be rejected at once."""
    estimate = estimate_in(store_url, people_directory(person_card("erin", "500")))
    assert (estimate["chain"], estimate["worstSeconds"]) == ([], 0)


def test_too_few_for_the_quorum_is_an_empty_chain(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-FEW]"""
    found = people_directory(person_card("alice"))
    estimate = estimate_in(store_url, found, plan_doc(FINANCE + "?quorum=2-of-3"))
    assert (estimate["chain"], estimate["worstSeconds"]) == ([], 0)


def test_the_deadline_cuts_the_chain_short(store_url: str) -> None:
    """[GW-ESTIMATE] [GW-DEADLINE] whoever is still asked at decideBy waits until then only."""
    found = people_directory(
        person_card("alice", delegates=[human("carol")]),
        person_card("bob"),
        person_card("carol", roles=["travel"]),
    )
    doc = plan_doc(decide_by=START + timedelta(seconds=1200.5))
    estimate = estimate_in(store_url, found, doc)
    assert chain_of(estimate) == [link("alice", 0, 900), link("carol", 900, 1200.5, of="alice")]
    assert estimate["worstSeconds"] == 1200.5


def test_an_estimate_for_another_plan_digest_is_refused(store_url: str) -> None:
    """[GW-ESTIMATE] what asking refuses, the estimate refuses."""
    w = World(store_url, people_directory(person_card("alice")))

    async def body(w: World) -> None:
        wrong = replace(request(), plan_digest=digest({"another": "plan"}))
        with pytest.raises(AskInvalid) as info:
            await w.gateway.estimate(wrong)
        assert info.value.data["reason"] == "DIGEST_MISMATCH"

    try:
        run(w, body)
    finally:
        w.close()


# -- the estimate and a real ask agree -------------------------------------

_MS = timedelta(milliseconds=1)

WORLDS: dict[str, tuple[list[dict[str, Any]], str, frozenset[str]]] = {
    "one approver": ([person_card("alice")], FINANCE, frozenset()),
    "delegates, then the next candidate": (
        [
            person_card("alice", delegates=[human("carol"), human("erin")]),
            person_card("bob", sla={"decideSeconds": 2000}),
            person_card("carol", roles=["travel"], sla={"decideSeconds": 700}),
            person_card("erin", "500", roles=["travel"]),  # a delegate who may not approve
        ],
        FINANCE,
        frozenset(),
    ),
    "quorum, one unreachable": (
        [
            person_card("alice", channels=["sms"]),
            person_card("bob"),
            person_card("carol", sla={"decideSeconds": 1800}),
            person_card("gina", delegates=[human("hank")], sla={"decideSeconds": 1500}),
            person_card("hank", roles=["travel"], sla={"decideSeconds": 3600}),
        ],
        FINANCE + "?quorum=2-of-4",
        frozenset(),
    ),
    "cut by the deadline": (
        [person_card("alice", sla={"decideSeconds": 4000}), person_card("bob")],
        FINANCE,
        frozenset(),
    ),
    "too few, with the GW-FEW check off": (
        [person_card("alice")],
        FINANCE + "?quorum=2-of-2",
        frozenset({"GW-FEW"}),
    ),
}


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_the_estimate_is_what_asking_does_when_nobody_answers(store_url: str, name: str) -> None:
    """[GW-ESTIMATE] every person the real ask reaches, nobody answering, is in the chain,
    asked and withdrawn at the seconds the chain says."""
    cards, address, off = WORLDS[name]
    with ExitStack() as stack:
        stack.enter_context(unsafe_switched_off(*off))
        w = World(store_url, people_directory(*cards))
        stack.callback(w.close)
        seen: list[dict[str, Any]] = []

        async def body(w: World) -> None:
            req = request(plan_doc(address))
            estimate = await w.gateway.estimate(req)
            pending = await w.gateway.ask(req)
            seen.extend(await _watch(w, pending["askId"]))
            assert chain_of(estimate) == seen
            assert estimate["worstSeconds"] == max((s["endsAt"] for s in seen), default=0)

        run(w, body)
    if name == "too few, with the GW-FEW check off":
        assert [s["human"] for s in seen] == [human("alice")]


async def _watch(w: World, ask_id: str) -> list[dict[str, Any]]:
    """Drive the real ask through time, nobody answering; return who was asked, in order,
    with when their wait started and ended (at most the deadline), in seconds after START."""
    starts: dict[str, datetime] = {}
    ends: dict[str, datetime] = {}
    respond_by: dict[str, datetime] = {}

    def look() -> None:
        for notice in w.channel.delivered:
            if notice.human not in starts:
                starts[notice.human] = w.clock.now()
                respond_by[notice.human] = notice.respond_by
        for _, who in w.channel.withdrawn:
            ends.setdefault(who, min(w.clock.now(), DECIDE_BY))

    look()
    while (outcome := await w.gateway.poll(ask_id))["kind"] == "pending":
        due = min([*(respond_by[h] for h in starts if h not in ends), DECIDE_BY + _MS])
        w.clock.advance((due - w.clock.now()).total_seconds())
        await w.gateway.tick()
        look()
    record = RoutingRecord.model_validate(outcome["routing"])
    delegate_of = {
        h.id: match.group(1)
        for h in record.humans
        if h.detail and (match := re.match(r"delegate of ([^;]+)", h.detail))
    }
    cards = {c.id: c for c in w.directory.cards()}
    return [
        {
            "human": who,
            "sla": cards[who].sla.decide_seconds,
            "delegateOf": delegate_of.get(who),
            "startsAt": (starts[who] - START).total_seconds(),
            "endsAt": (ends[who] - START).total_seconds(),
        }
        for who in starts
    ]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"worstSeconds": 1799}, "CHAIN_WORST"),
        ({"chain": []}, "CHAIN_WORST"),
        ({"chain": [link("alice", 900, 0)], "worstSeconds": 0}, "CHAIN_ORDER"),
        ({"worstSeconds": float("inf")}, "finite_number"),
    ],
)
def test_a_chain_estimate_whose_numbers_do_not_add_up_is_refused(
    change: dict[str, Any], error: str
) -> None:
    """[GW-ESTIMATE] worstSeconds is the latest endsAt; nobody's wait ends before it starts."""
    body = {
        "hatpVersion": "0.1",
        "kind": "chain-estimate",
        "txnId": "txn-gw-0001",
        "planDigest": digest({"a": "plan"}),
        "groupId": "finance",
        "gateway": GATEWAY_ID,
        "chain": [link("alice", 0, 900), link("carol", 900, 1800, of="alice")],
        "worstSeconds": 1800,
        "time": "2026-12-02T09:00:00.000Z",
        "signature": {"alg": "Ed25519", "kid": "k", "sig": "s"},
    }
    ChainEstimate.model_validate(body)
    with pytest.raises(ValidationError) as info:
        ChainEstimate.model_validate({**body, **change})
    assert info.value.errors()[0]["type"] == error
