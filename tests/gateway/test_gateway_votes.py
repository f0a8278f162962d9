"""What the gateway refuses of a person's vote, and scripted people's genuine votes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from gateway.people import (
    DECIDE_BY,
    KEYS,
    START,
    World,
    human,
    people_directory,
    person_card,
    request,
    vote,
)
from gateway.routes import GATEWAY_KEY
from hatp.errors import AskUnknown, ResponseRefused
from hatp.evidence import sign
from hatp.gateway import MemoryChannel, Person, sign_vote


@pytest.fixture
def world(store_url: str) -> Iterator[World]:
    made = World(store_url, people_directory(person_card("alice"), person_card("bob")))
    yield made
    made.close()


async def _refusal(w: World, ask_id: str, bad: Any) -> str:
    with pytest.raises(ResponseRefused) as info:
        await w.gateway.submit_vote(ask_id, bad)
    assert (await w.gateway.poll(ask_id))["kind"] == "pending", "nothing is recorded"
    return info.value.reason


def test_a_vote_that_is_not_a_human_vote_is_refused(world: World) -> None:
    """[GW-VOTE-SHAPE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        good = vote(w.inbox("alice")[0])
        unsigned = {k: v for k, v in good.items() if k != "signature"}
        assert await _refusal(w, pending["askId"], unsigned) == "SHAPE"
        assert await _refusal(w, pending["askId"], {**good, "decision": "maybe"}) == "SHAPE"
        assert await _refusal(w, pending["askId"], ["not", "a", "vote"]) == "SHAPE"

    asyncio.run(body(world))


def test_a_vote_signed_by_the_gateway_or_tampered_with_is_refused(world: World) -> None:
    """[GW-VOTE-SIGNED]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        good = vote(w.inbox("alice")[0])
        by_gateway = sign({k: v for k, v in good.items() if k != "signature"}, GATEWAY_KEY)
        assert await _refusal(w, pending["askId"], by_gateway) == "SIGNATURE"
        flipped = {**vote(w.inbox("alice")[0], "reject"), "decision": "approve"}
        assert await _refusal(w, pending["askId"], flipped) == "SIGNATURE"

    asyncio.run(body(world))


def test_a_vote_after_the_deadline_is_refused_even_before_the_gateway_acted(world: World) -> None:
    """[GW-VOTE-LATE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        notice = w.inbox("alice")[0]
        w.clock.advance((DECIDE_BY - START).total_seconds() + 1)
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_vote(pending["askId"], vote(notice, at=START))
        assert info.value.reason == "LATE"

    asyncio.run(body(world))


def test_nothing_is_recorded_on_a_decided_ask(world: World) -> None:
    """[GW-VOTE-OPEN]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        notice = w.inbox("alice")[0]
        await w.gateway.submit_vote(pending["askId"], vote(notice))
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_vote(pending["askId"], vote(notice, "reject"))
        assert info.value.reason == "CLOSED"
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.decline(pending["askId"], human("alice"))
        assert info.value.reason == "CLOSED"
        assert (await w.gateway.poll(pending["askId"]))["decision"] == "approve"

    asyncio.run(body(world))


def test_someone_not_asked_cannot_decline(world: World) -> None:
    """[GW-VOTE-ASKED]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.decline(pending["askId"], human("bob"))
        assert info.value.reason == "NOT_ASKED"

    asyncio.run(body(world))


def test_an_unknown_ask_is_refused_by_name(world: World) -> None:
    async def body(w: World) -> None:
        with pytest.raises(AskUnknown):
            await w.gateway.poll("ask-doesnotexist")
        with pytest.raises(AskUnknown):
            await w.gateway.withdraw("ask-doesnotexist", "x")

    asyncio.run(body(world))


def test_scripted_people_vote_with_their_own_keys_on_the_clock(store_url: str) -> None:
    """MemoryChannel's scripted people: the demo's --auto mode and the coordinator tests."""
    people = {
        human("alice"): Person(KEYS["alice"], "decline"),
        human("bob"): Person(KEYS["bob"], "approve", after_seconds=120),
    }
    w = World(store_url, people_directory(person_card("alice"), person_card("bob")), people=people)

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        polling = asyncio.create_task(w.gateway.poll(pending["askId"], wait_seconds=600))
        while not w.inbox("bob") or w.clock.sleepers < 2:
            await asyncio.sleep(0)
        w.clock.advance(120)
        approval = await polling
        assert approval["approvers"] == [human("bob")]
        assert approval["votes"][0]["time"] == "2026-12-02T09:02:00.000Z"
        await w.channel.close()

    try:
        asyncio.run(body(w))
    finally:
        w.close()


def test_a_scripted_person_who_never_answers_is_escalated_past() -> None:
    """[GW-ESCALATE] ``never``: no response at all."""
    assert Person(decision="never").key is None
    with pytest.raises(ValueError, match="needs a key"):
        Person(decision="approve")
    with pytest.raises(ValueError, match="needs an answer"):
        Person(decision="answer")
    with pytest.raises(ValueError, match="clock"):
        MemoryChannel(people={human("bob"): Person(decision="never")})


def test_sign_vote_signs_exactly_the_payload_and_the_decision() -> None:
    payload = {
        "askId": "ask-12345678",
        "txnId": "t",
        "planDigest": "d",
        "groupId": "g",
        "human": human("bob"),
    }
    signed = sign_vote(KEYS["bob"], payload, "reject", START + timedelta(seconds=1))
    assert signed["decision"] == "reject"
    assert signed["time"] == "2026-12-02T09:00:01.000Z"
    assert signed["signature"]["kid"] == KEYS["bob"].kid
    with pytest.raises(ValueError, match="payload"):
        sign_vote(KEYS["bob"], {**payload, "decision": "approve"}, "reject", START)
    with pytest.raises(ValueError, match="approve or reject"):
        sign_vote(KEYS["bob"], payload, "maybe", START)  # type: ignore[arg-type]
