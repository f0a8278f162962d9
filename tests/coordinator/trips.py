"""The coordinator under test, driving the real trip participants.

:class:`Trip` puts one :class:`~hatp.coordinator.Coordinator` (or several) in
front of a :class:`~hatp.demo.TripWorld`: real participants on real stores, a
real decision log, acme's real Human Gateway whose finance approver answers
at a :class:`Desk` once every participant has voted, and a manual clock. The links here
forward every call to a real participant: unchanged (:class:`Tap`), late on
the clock (:class:`Late`), never (:class:`Stall`, a coordinator stopped
mid-call), or rewritten by an attacker on the wire (:class:`Forge`,
:class:`ForgeApproval`); none stands in for a participant.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hatp.clock import ManualClock
from hatp.coordinator import ApprovalRequest, Coordinator, Gateway, Outcome
from hatp.demo import PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.demo._faulty import Fault, FaultyParticipant
from hatp.errors import ParticipantUnavailable
from hatp.evidence import SigningKey, sign, verify_record
from hatp.gateway import Notice, Responder, sign_vote
from hatp.model import ApprovalDecision, Plan, Result
from hatp.participant import Participant, Relay
from hatp.store import DecisionLog

T = TypeVar("T")


@dataclass(frozen=True)
class ScriptedAnswer:
    """What the finance approver does: decide, after some time on the clock, or never."""

    decision: ApprovalDecision
    approver: str
    after_seconds: float = 0.0
    never: bool = False
    #: Wait for every branch's vote first (parallel mode); approval-first asks before any.
    after_votes: bool = True


APPROVER = "human://acme.com/bob"
APPROVE = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER)
REJECT = ScriptedAnswer(ApprovalDecision.REJECT, APPROVER)
ALL_WHOLE = dict.fromkeys(PARTICIPANT_IDS, "whole")
ALL_NONE = dict.fromkeys(PARTICIPANT_IDS, "none")
#: Clock seconds into phase 1 at which the demo holds (20-minute leases) are renewed.
RENEW_AT = 10 * 60
#: Real seconds any one wait in a test may take before it fails.
BOUND = 20.0


class Votes:
    """Counts the prepare answers each transaction got; coroutines can wait for a count."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self._waiting: list[tuple[str, int, asyncio.Future[None]]] = []

    def add(self, txn_id: str) -> None:
        self.count[txn_id] += 1
        for txn, at_least, future in self._waiting:
            if self.count[txn] >= at_least and not future.done():
                future.set_result(None)

    async def wait(self, txn_id: str, at_least: int) -> None:
        """Return once ``txn_id`` has ``at_least`` prepare answers (fail after :data:`BOUND` s)."""
        if self.count[txn_id] >= at_least:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((txn_id, at_least, future))
        try:
            await asyncio.wait_for(future, BOUND)
        finally:
            self._waiting = [w for w in self._waiting if w[2] is not future]


class Tap(Relay):
    """Counts each prepare answer (or failure) in ``votes``, each renew in ``renewals``."""

    def __init__(self, inner: Participant, votes: Votes, renewals: Votes | None = None) -> None:
        super().__init__(inner)
        self._votes = votes
        self._renewals = renewals or Votes()

    async def renew(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        try:
            return await super().renew(txn_id, branch_id, fence)
        finally:
            self._renewals.add(txn_id)

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        try:
            return await super().prepare(plan, branch_id, fence)
        finally:
            self._votes.add(plan.txn_id)


class Forge(Relay):
    """An attacker on the wire: rewrites each prepare receipt and signs it again with ``key``.

    Without a key the original signature stays on the rewritten receipt.
    """

    def __init__(self, inner: Participant, key: SigningKey | None, **changes: Any) -> None:
        super().__init__(inner)
        self._key = key
        self._changes = changes

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        receipt = await super().prepare(plan, branch_id, fence)
        if self._key is None:
            return {**receipt, **self._changes}
        unsigned = {k: v for k, v in receipt.items() if k != "signature"}
        return sign({**unsigned, **self._changes}, self._key)


class NoRenew(Relay):
    """A link that loses every renew (and replace) on the way there: the hold keeps its
    first lease, and once lost stays lost."""

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method in ("renew", "replace"):
            raise ParticipantUnavailable(
                f"the {method} to {self.participant_id} was lost on the way",
                participant=self.participant_id,
            )
        return await call()


def down(trip: Trip, participant: str, method: str, times: int) -> FaultyParticipant:
    """The participant, its own store down for its first ``times`` calls of ``method``:
    each refused ``STORE_UNAVAILABLE`` before anything is done (``store-unavailable`` of
    :mod:`hatp.demo._faulty`); later calls go through. ``failed[method]`` counts them."""
    fault = Fault(participant, method, "store-unavailable", times)
    return FaultyParticipant(trip.links[participant], trip.world.stores[participant], [fault])


class Late(Relay):
    """Moves the clock ``seconds`` on before the first ``method`` call goes through (a slow
    network); ``method`` is ``commit`` unless told."""

    def __init__(
        self, inner: Participant, clock: ManualClock, seconds: float, method: str = "commit"
    ) -> None:
        super().__init__(inner)
        self._clock = clock
        self._seconds = seconds
        self._method = method

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == self._method and self._seconds:
            self._clock.advance(self._seconds)
            self._seconds = 0.0
        return await call()


class Stall(Relay):
    """Hangs on every ``method`` call, as a coordinator does when its process stops there.

    ``entered`` is set when the first such call arrives; the request never reaches
    the participant.
    """

    def __init__(self, inner: Participant, method: str) -> None:
        super().__init__(inner)
        self.method = method
        self.entered = asyncio.Event()

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == self.method:
            self.entered.set()
            await asyncio.Event().wait()
        return await call()


class ForgeApproval:
    """An attacker before the coordinator: rewrites each approval, signs it with ``key``."""

    def __init__(self, inner: Gateway, key: SigningKey, **changes: Any) -> None:
        self.inner = inner
        self._key = key
        self._changes = changes

    @property
    def gateway_id(self) -> str:
        return self.inner.gateway_id

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        return self._forge(await self.inner.ask(request))

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        return self._forge(await self.inner.poll(ask_id, wait_seconds=wait_seconds))

    async def withdraw(self, ask_id: str, reason: str) -> None:
        await self.inner.withdraw(ask_id, reason)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        return await self.inner.withdraw_transaction(txn_id, reason)

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        return await self.inner.ask_question(question)

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        return await self.inner.estimate(request)

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        return self._forge(await self.inner.tighten(ask_id, decide_by))

    def _forge(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("kind") != "approval":
            return answer
        unsigned = {k: v for k, v in answer.items() if k != "signature"}
        return sign({**unsigned, **self._changes}, self._key)


class ForgeEstimate(ForgeApproval):
    """An attacker before the coordinator: re-signs each chain estimate with ``key``."""

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        estimate = await self.inner.estimate(request)
        unsigned = {k: v for k, v in estimate.items() if k != "signature"}
        return sign({**unsigned, **self._changes}, self._key)

    def _forge(self, answer: dict[str, Any]) -> dict[str, Any]:
        return answer


class Desk:
    """Where acme's people get the gateway's asks (a ``terminal``-type channel).

    Only ``answer.approver`` answers: once every branch has voted, after
    running ``meanwhile`` (an edit made behind the plan's back) and waiting
    ``answer.after_seconds`` on the clock, with a vote signed by their own
    key. Anyone else asked (a delegate after an escalation) stays silent.
    """

    channel_type = "terminal"

    def __init__(
        self,
        trip: Trip,
        answer: ScriptedAnswer,
        meanwhile: Callable[[], object] | None = None,
    ) -> None:
        self._trip = trip
        self._answer = answer
        self._meanwhile = meanwhile
        self._tasks: list[asyncio.Task[None]] = []
        self.refused: list[Exception] = []

    async def deliver(self, notice: Notice, responder: Responder) -> None:
        if notice.human == self._answer.approver and not self._answer.never:
            self._tasks.append(asyncio.create_task(self._respond(notice, responder)))

    async def withdraw(self, ask_id: str, human: str) -> None:
        return None

    async def _respond(self, notice: Notice, responder: Responder) -> None:
        trip, answer = self._trip, self._answer
        if answer.after_votes:
            await trip.votes.wait(notice.payload["txnId"], 4)
        if self._meanwhile is not None:
            self._meanwhile()
        if answer.after_seconds:
            due = trip.clock.now() + timedelta(seconds=answer.after_seconds)
            await trip.clock.sleep_until(due)
        key = trip.world.people[notice.human]
        vote = sign_vote(key, notice.payload, answer.decision.value, trip.clock.now())
        try:
            await responder.submit_vote(notice.ask_id, vote)
        except Exception as exc:  # a late vote, say: kept for the test to look at
            self.refused.append(exc)


class Trip:
    """A trip world, a decision log and a clock, and coordinators to run plans on them."""

    def __init__(self, world: TripWorld, log: DecisionLog, clock: ManualClock) -> None:
        self.world = world
        self.log = log
        self.clock = clock
        self.votes = Votes()
        self.renewals = Votes()
        self.links: dict[str, Participant] = {
            pid: Tap(server, self.votes, self.renewals)
            for pid, server in world.participants.items()
        }
        self._txns = itertools.count(1)
        self._seats = (f"{row}{letter}" for row in range(4, 31) for letter in "ABCDEF")

    def plan(self, *, decide_in: float = 900.0, **options: Any) -> dict[str, Any]:
        """A fresh trip plan (new txn id, a free economy seat), decided within ``decide_in`` s."""
        options.setdefault("seat", next(self._seats))
        decide_by = self.clock.now() + timedelta(seconds=decide_in)
        return trip_plan(f"trip-{next(self._txns)}", decide_by=decide_by, **options)

    def coordinator(
        self,
        answer: ScriptedAnswer = APPROVE,
        *,
        links: Mapping[str, Participant] | None = None,
        log: DecisionLog | None = None,
        meanwhile: Callable[[], object] | None = None,
        forge: Callable[[Gateway], Gateway] | None = None,
        **options: Any,
    ) -> Coordinator:
        """A coordinator on this world.

        ``links`` replace the taps of some participants; ``forge`` wraps the gateway.
        """
        gateway: Gateway = self.world.gateway(Desk(self, answer, meanwhile))
        if forge is not None:
            gateway = forge(gateway)
        options.setdefault("retry_delay", 0.0)
        return self.world.coordinator(
            log or self.log, gateway, links={**self.links, **(links or {})}, **options
        )

    def run(
        self,
        plan: Mapping[str, Any] | None = None,
        answer: ScriptedAnswer = APPROVE,
        **options: Any,
    ) -> Outcome:
        """Run ``plan`` (default: a fresh one) to its end with a new coordinator."""
        coordinator = self.coordinator(answer, **options)
        return asyncio.run(coordinator.run(plan or self.plan()))

    def kinds(self, participant: str, txn_id: str) -> list[str]:
        """The participant's ledger lines for ``txn_id``, by kind, oldest first."""
        return [line.kind for line in self.world.ledger(participant) if line.txn_id == txn_id]


#: How long :func:`sleepers` lets the loop and the store's worker threads run before it
#: fails the test: a bound on a hang, not a claim about timing.
SLEEPERS_SECONDS = 30.0


async def sleepers(
    clock: ManualClock, at_least: int, tries: int = 1000, *, exactly: bool = False
) -> None:
    """Let the event loop (and the gateway's store work, on worker threads) run until
    ``at_least`` (or ``exactly`` so many) coroutines wait on ``clock``: at least ``tries``
    turns of the loop, for at most :data:`SLEEPERS_SECONDS`."""
    end = time.monotonic() + SLEEPERS_SECONDS
    turns = 0
    while turns < tries or time.monotonic() < end:
        if clock.sleepers == at_least or (clock.sleepers > at_least and not exactly):
            return
        turns += 1
        await asyncio.sleep(0)
    raise AssertionError(f"{clock.sleepers} sleepers on the clock, expected {at_least}")


async def past_deadline(
    trip: Trip, plan: dict[str, Any], answer: ScriptedAnswer, *, keepers: int = 2
) -> Outcome:
    """Run ``plan``; once every branch voted and the clock has its sleepers, pass decideBy.

    The plan's decideBy must be under 16 minutes away; the clock moves 16 minutes.
    ``keepers`` is how many holds the coordinator keeps while it waits [COORD-RENEW].
    """
    task = asyncio.create_task(trip.coordinator(answer).run(plan))
    await trip.votes.wait(plan["txnId"], len(plan["branches"]))
    # decideBy, the poll on the gateway, the lease keeper and a keeper per renewable hold
    # (they may sleep before the ask is polled), and the approver if they wait
    await sleepers(trip.clock, (4 if answer.after_seconds else 3) + keepers)
    trip.clock.advance(16 * 60)
    return await task


async def approve_after(
    trip: Trip,
    plan: dict[str, Any],
    seconds: float,
    *,
    links: Mapping[str, Participant] | None = None,
    keepers: int = 2,
    renewals: int = 2,
    keepers_after: int = 0,
) -> Outcome:
    """Run ``plan`` with an approver who takes ``seconds`` on the clock to approve.

    The clock stops at 10 minutes, half the holds' 20-minute lease, until
    ``renewals`` renewals reached the participants' taps and ``keepers_after``
    hold keepers sleep again; then it moves on to ``seconds``. ``keepers``
    is how many holds the coordinator keeps from the start [COORD-RENEW].
    """
    slow = ScriptedAnswer(ApprovalDecision.APPROVE, APPROVER, after_seconds=seconds)
    task = asyncio.create_task(trip.coordinator(slow, links=links).run(plan))
    await trip.votes.wait(plan["txnId"], len(plan["branches"]))
    # the lease keeper, the deadline, the poll, the approver, and a keeper per renewable hold
    await sleepers(trip.clock, 4 + keepers)
    trip.clock.advance(RENEW_AT)
    await trip.renewals.wait(plan["txnId"], renewals)
    await sleepers(trip.clock, 4 + keepers_after, exactly=True)
    trip.clock.advance(seconds - RENEW_AT)
    return await task


def events(record: Mapping[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    """The record's events (of type ``kind`` only, if given)."""
    return [e for e in record["events"] if kind is None or e["type"] == kind]


def types(record: Mapping[str, Any]) -> list[str]:
    return [e["type"] for e in record["events"]]


def committed_order(record: Mapping[str, Any]) -> list[str]:
    return [e["body"]["branchId"] for e in events(record, "txn.committed")]


def failed_findings(outcome: Outcome, world: TripWorld) -> list[str]:
    """Every finding of the offline verifier that is not a pass (empty: the record verifies)."""
    report = verify_record(outcome.record, world.keyring)
    return [f"{f.rule}: {f.detail}" for f in report.findings if f.result is not Result.PASS]
