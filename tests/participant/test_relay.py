"""Relay: a participant in front of another, forwarding every call unchanged unless told."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hatp.errors import ParticipantUnavailable
from hatp.evidence import digest
from hatp.participant import Participant, ParticipantServer, Relay
from participant.ops import plan, run, seen

T = TypeVar("T")


class Counting(Relay):
    def __init__(self, inner: Participant) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        self.calls.append(method)
        return await call()


def test_a_relay_forwards_every_call_and_answers_as_the_participant(
    airline: ParticipantServer,
) -> None:
    relay = Counting(airline)
    assert isinstance(relay, Participant)
    assert relay.participant_id == airline.participant_id
    voted = run(relay.prepare(plan(), "event", 1))
    committed = run(relay.commit("txn-1", "event", 1, digest(plan().to_wire()), seen(voted)))
    undone = run(relay.compensate("txn-1", "event", 1, committed["undoToken"]))
    again = run(relay.abort("txn-1", "event", 1))
    status = run(relay.status("txn-1", "event"))
    assert relay.calls == ["prepare", "commit", "compensate", "abort", "status"]
    assert undone["outcome"] == "compensated" and again == undone
    assert status.state.value == "compensated"


def test_relays_stack_and_a_lossy_one_drops_the_answer_but_not_the_effect(
    airline: ParticipantServer,
) -> None:
    from hatp.demo._lossy import LossyLink

    lossy = LossyLink(Counting(airline), {"prepare": 1})
    try:
        run(lossy.prepare(plan(), "seat", 1))
    except ParticipantUnavailable as lost:
        assert "lost on the way back" in lost.message
    else:  # pragma: no cover - the first answer must be lost
        raise AssertionError("the first answer was delivered")
    # The retry is a status query: the vote was cast once, the same receipt comes back.
    first = run(lossy.prepare(plan(), "seat", 1))
    assert asyncio.run(airline.status("txn-1", "seat")).receipt == first
    assert lossy.lost["prepare"] == 1
