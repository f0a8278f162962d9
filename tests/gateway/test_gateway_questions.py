"""Questions through the Human Gateway: one person at a time, and a signed Answer that fits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.people import (
    DECIDE_BY,
    KEYS,
    START,
    World,
    human,
    keyring,
    people_directory,
    person_card,
    question_doc,
    request,
)
from gateway.routes import GATEWAY_ID
from hatp.errors import AnswerInvalid, AskWithdrawn, ResponseRefused
from hatp.evidence import verify
from hatp.gateway import Person, question_digest
from hatp.model import Answer, PendingVote

TRAVEL = "human://acme.com/role/travel"


def question(address: str = TRAVEL, **members: Any) -> dict[str, Any]:
    """Which seat: a choose question for the travel role."""
    typed = {"options": ["window", "aisle"]}
    prompt = {"summary": "Window or aisle?"}
    return question_doc(
        "choose",
        typed,
        **{"questionId": "q-seat-1", "address": address, "prompt": prompt, **members},
    )


def travel() -> Any:
    """alice and bob hold the travel role; dana, whom the agent acts for, does too."""
    return people_directory(
        person_card("alice", roles=["travel"]),
        person_card("bob", roles=["travel"]),
        person_card("dana", roles=["travel"], availability={"status": "busy"}),
    )


@pytest.fixture
def world(store_url: str) -> Iterator[World]:
    made = World(store_url, travel())
    yield made
    made.close()


def test_a_question_is_asked_of_one_person_and_answered_with_a_signed_answer(
    world: World,
) -> None:
    """[GW-QUESTION-ROUTE] [GW-ANSWER] [GW-ASK-ONCE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_question(question())
        parsed = PendingVote.model_validate(pending)
        assert (parsed.txn_id, parsed.group_id) == ("q-seat-1", "question")
        assert parsed.plan_digest == question_digest(question())
        (notice,) = w.inbox("alice")
        assert notice.kind == "question"
        assert notice.payload == {
            "askId": parsed.ask_id,
            "questionId": "q-seat-1",
            "questionDigest": parsed.plan_digest,
        }
        assert (await w.gateway.ask_question(question()))["askId"] == parsed.ask_id
        await w.gateway.submit_answer(parsed.ask_id, human("alice"), "aisle")
        answer = await w.gateway.poll_question(parsed.ask_id)
        assert verify(answer, keyring()).issuer == GATEWAY_ID
        assert Answer.model_validate(answer).value == "aisle"
        assert answer["answeredBy"] == human("alice")

    asyncio.run(body(world))


def test_an_answer_that_does_not_fit_is_refused_and_the_question_stays_open(
    world: World,
) -> None:
    """[GW-ANSWER]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_question(question())
        with pytest.raises(AnswerInvalid):
            await w.gateway.submit_answer(pending["askId"], human("alice"), "middle")
        assert await w.gateway.poll_question(pending["askId"]) == pending
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_answer(pending["askId"], human("bob"), "aisle")
        assert info.value.reason == "NOT_ASKED"

    asyncio.run(body(world))


def test_a_declined_question_goes_to_the_next_person_and_the_answer_says_who_declined(
    world: World,
) -> None:
    """[GW-DECLINE] questions skip the authority and separation-of-duties rules."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_question(question())
        await w.gateway.decline(pending["askId"], human("alice"))
        await w.gateway.decline(pending["askId"], human("bob"))
        (notice,) = w.inbox("dana")  # the principal may answer a question about her trip
        await w.gateway.submit_answer(pending["askId"], human("dana"), "window")
        answer = await w.gateway.poll_question(pending["askId"])
        assert answer["declinedBy"] == [human("alice"), human("bob")]
        assert notice.human == answer["answeredBy"]

    asyncio.run(body(world))


def test_an_unanswered_question_is_withdrawn_at_its_deadline(world: World) -> None:
    """[GW-DEADLINE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_question(question())
        w.clock.advance((DECIDE_BY - START).total_seconds() + 1)
        with pytest.raises(AskWithdrawn):
            await w.gateway.poll_question(pending["askId"])
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_answer(pending["askId"], human("alice"), "aisle")
        assert info.value.reason == "CLOSED"
        assert (pending["askId"], human("alice")) in w.channel.withdrawn

    asyncio.run(body(world))


def test_a_question_nobody_may_answer_is_withdrawn_at_once(world: World) -> None:
    """[GW-FEW]"""

    async def body(w: World) -> None:
        with pytest.raises(AskWithdrawn, match="needs 1, only 0 eligible"):
            await w.gateway.ask_question(question("human://acme.com/role/nobody"))

    asyncio.run(body(world))


def test_votes_and_answers_go_to_asks_of_their_own_kind(world: World) -> None:
    """[GW-VOTE-SHAPE]"""

    async def body(w: World) -> None:
        q = await w.gateway.ask_question(question())
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.submit_vote(q["askId"], _vote_for(q, "alice"))
        assert info.value.reason == "WRONG_KIND"
        w.directory = people_directory(person_card("alice"), person_card("bob"))
        gw = w.restart()
        a = await gw.ask(request())
        with pytest.raises(ResponseRefused) as info:
            await gw.submit_answer(a["askId"], human("alice"), "aisle")
        assert info.value.reason == "WRONG_KIND"

    asyncio.run(body(world))


def test_a_scripted_person_answers_on_the_clock(store_url: str) -> None:
    """[GW-ANSWER] MemoryChannel's scripted people answer questions too."""
    people = {human("alice"): Person(decision="answer", answer="aisle", after_seconds=30)}
    w = World(store_url, travel(), people=people)

    async def body(w: World) -> None:
        pending = await w.gateway.ask_question(question())
        polling = asyncio.create_task(w.gateway.poll_question(pending["askId"], wait_seconds=60))
        while w.clock.sleepers < 2:
            await asyncio.sleep(0)
        w.clock.advance(30)
        answer = await polling
        assert answer["value"] == "aisle"

    try:
        asyncio.run(body(w))
    finally:
        w.close()


def _vote_for(pending: dict[str, Any], name: str) -> dict[str, Any]:
    from hatp.gateway import sign_vote

    payload = {k: pending[k] for k in ("askId", "txnId", "planDigest", "groupId")}
    return sign_vote(KEYS[name], {**payload, "human": human(name)}, "approve", START)
