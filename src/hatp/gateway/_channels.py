"""How the gateway reaches people: the :class:`Channel` protocol, and an in-memory channel.

A channel delivers a :class:`Notice` (what to show the person, and what they
sign over) and later passes the person's response back through the
:class:`Responder` it was given (the gateway). Contact details stay in the
channel's own configuration; a card names only channel types.

:class:`MemoryChannel` keeps an inbox per person for tests, and can play
scripted people (:class:`Person`) who approve, reject, answer, decline or
never respond, after some seconds on the injected clock: genuine signed
votes from keys on their cards, for tests and the demo's ``--auto`` mode.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from hatp.clock import Clock
from hatp.errors import HatpError
from hatp.evidence import SigningKey
from hatp.gateway._authenticator import SoftwareAuthenticator
from hatp.gateway._people import sign_passkey_vote, sign_vote
from hatp.gateway._view import ApproverView, CallView, QuestionView

__all__ = ["Channel", "MemoryChannel", "Notice", "Person", "Responder"]


@dataclass(frozen=True)
class Notice:
    """One ask, as delivered to one person.

    ``kind`` is ``"approval"`` (an approval group of a plan, ``view`` an
    :class:`ApproverView`), ``"call"`` (one tool call, a :class:`CallView`)
    or ``"question"`` (a :class:`QuestionView`). ``payload`` is what the
    person signs over: for an approval or a call the HumanVote body without
    ``decision`` and ``time`` (``askId``, ``txnId``, ``planDigest``,
    ``groupId``, ``human``, and ``termsDigest`` when an approval ask has hold
    terms; for a call ``txnId`` is the request id,
    ``planDigest`` the digest of the terms, ``groupId`` ``"call"``); for a
    question ``{askId, questionId, questionDigest}``. ``respond_by`` is when their SLA runs out
    and the gateway escalates; ``decide_by`` when the ask closes for everyone.
    ``nonce`` (approvals, to a person with a passkey on their card) is what their
    passkey signs over with the payload and decision (:func:`vote_challenge`);
    ``None`` otherwise.
    """

    ask_id: str
    human: str
    kind: Literal["approval", "question", "call"]
    view: ApproverView | QuestionView | CallView
    payload: dict[str, Any]
    decide_by: datetime
    respond_by: datetime
    nonce: str | None = None


class Responder(Protocol):
    """What a channel calls with a person's response (the gateway implements it)."""

    async def submit_vote(self, ask_id: str, vote: Mapping[str, Any]) -> None:
        """Hand over the person's signed HumanVote."""
        ...

    async def submit_answer(self, ask_id: str, human: str, value: Any) -> None:
        """Hand over the person's answer to a question."""
        ...

    async def decline(self, ask_id: str, human: str) -> None:
        """Say the person declines; the gateway asks someone else."""
        ...


class Channel(Protocol):
    """A way to reach people of one channel type (a card's ``channels`` value)."""

    @property
    def channel_type(self) -> str:
        """The channel type this channel serves, e.g. ``"terminal"``."""
        ...

    async def deliver(self, notice: Notice, responder: Responder) -> None:
        """Show ``notice`` to its person; return promptly (responses come later)."""
        ...

    async def withdraw(self, ask_id: str, human: str) -> None:
        """Tell the person the ask no longer needs them."""
        ...


_SENTINEL: Any = object()


@dataclass(frozen=True)
class Person:
    """A scripted person: what they do with every ask, ``after_seconds`` on the clock.

    ``decision``: ``"approve"`` / ``"reject"`` (approvals; signed with ``key``,
    an Ed25519 key on their card, and with ``passkey`` when the notice carries a
    nonce and they have one; with only a passkey they cannot vote on tool
    calls), ``"answer"`` (questions: answers ``answer``), ``"decline"``, or
    ``"never"`` (no response at all). An approving person asked a question
    answers ``answer`` if one is set.
    """

    key: SigningKey | None = None
    decision: Literal["approve", "reject", "answer", "decline", "never"] = "approve"
    after_seconds: float = 0.0
    answer: Any = _SENTINEL
    passkey: SoftwareAuthenticator | None = None

    def __post_init__(self) -> None:
        if self.decision in ("approve", "reject") and self.key is None and self.passkey is None:
            raise ValueError(
                f"a person who will {self.decision} needs a key or a passkey to sign the vote"
            )
        if self.decision == "answer" and self.answer is _SENTINEL:
            raise ValueError("a person who will answer needs an answer")
        if self.after_seconds < 0:
            raise ValueError("after_seconds is not negative")


class MemoryChannel:
    """An in-memory channel: an inbox per person, and optional scripted people.

    ``inbox(human)`` lists the notices a person has and that were not
    withdrawn; ``withdrawn`` lists ``(ask_id, human)`` in the order withdrawn;
    ``refused`` the errors the gateway answered scripted responses with.
    """

    def __init__(
        self,
        channel_type: str = "web",
        *,
        clock: Clock | None = None,
        people: Mapping[str, Person] | None = None,
    ) -> None:
        """Make a channel of ``channel_type``.

        Raises:
            ValueError: ``people`` given without a ``clock`` to time them on.
        """
        if people and clock is None:
            raise ValueError("scripted people need the clock they respond on")
        self._type = channel_type
        self._clock = clock
        self.people: dict[str, Person] = dict(people or {})
        self._inbox: dict[str, list[Notice]] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.delivered: list[Notice] = []
        self.withdrawn: list[tuple[str, str]] = []
        self.refused: list[HatpError] = []

    @property
    def channel_type(self) -> str:
        return self._type

    def inbox(self, human: str) -> list[Notice]:
        """Return the notices ``human`` holds, oldest first."""
        return list(self._inbox.get(human, ()))

    async def deliver(self, notice: Notice, responder: Responder) -> None:
        self._inbox.setdefault(notice.human, []).append(notice)
        self.delivered.append(notice)
        person = self.people.get(notice.human)
        if person is None or person.decision == "never" or self._clock is None:
            return
        # The person's moment is fixed now, so a clock moved before the task
        # first runs still finds them due.
        due = self._clock.now() + timedelta(seconds=person.after_seconds)
        task = asyncio.create_task(self._respond(person, notice, responder, due))
        self._tasks[(notice.ask_id, notice.human)] = task

    async def withdraw(self, ask_id: str, human: str) -> None:
        notices = self._inbox.get(human, [])
        self._inbox[human] = [n for n in notices if n.ask_id != ask_id]
        self.withdrawn.append((ask_id, human))
        task = self._tasks.pop((ask_id, human), None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        """Cancel every scripted response still waiting."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _respond(
        self, person: Person, notice: Notice, responder: Responder, due: datetime
    ) -> None:
        if self._clock is None:  # deliver() starts no task without one
            return
        await self._clock.sleep_until(due)
        try:
            if person.decision == "decline" or (
                notice.kind == "question" and person.answer is _SENTINEL
            ):
                await responder.decline(notice.ask_id, notice.human)
            elif notice.kind == "question":
                await responder.submit_answer(notice.ask_id, notice.human, person.answer)
            elif person.decision in ("approve", "reject") and _can_sign(person, notice):
                await responder.submit_vote(notice.ask_id, _vote(person, notice, self._clock))
            else:  # "answer" people asked to approve, passkey-only people with no nonce: pass
                await responder.decline(notice.ask_id, notice.human)
        except HatpError as exc:
            self.refused.append(exc)
        finally:
            self._tasks.pop((notice.ask_id, notice.human), None)


def _can_sign(person: Person, notice: Notice) -> bool:
    return person.key is not None or (person.passkey is not None and notice.nonce is not None)


def _vote(person: Person, notice: Notice, clock: Clock) -> dict[str, Any]:
    """The scripted person's vote: with their passkey when the notice carries a nonce."""
    decision: Literal["approve", "reject"] = "reject" if person.decision == "reject" else "approve"
    if person.passkey is not None and notice.nonce is not None:
        return sign_passkey_vote(
            person.passkey, notice.payload, decision, notice.nonce, clock.now(), key=person.key
        )
    if person.key is None:  # not reached: _can_sign said they can
        raise ValueError(f"{notice.human} has no key for an ask without a passkey nonce")
    return sign_vote(person.key, notice.payload, decision, clock.now())
