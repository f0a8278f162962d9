"""The coordinator moves an ask's deadline earlier (its approveBy); never later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from gateway.people import (
    DECIDE_BY,
    START,
    World,
    human,
    keyring,
    people_directory,
    person_card,
    question_doc,
    request,
    run,
    until,
    vote,
)
from gateway.routes import GATEWAY_ID
from gateway.test_gateway_calls import call_request
from hatp._checks import unsafe_switched_off
from hatp.clock import format_time
from hatp.errors import AskUnknown, ResponseRefused
from hatp.evidence import verify
from hatp.model import Approval, CallApproval, PendingVote
from hatp.store import AskStore

#: The approval deadline the coordinator works out from the holds: 20 minutes in.
APPROVE_BY = START + timedelta(minutes=20)
_MS = timedelta(milliseconds=1)


@pytest.fixture
def world(store_url: str) -> Iterator[World]:
    made = World(store_url, people_directory(person_card("alice"), person_card("bob")))
    yield made
    made.close()


def pending_by(pending: dict[str, Any]) -> str:
    """The deadline a pending vote names, once it verifies as the gateway's."""
    assert verify(pending, keyring()).issuer == GATEWAY_ID
    return PendingVote.model_validate(pending).decide_by


def test_tighten_moves_the_deadline_earlier_and_signs_a_new_pending_vote(world: World) -> None:
    """[GW-TIGHTEN]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        w.clock.advance(60)
        tightened = await w.gateway.tighten(pending["askId"], APPROVE_BY)
        assert pending_by(tightened) == format_time(APPROVE_BY)
        parsed = PendingVote.model_validate(tightened)
        assert (parsed.ask_id, parsed.txn_id, parsed.plan_digest, parsed.group_id) == (
            pending["askId"],
            pending["txnId"],
            pending["planDigest"],
            "finance",
        )
        assert parsed.time == format_time(START + timedelta(seconds=60))
        assert await w.gateway.poll(pending["askId"]) == tightened
        assert await w.gateway.ask(request()) == tightened

    run(world, body)


def test_a_later_deadline_is_ignored(world: World) -> None:
    """[GW-TIGHTEN] never later: the deadline in force stays."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        assert await w.gateway.tighten(pending["askId"], DECIDE_BY + timedelta(hours=1)) == pending
        assert await w.gateway.tighten(pending["askId"], DECIDE_BY) == pending
        tightened = await w.gateway.tighten(pending["askId"], APPROVE_BY)
        assert await w.gateway.tighten(pending["askId"], DECIDE_BY) == tightened
        assert pending_by(await w.gateway.poll(pending["askId"])) == format_time(APPROVE_BY)

    run(world, body)


def test_a_tightened_ask_is_withdrawn_at_the_new_deadline(world: World) -> None:
    """[GW-TIGHTEN] [GW-DEADLINE] exactly as at the old one: just after it."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        await w.gateway.tighten(pending["askId"], APPROVE_BY)
        w.clock.advance(900)
        await w.gateway.tick()  # alice missed her SLA: bob is asked, until the new deadline
        (to_bob,) = w.inbox("bob")
        assert to_bob.decide_by == APPROVE_BY
        w.clock.advance((APPROVE_BY - w.clock.now()).total_seconds())
        await w.gateway.tick()
        assert (await w.gateway.poll(pending["askId"]))["kind"] == "pending"
        w.clock.advance(0.001)
        await w.gateway.tick()
        approval = Approval.model_validate(await w.gateway.poll(pending["askId"]))
        assert (approval.decision.value, approval.withdrawn) == ("reject", True)
        assert approval.reason.startswith(f"deadline {format_time(APPROVE_BY)} passed")
        assert w.channel.withdrawn[-1] == (pending["askId"], human("bob"))

    run(world, body)


def test_a_poll_acts_on_the_new_deadline(world: World) -> None:
    """[GW-TIGHTEN] [GW-POLL] a poll acts on what is due, at the deadline in force."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        await w.gateway.tighten(pending["askId"], START + timedelta(seconds=300))
        w.clock.advance(300.001)
        assert (await w.gateway.poll(pending["askId"]))["withdrawn"] is True

    run(world, body)


def test_a_waiting_poll_wakes_at_the_new_deadline(world: World) -> None:
    """[GW-TIGHTEN] [GW-POLL] a long poll waiting for the old deadline is woken."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        polling = asyncio.create_task(w.gateway.poll(pending["askId"], wait_seconds=3600))
        await _until(lambda: w.clock.sleepers > 0)
        await w.gateway.tighten(pending["askId"], START + timedelta(seconds=300))
        w.clock.advance(300.001)  # long before alice's SLA, which the poll slept toward
        await _until(polling.done)
        assert polling.result()["withdrawn"] is True

    run(world, body)


def test_the_background_loop_withdraws_at_the_new_deadline(world: World) -> None:
    """[GW-TIGHTEN] [GW-DEADLINE] the loop sleeping toward the old deadline wakes up."""

    async def body(w: World) -> None:
        w.gateway.start()
        pending = await w.gateway.ask(request())
        await _until(lambda: w.clock.sleepers > 0)  # asleep until alice's SLA
        await w.gateway.tighten(pending["askId"], START + timedelta(seconds=300))
        w.clock.advance(300.001)
        await _until(lambda: bool(w.channel.withdrawn))
        await w.gateway.stop()
        assert w.channel.withdrawn == [(pending["askId"], human("alice"))]
        assert (await w.gateway.poll(pending["askId"]))["withdrawn"] is True

    run(world, body)


def test_a_vote_after_the_new_deadline_is_refused_late(world: World) -> None:
    """[GW-TIGHTEN] [GW-VOTE-LATE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        (notice,) = w.inbox("alice")
        await w.gateway.tighten(pending["askId"], START + timedelta(seconds=300))
        with pytest.raises(ResponseRefused) as dated:
            await w.gateway.submit_vote(
                pending["askId"], vote(notice, at=START + timedelta(seconds=301))
            )
        assert dated.value.reason == "LATE"
        w.clock.advance(300.001)
        with pytest.raises(ResponseRefused) as late:
            await w.gateway.submit_vote(pending["askId"], vote(notice, at=START))
        assert late.value.reason == "LATE"

    run(world, body)


def test_a_vote_before_the_new_deadline_still_counts(world: World) -> None:
    """[GW-TIGHTEN] the new deadline is the last moment a vote is taken."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        (notice,) = w.inbox("alice")
        await w.gateway.tighten(pending["askId"], START + timedelta(seconds=300))
        w.clock.advance(300)
        await w.gateway.submit_vote(pending["askId"], vote(notice, at=w.clock.now()))
        assert (await w.gateway.poll(pending["askId"]))["decision"] == "approve"

    run(world, body)


def test_a_tightened_deadline_survives_a_new_gateway(world: World) -> None:
    """[GW-TIGHTEN] [GW-DURABLE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        tightened = await w.gateway.tighten(pending["askId"], APPROVE_BY)
        second = w.restart()
        assert await second.poll(pending["askId"]) == tightened
        # The stored row's deadline column moved too, not only its state document.
        assert AskStore(w.stores[-1]).get(pending["askId"]).decide_by == APPROVE_BY
        w.clock.advance((APPROVE_BY - START).total_seconds() + 0.001)
        await second.tick()
        assert (await w.restart().poll(pending["askId"]))["withdrawn"] is True

    run(world, body)


def test_a_deadline_already_past_withdraws_the_ask_at_once(world: World) -> None:
    """[GW-TIGHTEN] [GW-DEADLINE]"""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        w.clock.advance(120)
        approval = await w.gateway.tighten(pending["askId"], START + timedelta(seconds=60))
        parsed = Approval.model_validate(approval)
        assert (parsed.decision.value, parsed.withdrawn) == ("reject", True)
        assert w.channel.withdrawn == [(pending["askId"], human("alice"))]

    run(world, body)


def test_a_decided_ask_stays_decided(world: World) -> None:
    """[GW-TIGHTEN] the final Approval, unchanged."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask(request())
        await w.gateway.submit_vote(pending["askId"], vote(w.inbox("alice")[0]))
        decided = await w.gateway.poll(pending["askId"])
        assert await w.gateway.tighten(pending["askId"], APPROVE_BY) == decided

    run(world, body)


def test_a_call_ask_is_tightened_too(world: World) -> None:
    """[GW-TIGHTEN] a tool call's ask follows an approval group's rules."""

    async def body(w: World) -> None:
        pending = await w.gateway.ask_call(call_request())
        tightened = await w.gateway.tighten(pending["askId"], APPROVE_BY)
        assert pending_by(tightened) == format_time(APPROVE_BY)
        w.clock.advance((APPROVE_BY - START).total_seconds() + 0.001)
        outcome = CallApproval.model_validate(await w.gateway.poll_call(pending["askId"]))
        assert (outcome.decision, outcome.withdrawn) == ("reject", True)

    run(world, body)


def test_an_unknown_ask_or_a_question_is_refused(store_url: str) -> None:
    """[GW-TIGHTEN] a question's deadline is its asker's."""
    w = World(store_url, people_directory(person_card("dana")))

    async def body(w: World) -> None:
        with pytest.raises(AskUnknown):
            await w.gateway.tighten("ask-nosuchask0", APPROVE_BY)
        pending = await w.gateway.ask_question(question_doc("text", {"maxLength": 100}))
        with pytest.raises(ResponseRefused) as info:
            await w.gateway.tighten(pending["askId"], APPROVE_BY)
        assert info.value.reason == "WRONG_KIND"
        assert await w.gateway.poll_question(pending["askId"]) == pending

    try:
        run(w, body)
    finally:
        w.close()


# -- planted cases: each refused by the check that names it, and only by it --


@dataclass(frozen=True)
class Case:
    """A planted tighten-then-vote, the checks that refuse it, and what refusing looks like."""

    tighten_to: datetime
    vote_at: float  # seconds after START, on the clock and in the vote
    checks: frozenset[str]
    refused: str


CASES: dict[str, Case] = {
    # A coordinator (or anyone with the ask id) moves the deadline later than the plan's.
    "deadline-moved-later": Case(
        DECIDE_BY + timedelta(hours=1),
        (DECIDE_BY - START).total_seconds() + 60,
        frozenset({"GW-TIGHTEN", "GW-VOTE-LATE"}),
        "LATE",
    ),
    # A vote after the tightened deadline, before the plan's own.
    "vote-after-the-tightened-deadline": Case(
        APPROVE_BY, (APPROVE_BY - START).total_seconds() + 60, frozenset({"GW-VOTE-LATE"}), "LATE"
    ),
}
CHECKS = sorted({check for case in CASES.values() for check in case.checks})


def _outcome(store_url: str, case: Case) -> str:
    """``recorded`` if the gateway took the vote, else the refusal's reason."""
    # alice's SLA outlasts every deadline here: only the deadline can refuse her vote.
    w = World(store_url, people_directory(person_card("alice", sla={"decideSeconds": 20000})))

    async def body() -> str:
        pending = await w.gateway.ask(request())
        (notice,) = w.inbox("alice")
        await w.gateway.tighten(pending["askId"], case.tighten_to)
        w.clock.advance(case.vote_at)
        try:
            await w.gateway.submit_vote(pending["askId"], vote(notice, at=w.clock.now()))
        except ResponseRefused as exc:
            return exc.reason
        return "recorded"

    try:
        return asyncio.run(body())
    finally:
        w.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_planted_tighten_is_refused_by_its_rule(store_url: str, name: str) -> None:
    """[GW-TIGHTEN] [GW-VOTE-LATE]"""
    assert _outcome(store_url, CASES[name]) == CASES[name].refused


@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_tighten_check_off_records_exactly_its_cases(
    sqlite_url: Callable[[], str], check: str
) -> None:
    """[GW-TIGHTEN] [GW-VOTE-LATE] with the never-later guard off, a later deadline is taken
    and a vote after the plan's own deadline counts."""
    with unsafe_switched_off(check):
        outcomes = {name: _outcome(sqlite_url(), case) for name, case in CASES.items()}
    for name, case in CASES.items():
        refused = outcomes[name] == case.refused
        assert refused == (check not in case.checks), (name, outcomes[name])
        assert outcomes[name] in (case.refused, "recorded"), (name, outcomes[name])


async def _until(condition: Callable[[], bool]) -> None:
    """Let other tasks and the store's workers run until ``condition`` holds (bounded)."""
    await until(condition)
