"""The Human Gateway: asks people over channels, checks what they say, signs the outcome.

:class:`HumanGateway` is the coordinator's :class:`~hatp.coordinator.Gateway`
(``ask`` / ``poll`` / ``withdraw``), an agent's way to have one tool call
approved (``ask_call`` / ``poll_call``) or a question answered
(``ask_question`` / ``poll_question``), and the channels' :class:`Responder`
(``submit_vote`` / ``submit_answer`` / ``decline``). Every change to an ask
is stored in the :class:`~hatp.store.AskStore` before anything is said over a
channel, and stored only if the ask did not move on meanwhile, so a second
gateway on the same store continues every open ask ([GW-DURABLE]) and two
never both decide one ([STORE-ASK-VERSION]). The rules themselves live in
:mod:`hatp.gateway._ask`; the checks on a person's response are here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection

from hatp import _checks
from hatp._waiting import first_of
from hatp.clock import Clock, format_time, parse_time
from hatp.directory import CardSource, Directory, Resolution
from hatp.errors import AskConflict, AskUnknown, LinkRefused, StoreUnavailable
from hatp.evidence import SigningKey
from hatp.gateway._ask import AskDoc, Context, Effects, person_entry
from hatp.gateway._calls import call_terms, parse_call_request, terms_digest
from hatp.gateway._channels import Channel
from hatp.gateway._deadline import pending_vote, tighten
from hatp.gateway._estimate import chain_estimate
from hatp.gateway._hold_terms import read_hold_terms
from hatp.gateway._notices import notice
from hatp.gateway._outbox import (
    OutboxSender,
    SendPolicy,
    link_token,
    notice_rows,
    read_link_token,
)
from hatp.gateway._passkey_votes import Spend, check_passkey
from hatp.gateway._push import PushChannel
from hatp.gateway._questions import parse_question, question_digest, sign_answer
from hatp.gateway._responses import (
    check_signature,
    check_vote,
    parse_vote,
    refused,
    require_asked,
    require_in_time,
    require_open,
)
from hatp.gateway._results import approval_result, of_kind, question_result
from hatp.gateway._routing import Routed, resolve_question, route, route_call
from hatp.model import CALL_GROUP, HumanCard
from hatp.store import (
    AskChanges,
    AskKind,
    AskRow,
    AskState,
    AskStore,
    Outbox,
    OutboxRow,
    PasskeyBook,
)

if TYPE_CHECKING:
    from hatp.coordinator import ApprovalRequest

__all__ = ["HumanGateway"]

#: How many times a change is redone on a fresh read when another gateway got there first.
CONFLICT_RETRIES = 5
#: The longest a long poll may go without reading its ask again, when it rechecks.
MAX_RECHECK_SECONDS = 3600
#: The group id a question's pending vote names.
QUESTION_GROUP = "question"
#: How long the background loop waits before trying a store that failed again.
STORE_RETRY_SECONDS = 5.0
#: How often a sender looks for notices it was not told of (another process's, or one
#: left claimed by a process that died), when the gateway sets no recheck.
OUTBOX_RECHECK_SECONDS = 30.0

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
#: Where an ask keeps the agent it is for: (member, member of it), per kind.
_AGENT_MEMBER = {
    AskKind.APPROVAL: ("plan", "initiator"),
    AskKind.CALL: ("request", "requester"),
    AskKind.QUESTION: ("question", "asker"),
}

_Change = Callable[[AskRow, AskDoc], None]
#: What a change writes in the ask's own transaction (a passkey vote's bookkeeping).
_Also = Callable[[Connection], None]
#: What a notice says it is about, per kind of ask.


class HumanGateway:
    """A Human Gateway over a directory, a store of asks, and channels to people.

    ``channels`` maps a card's channel type (``"web"``, ``"terminal"``, …) to
    the channel that serves it (or is an iterable of channels, keyed by their
    ``channel_type``). ``initiator_principals`` maps an agent id to the
    person it works for, who may not approve that agent's plans or tool
    calls ([DIR-SOD]). ``passkey_origins`` are the origins of the pages its people
    sign with their passkeys on (``https://gateway.acme.com``); a passkey assertion
    from any other is refused ([GW-PASSKEY]). Without them, any origin that fits
    the passkey's rpId is taken (https on the rpId or a subdomain of it).
    ``recheck_seconds``: when several gateway processes share the store, how often
    a long poll reads its ask again, so that a vote another process took is seen
    within that time ([GW-RECHECK]); ``None`` (one process) waits for this
    process's own changes, the next SLA or deadline, or the poll's end.

    Push channels (:class:`~hatp.gateway.PushChannel`: webhook, e-mail) among
    ``channels`` are sent to through the store's outbox ([OUTBOX]), at least once,
    retried as ``send_policy`` says; a person they cannot reach is asked over their
    next channel ([GW-CHANNEL-NEXT]). ``approver_url`` is where the gateway's approver
    page is served (``https://gateway.acme.com/approve``): notices name the ask's page
    there, and an e-mail carries a single-use link to it ([OUTBOX-LINK]).
    """

    def __init__(
        self,
        gateway_id: str,
        key: SigningKey,
        directory: CardSource,
        asks: AskStore,
        channels: Mapping[str, Channel | PushChannel] | Iterable[Channel | PushChannel],
        clock: Clock,
        *,
        initiator_principals: Mapping[str, str] | None = None,
        passkey_origins: Iterable[str] | None = None,
        recheck_seconds: float | None = None,
        approver_url: str | None = None,
        send_policy: SendPolicy | None = None,
    ) -> None:
        if recheck_seconds is not None and not 0 < recheck_seconds <= MAX_RECHECK_SECONDS:
            raise ValueError(f"recheck_seconds must be within (0, {MAX_RECHECK_SECONDS}]")
        self._recheck = None if recheck_seconds is None else timedelta(seconds=recheck_seconds)
        self._id = gateway_id
        self._key = key
        self._directory = directory
        self._asks = asks
        self._channels: dict[str, Channel | PushChannel] = (
            dict(channels)
            if isinstance(channels, Mapping)
            else {c.channel_type: c for c in channels}
        )
        self._clock = clock
        self._approver_url = None if approver_url is None else approver_url.rstrip("/")
        # The push channels, sent to through the outbox; the others are told in process.
        self._push: dict[str, PushChannel] = {}
        self._told: dict[str, Channel] = {}  # the in-process channels
        for kind, channel in self._channels.items():
            if isinstance(channel, PushChannel):
                self._push[kind] = channel
            else:
                self._told[kind] = channel
        self._sender = OutboxSender(
            Outbox(asks.store),
            self._push,
            clock,
            stored=self._stored,
            read_ask=asks.get,
            fallback=self._channel_failed,
            link=self._link,
            policy=send_policy,
        )
        self._principals = dict(initiator_principals or {})
        self._origins = None if passkey_origins is None else tuple(passkey_origins)
        self._passkeys = PasskeyBook(asks.store)
        # This gateway's store work, in the order it asks for it (as on the event loop).
        self._lane = asks.store.lane()
        # Each waiter is told the row this gateway stored, when it has it (else None).
        self._waiters: dict[str, list[asyncio.Future[AskRow | None]]] = {}
        self._changed = asyncio.Event()
        # Other processes' writes to the asks, heard at once on PostgreSQL [GW-LISTEN].
        self._listener = (
            AskChanges(asks.store, self._heard) if AskChanges.available(asks.store) else None
        )
        self._loop: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        #: Errors channels raised while delivering or withdrawing (the ask goes on:
        #: a person not reached misses their SLA and the gateway escalates).
        self.channel_errors: list[Exception] = []

    @property
    def gateway_id(self) -> str:
        """The gateway's id: the issuer of its signing key, named in what it signs."""
        return self._id

    @property
    def asks(self) -> AskStore:
        """The store of this gateway's asks (what a channel people come to reads)."""
        return self._asks

    @property
    def directory(self) -> CardSource:
        """The cards this gateway routes over."""
        return self._directory

    @property
    def clock(self) -> Clock:
        """The clock this gateway keeps time by."""
        return self._clock

    @property
    def recheck_seconds(self) -> float | None:
        """How often a long poll reads its ask again ([GW-RECHECK]); ``None``: never."""
        return None if self._recheck is None else self._recheck.total_seconds()

    def card(self, human: str) -> HumanCard | None:
        """``human``'s card as this gateway routes with it, or ``None`` if it has none."""
        return next((c for c in self._directory.cards() if c.id == human), None)

    # -- the coordinator's side -----------------------------------------

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Ask approval group ``request.group`` about the plan; return the signed
        PendingVote, or the signed Approval if the group is decided already.

        Asking again about the same (txnId, groupId, planDigest) returns the
        same ask ([GW-ASK-ONCE]), with the terms it was first asked with. Fewer
        eligible people than the address's quorum decides reject at once
        ([GW-FEW]). With ``request.terms`` (holds-first) people approve the plan
        and those terms: their votes and the Approval name the terms' digest
        ([GW-TERMS]).

        Raises:
            AskInvalid: no such group in the plan, the digest is not the plan's, or
                the terms are not a HoldTerms of this plan (``TERMS_INVALID``,
                ``TERMS_MISMATCH``).
            PlanInvalid, RequirementBelowTotal, AddressInvalid: routing refused it.
            StoreUnavailable: the store failed; nobody was asked.
        """
        terms = {} if request.terms is None else read_hold_terms(request.terms, request.plan_digest)
        now = self._clock.now()
        # Built before looking for an earlier ask, which the store's create returns: a
        # first ask (nearly every ask) is one store call, not a look and then a create.
        # Routing refuses by the plan alone, so what was asked once builds again.
        work = self._approval_ask(request, now, terms)
        row = await self._create(work, AskKind.APPROVAL, now)
        if row.ask_id != work.doc["askId"]:  # asked before [GW-ASK-ONCE]: that ask answers
            return await self.poll(row.ask_id)
        return approval_result(row)

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        """Return the signed ChainEstimate of asking group ``request.group`` now: everyone
        the ask would reach with nobody answering, in order, and ``worstSeconds``,
        after which nobody is left who could approve ([GW-ESTIMATE]).

        The ask is built as :meth:`ask` builds it and stepped through its SLAs
        and deadline by the same rules, so the two never disagree. Too few
        eligible people ([GW-FEW]): an empty chain and ``worstSeconds`` 0.
        Stores nothing and asks nobody. ``request.terms`` changes nothing here.

        Raises:
            AskInvalid: no such group in the plan, or the digest is not the plan's.
            PlanInvalid, RequirementBelowTotal, AddressInvalid: routing refused it.
        """
        now = self._clock.now()
        return chain_estimate(self._approval_ask(request, now, {}))

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        """Move an open approval or call ask's deadline earlier, to ``decide_by``
        ([GW-TIGHTEN]); return the signed PendingVote naming the deadline in force, or
        the final Approval (CallApproval) if the ask is closed.

        A later (or the same) time changes nothing. The new deadline is stored
        before this returns; the ask is withdrawn at it, and responses after it
        refused, exactly as at the old one ([GW-DEADLINE], [GW-VOTE-LATE]); one
        already past withdraws the ask at once. People already asked keep the
        notice they have.

        Raises:
            ResponseRefused: ``WRONG_KIND``: the ask is a question.
            AskUnknown: no such ask.
            StoreUnavailable: the store failed; the deadline is unchanged.
        """
        moved = False

        def change(row: AskRow, work: AskDoc) -> None:
            nonlocal moved
            if row.kind is AskKind.QUESTION:
                raise refused(
                    ask_id, None, "WRONG_KIND", "a question's deadline is its asker's to set"
                )
            moved = tighten(work, decide_by)
            if moved:  # push channels tell the people asked the new deadline
                work.effects.inform.extend(
                    (p["id"], "deadline") for p in work.people if p["status"] == "asked"
                )

        row = await self._apply(ask_id, change)
        if moved:  # pollers and the loop wait for the old deadline: wake them
            self._notify(ask_id)
        return approval_result(row)

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Return the signed PendingVote while the group is undecided, else the signed
        Approval. Waits up to ``wait_seconds`` on the gateway's clock, returning as
        soon as the ask is decided. A due SLA or deadline is acted on first.
        A decision another gateway process makes is seen at the end of the wait
        (or at the ask's next SLA or deadline), not at once.

        Raises:
            AskUnknown: no such ask, or it is not an approval group's.
            StoreUnavailable: the store failed.
        """
        return approval_result(of_kind(await self._poll(ask_id, wait_seconds), AskKind.APPROVAL))

    async def withdraw(self, ask_id: str, reason: str, *, by: str | None = None) -> None:
        """Withdraw an ask nobody needs any more from everyone asked. Idempotent; a
        decided ask stays decided. An approval ask gets a withdrawn reject, a
        call ask a withdrawn reject CallApproval.

        ``by``: who withdrew it, as the edge authenticated them (an API caller); the
        signed reject and the routing name them ([GW-WITHDRAWN-BY]). ``None``: the
        asker itself, in process (the coordinator that asked).

        Raises:
            AskUnknown: no such ask.
            StoreUnavailable: the store failed.
        """
        who = "its asker" if by is None else by

        def change(row: AskRow, work: AskDoc) -> None:
            if row.is_open:
                work.close_withdrawn(
                    f"withdrawn by {who}: {reason}"[:1000], f"withdrawn: {who} withdrew it"[:1000]
                )
                if by is not None:
                    work.doc["withdrawnBy"] = by

        await self._apply(ask_id, change)

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        """Withdraw every open approval ask about ``txn_id``, as :meth:`withdraw` does
        each; return their ids. What a recovering coordinator calls after presuming
        abort [COORD-WITHDRAW]: the gateway's own durable asks say what is open, so
        an ask made just before its asker died is withdrawn too, though the asker
        never logged it.

        Raises:
            StoreUnavailable: the store failed; the asks withdrawn before stay withdrawn.
        """
        # In this gateway's lane: after the store work asked for before, so an ask being
        # stored as the transaction ended is found (and withdrawn) here.
        ask_ids = await self._stored(self._asks.open_for, AskKind.APPROVAL, txn_id)
        for ask_id in ask_ids:
            await self.withdraw(ask_id, reason)
        if ask_ids:
            _log.info("gateway %s: withdrew %d ask(s) of %s: %s", self._id, len(ask_ids),
                      txn_id, reason)  # fmt: skip
        return ask_ids

    async def agent_of(self, ask_id: str) -> str | None:
        """The agent an ask is for: the initiator of an approval group's plan, the
        requester of a call, the asker of a question (``None``: it names none).

        Raises:
            AskUnknown: no such ask.
            StoreUnavailable: the store failed or did not answer within its bound.
        """
        row = await self._asks.store.call(self._asks.get, ask_id)
        outer, inner = _AGENT_MEMBER[row.kind]
        named = row.doc.get(outer)
        agent = named.get(inner) if isinstance(named, Mapping) else None
        return agent if isinstance(agent, str) else None

    # -- an agent's side: one tool call ------------------------------------

    async def ask_call(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Ask people to approve one exact tool call; return the signed PendingVote, or
        the signed CallApproval if the call is decided already.

        The gateway reads the request and computes the terms people approve
        itself ([GW-CALL-TERMS]): the call's digest, the tool definition's,
        and the amount the call's own arguments hold at ``amountPointer``
        ([GW-CALL-AMOUNT]), against which it routes the address on behalf of
        ``onBehalfOf`` ([GW-CALL-ROUTE]). The pending vote names the request
        id as ``txnId``, the digest of the terms as ``planDigest`` and the
        group ``"call"``; people's votes bind the same. Asking again with the
        same requestId and the same terms returns the same ask
        ([GW-ASK-ONCE]); fewer eligible people than the address's quorum
        decides reject at once ([GW-FEW]). Escalation, SLAs and the deadline
        work as for an approval group.

        Raises:
            CallInvalid: the request cannot be read (``SHAPE``, ``ADDRESS``,
                ``DEFINITION``) or its arguments hold no amount at the pointer
                (``AMOUNT``); nothing was stored and nobody was asked.
            VersionUnsupported: the request names an unknown protocol version.
            StoreUnavailable: the store failed; nobody was asked.
        """
        parsed = parse_call_request(request)
        terms = call_terms(parsed)
        bound = terms_digest(terms)
        found = await self._stored(
            self._asks.find, AskKind.CALL, parsed.request_id, CALL_GROUP, bound
        )
        if found is not None:
            return await self.poll_call(found.ask_id)
        now = self._clock.now()
        decide_by = parse_time(parsed.decide_by)
        principal = self._principals.get(parsed.requester)
        routed = route_call(
            terms,
            self._directory,
            gateway_id=self._id,
            key=self._key,
            clock=self._clock,
            initiator_principal=principal,
            deadline_seconds=max(0.0, (decide_by - now).total_seconds()),
            passkey_required=parsed.passkey,
        )
        doc = self._new_doc(_new_ask_id(), parsed.request_id, bound, CALL_GROUP, decide_by)
        work = self._opened(
            AskKind.CALL,
            doc,
            routed,
            now,
            request=parsed.to_wire(),
            terms=terms.to_wire(),
            approvalId=_new_approval_id(),  # [GW-CALL-APPROVAL] one id, whatever the outcome
            action=terms.action,
            onBehalfOf=terms.on_behalf_of,
            initiatorPrincipal=principal,
            passkey=parsed.passkey,
        )
        return approval_result(await self._create(work, AskKind.CALL, now))

    async def poll_call(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Return the signed PendingVote while the call is undecided, else the signed
        CallApproval (approve, reject, or a withdrawn reject at the deadline
        [GW-DEADLINE]). Waits as :meth:`poll` does ([GW-POLL]).

        Raises:
            AskUnknown: no such ask, or it is not about a tool call.
            StoreUnavailable: the store failed.
        """
        return approval_result(of_kind(await self._poll(ask_id, wait_seconds), AskKind.CALL))

    # -- the channels' side ---------------------------------------------

    async def submit_vote(self, ask_id: str, vote: Mapping[str, Any]) -> None:
        """Record a person's signed HumanVote; it may decide the group.

        A vote with a passkey assertion, and any approve in a group that needs
        one, is checked as [GW-PASSKEY] says; its nonce is spent and the
        passkey's sign count kept in the same transaction as the vote.

        Raises:
            ResponseRefused: nothing was recorded; ``data.reason`` is one of
                ``SHAPE``, ``WRONG_KIND``, ``CLOSED``, ``LATE``, ``MISMATCH``,
                ``TWICE``, ``NOT_ASKED``, ``SIGNATURE``, ``PASSKEY`` (with
                ``data.passkeyReason``).
            AskUnknown: no such ask.
            StoreUnavailable: the store failed; nothing was recorded.
        """
        parsed = parse_vote(ask_id, vote)
        spends: list[Spend] = []

        def change(row: AskRow, work: AskDoc) -> None:
            spends.clear()
            now = self._clock.now()
            check_vote(row, work, parsed, now)
            card = self.card(parsed.human)
            check_signature(ask_id, vote, parsed.human, card, kind=row.kind)
            entry = work.person(parsed.human)
            spend = check_passkey(
                row, entry, vote, parsed, card, book=self._passkeys, origins=self._origins, now=now
            )
            spends.extend([] if spend is None else [spend])
            work.record_vote(dict(vote), None if card is None else self._signed_card(card))

        def also(conn: Connection) -> None:
            for spend in spends:
                spend(conn)

        await self._apply(ask_id, change, also=also)
        _log.info(
            "ask %s: %s voted %s", ask_id, parsed.human, parsed.decision,
            extra={"askId": ask_id},
        )  # fmt: skip

    async def decline(self, ask_id: str, human: str) -> None:
        """Pass the ask from ``human`` to the next eligible person ([GW-DECLINE]).

        Raises:
            ResponseRefused: ``CLOSED`` or ``NOT_ASKED``; nothing was recorded.
            AskUnknown: no such ask.
            StoreUnavailable: the store failed.
        """

        def change(row: AskRow, work: AskDoc) -> None:
            require_open(row, human)
            require_asked(row, work, human)
            work.decline(human)

        await self._apply(ask_id, change)

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a question of one person its address routes to; return the signed
        pending (``txnId`` = question id, ``planDigest`` = question digest,
        ``groupId`` = ``"question"``) or the signed Answer. Asking the same
        question again returns the same ask ([GW-ASK-ONCE]).

        Raises:
            QuestionInvalid: not a valid question.
            AddressInvalid: its address does not resolve to people.
            AskWithdrawn: nobody may answer it ([GW-FEW]).
            StoreUnavailable: the store failed; nobody was asked.
        """
        parsed = parse_question(question)
        qdigest = question_digest(parsed)
        found = await self._stored(
            self._asks.find, AskKind.QUESTION, parsed.question_id, QUESTION_GROUP, qdigest
        )
        if found is not None:
            return await self.poll_question(found.ask_id)
        now = self._clock.now()
        deadline = parse_time(parsed.decide_by)
        resolution = resolve_question(
            self._directory,
            parsed.address,
            deadline_seconds=max(0.0, (deadline - now).total_seconds()),
        )
        ask_id = _new_ask_id()
        doc = {
            **self._new_doc(ask_id, parsed.question_id, qdigest, QUESTION_GROUP, deadline),
            "kind": AskKind.QUESTION.value,
            "question": parsed.to_wire(),
            "needed": 1,
            "people": _people(resolution),
        }
        work = AskDoc(doc, self._context(now), owned=True)
        if not resolution.candidates:  # [GW-FEW]
            work.close_withdrawn("needs 1, only 0 eligible", "")
        else:
            work.fill()
        row = await self._create(work, AskKind.QUESTION, now)
        return question_result(row)

    async def submit_answer(self, ask_id: str, human: str, value: Any) -> None:
        """Record ``human``'s answer once it fits the question, as a signed Answer.

        Raises:
            AnswerInvalid: the answer does not fit; nothing was signed, the
                question stays open ([GW-ANSWER]).
            ResponseRefused: ``WRONG_KIND``, ``CLOSED``, ``LATE`` or ``NOT_ASKED``.
            AskUnknown: no such ask.
            StoreUnavailable: the store failed.
        """

        def change(row: AskRow, work: AskDoc) -> None:
            if row.kind is not AskKind.QUESTION:
                raise refused(ask_id, human, "WRONG_KIND", "this ask takes votes, not answers")
            require_open(row, human)
            require_in_time(row, human, self._clock.now())
            require_asked(row, work, human)
            answer = sign_answer(
                self._key,
                self._id,
                ask_id,
                parse_question(row.doc["question"]),
                value,
                human,
                row.doc.get("declined", []),
                self._clock.now(),
            )
            work.answered(answer, human)

        await self._apply(ask_id, change)
        _log.info("ask %s: %s answered", ask_id, human, extra={"askId": ask_id})

    async def poll_question(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Return the signed pending while the question is open, else the signed Answer.

        Raises:
            AskWithdrawn: the question closed unanswered (deadline, or withdrawn).
            AskUnknown: no such ask, or it is not a question.
            StoreUnavailable: the store failed.
        """
        return question_result(of_kind(await self._poll(ask_id, wait_seconds), AskKind.QUESTION))

    # -- time ------------------------------------------------------------

    async def tick(self) -> None:
        """Act on every open ask that is due: escalate past SLAs, close at deadlines.

        Raises:
            StoreUnavailable: the store failed; what was acted on before stays done.
        """
        for row in await self._stored(self._asks.due, self._clock.now()):
            with contextlib.suppress(AskConflict):  # another gateway is acting on it
                await self._apply(row.ask_id, _tick)

    async def run_until(self, stop: asyncio.Event) -> None:
        """Tick whenever an ask falls due, until ``stop`` is set. A store that fails
        is tried again after :data:`STORE_RETRY_SECONDS` (or a change), not given up on.

        On PostgreSQL it also listens, meanwhile, for the asks other processes
        write, and wakes this gateway's long polls on them at once [GW-LISTEN].
        """
        listening = (
            None if self._listener is None else asyncio.create_task(self._listener.run(stop))
        )
        sending = (
            asyncio.create_task(self._sender.run(stop, self._outbox_recheck()))
            if self._push
            else None
        )
        try:
            while not stop.is_set():
                self._changed.clear()
                try:
                    await self.tick()
                    due = await self._stored(self._asks.next_due)
                except StoreUnavailable as error:
                    _log.warning(
                        "gateway %s: its loop could not reach the store: %s", self._id, error
                    )
                    due = self._clock.now() + timedelta(seconds=STORE_RETRY_SECONDS)
                waits: list[Awaitable[Any]] = [stop.wait(), self._changed.wait()]
                if due is not None:
                    waits.append(self._clock.sleep_until(due))
                await first_of(*waits)
        finally:
            for task in (listening, sending):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            await self._sender.close()

    def _outbox_recheck(self) -> float:
        """How often the sender looks for notices another process wrote (or left)."""
        if self._recheck is not None:
            return self._recheck.total_seconds()
        return OUTBOX_RECHECK_SECONDS

    @property
    def listening(self) -> bool:
        """Whether this gateway hears other processes' ask writes now (its loop running
        on PostgreSQL) [GW-LISTEN]."""
        return self._listener is not None and self._listener.listening

    @property
    def listen_failures(self) -> int:
        """How many times listening for other processes' ask writes failed (PostgreSQL;
        0 elsewhere) [GW-LISTEN]."""
        return 0 if self._listener is None else self._listener.failures

    def start(self) -> None:
        """Run :meth:`run_until` in the background until :meth:`stop`."""
        if self._loop is None or self._loop.done():
            self._stop = asyncio.Event()
            self._loop = asyncio.create_task(self.run_until(self._stop))

    async def stop(self) -> None:
        """Stop the background loop started by :meth:`start`, and wait for it."""
        if self._loop is not None:
            self._stop.set()
            await self._loop
            self._loop = None

    # -- internals -------------------------------------------------------

    async def _stored(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on the store's workers, off the event loop, after this gateway's
        store work asked for before it, within the store's bound ([STORE-OFF-LOOP]).

        Raises:
            StoreUnavailable: no answer in time, or what ``fn`` raises.
        """
        return await self._asks.store.call_in(self._lane, fn, *args)

    def _context(self, now: datetime) -> Context:
        reaches = self._reaches if self._push else None
        served = frozenset(self._channels)
        push = frozenset(self._push)
        return Context(self._id, self._key, served, self._directory, now, reaches, push)

    def _reaches(self, channel: str, human: str) -> bool:
        """Whether ``channel`` holds contact details for ``human`` (in-process channels
        reach everyone they serve)."""
        push = self._push.get(channel)
        return push is None or push.reaches(human)

    def _link(self, notice_id: str, ask_id: str) -> str | None:
        """The single-use link to ``ask_id`` on the approver page a notice carries."""
        if self._approver_url is None:
            return None
        return f"{self._approver_url}/link/{link_token(self._key, notice_id)}"

    def _notices(self, row: AskRow, effects: Effects, now: datetime) -> list[OutboxRow]:
        """The outbox rows the change that left ``row`` writes in its transaction."""
        return notice_rows(row, effects, self._push, self._id, now, self._approver_url)

    async def _channel_failed(self, ask_id: str, human: str, channel: str, reason: str) -> None:
        """[GW-CHANNEL-NEXT] the outbox could not reach ``human`` over ``channel``."""

        def change(row: AskRow, work: AskDoc) -> None:
            work.channel_failed(human, channel, reason)

        try:
            await self._apply(ask_id, change)
        except (AskConflict, AskUnknown) as error:
            _log.warning("ask %s: moving %s off %s failed: %s", ask_id, human, channel, error)

    async def open_link(self, token: str) -> str:
        """Spend a notice's single-use link to the approver page; return the ask it is
        about ([OUTBOX-LINK]). The link names the ask, nothing more: the page still signs
        the person in with their passkey.

        Raises:
            LinkRefused: ``INVALID`` (not a link this gateway signed for a notice in its
                outbox) or ``USED`` (opened before).
            StoreUnavailable: the store failed.
        """
        notice_id = read_link_token(self._key, token)
        outbox = self._sender.outbox
        row = None if notice_id is None else await self._stored(outbox.get, notice_id)
        if row is None:
            raise LinkRefused(
                "this link is not one this gateway sent; sign in on the approver page to "
                "see the asks waiting for you",
                reason="INVALID",
            )
        spent = await self._stored(outbox.use_link, row.notice_id, self._clock.now())
        if not spent and _checks.is_on("OUTBOX-LINK"):
            raise LinkRefused(
                "this link was opened before, and opens once; sign in on the approver page "
                "to see the asks waiting for you",
                reason="USED",
                ask_id=row.ask_id,
            )
        return row.ask_id

    @property
    def push_channel_types(self) -> frozenset[str]:
        """The channel types this gateway sends to through its outbox (webhook, e-mail)."""
        return frozenset(self._push)

    @property
    def outbox(self) -> OutboxSender:
        """The sender of this gateway's notices over push channels (its stats, its
        store rows), [OUTBOX]."""
        return self._sender

    def _new_doc(
        self,
        ask_id: str,
        subject: str,
        digest: str,
        group_id: str,
        decide_by: datetime,
    ) -> dict[str, Any]:
        now = self._clock.now()
        doc: dict[str, Any] = {
            "askId": ask_id,
            "txnId": subject,
            "planDigest": digest,
            "groupId": group_id,
            "decideBy": format_time(decide_by),
            "askedAt": format_time(now),
            "votes": [],
            "cards": {},
            "state": AskState.OPEN.value,
            "result": None,
        }
        return {**doc, "pending": pending_vote(doc, self._id, self._key, now)}

    def _approval_ask(
        self, request: ApprovalRequest, now: datetime, terms: Mapping[str, Any]
    ) -> AskDoc:
        """The new ask of ``request``'s group as :meth:`ask` stores it (not stored here),
        with ``terms`` (``terms`` and ``termsDigest``, or nothing) among its members."""
        principal = self._principals.get(request.plan.initiator)
        wire = request.plan.to_wire()  # dumped once: routed (digested) and stored
        routed = route(
            request.plan,
            request.plan_digest,
            request.group.group_id,
            self._directory,
            gateway_id=self._id,
            key=self._key,
            clock=self._clock,
            initiator_principal=principal,
            deadline_seconds=max(0.0, (request.decide_by - now).total_seconds()),
            wire=wire,
        )
        doc = self._new_doc(
            _new_ask_id(),
            request.txn_id,
            request.plan_digest,
            request.group.group_id,
            request.decide_by,
        )
        return self._opened(
            AskKind.APPROVAL,
            doc,
            routed,
            now,
            plan=wire,
            action=request.group.requirement.action,
            onBehalfOf=request.plan.on_behalf_of,
            initiatorPrincipal=principal,
            passkey=routed.passkey,
            **terms,
        )

    def _opened(
        self,
        kind: AskKind,
        doc: dict[str, Any],
        routed: Routed,
        now: datetime,
        **members: Any,
    ) -> AskDoc:
        """A new approval or call ask routed as ``routed``, its first people asked, or
        decided reject at once when too few are eligible ([GW-FEW]); not stored yet."""
        resolution = routed.resolution
        work = AskDoc(
            {
                **doc,
                "kind": kind.value,
                **members,
                "needed": resolution.needed,
                "amounts": {c: str(v) for c, v in sorted(routed.amounts.items())},
                "routing": routed.record,
                "people": _people(resolution),
            },
            self._context(now),
            owned=True,  # built here: the plan, terms and routing record are fresh too
        )
        if not resolution.enough and _checks.is_on("GW-FEW"):  # [GW-FEW]
            eligible = len(resolution.candidates)
            work.decide("reject", f"needs {resolution.needed}, only {eligible} eligible")
        else:
            work.fill()
        return work

    async def _create(self, work: AskDoc, kind: AskKind, now: datetime) -> AskRow:
        doc = work.doc
        new = AskRow(
            ask_id=doc["askId"],
            kind=kind,
            txn_id=doc["txnId"],
            group_id=doc["groupId"],
            plan_digest=doc["planDigest"],
            state=AskState(doc["state"]),
            decide_by=work.decide_by,
            next_due=work.next_due() if doc["state"] == AskState.OPEN.value else None,
            doc=doc,
        )
        if self._push:
            notices = self._notices(new, work.effects, now)
            row = await self._stored(self._create_with, new, now, notices)
        else:
            row = await self._stored(self._asks.create, new, now)
        if row.ask_id == doc["askId"]:  # ours, not one another gateway made first
            await self._act(row, work.effects)
        return row

    def _create_with(self, row: AskRow, now: datetime, notices: list[OutboxRow]) -> AskRow:
        return self._asks.create(row, now, notices=notices)

    def _settle(self, ask_id: str) -> tuple[AskRow, Effects]:
        """Read the ask; if it is due, act on it first (effects left to the caller)."""
        row = self._asks.get(ask_id)
        if row.is_open and row.next_due is not None and row.next_due <= self._clock.now():
            with contextlib.suppress(AskConflict):
                return self._change(ask_id, _tick)
        return row, Effects()

    async def _poll(self, ask_id: str, wait_seconds: float) -> AskRow:
        until = self._clock.now() + timedelta(seconds=max(0.0, wait_seconds))
        while True:
            # Watch before reading: a change this gateway records while the read is on a
            # store worker wakes the wait below instead of passing unseen.
            with self._watching(ask_id) as changed:
                row, effects = await self._stored(self._settle, ask_id)
                await self._act(row, effects)
                if not row.is_open or self._clock.now() >= until:
                    return row
                wake = until if row.next_due is None else min(until, row.next_due)
                if self._recheck is not None:  # [GW-RECHECK] another process may have changed it
                    wake = min(wake, self._clock.now() + self._recheck)
                await first_of(changed, self._clock.sleep_until(wake))
            stored = None if changed.cancelled() else changed.result()
            if stored is not None and not stored.is_open:
                # This gateway just stored the ask closed, and acted on it: a closed ask
                # does not change, so reading it back would only read the same row.
                return stored

    @contextlib.contextmanager
    def _watching(self, ask_id: str) -> Iterator[asyncio.Future[AskRow | None]]:
        """A future done when this gateway changes the ask, for the ``with`` block: with
        the row it stored, when the change came with one."""
        future: asyncio.Future[AskRow | None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(ask_id, []).append(future)
        try:
            yield future
        finally:
            waiters = self._waiters.get(ask_id, [])
            if future in waiters:
                waiters.remove(future)
            if not waiters:
                self._waiters.pop(ask_id, None)

    def _change(
        self, ask_id: str, change: _Change, also: _Also | None = None
    ) -> tuple[AskRow, Effects]:
        """Apply ``change`` to the stored ask and store it (running ``also`` in the same
        transaction), redoing it on a fresh read if another gateway updated the ask
        meanwhile. Runs on a store worker (:meth:`_apply`), off the event loop: so do
        ``change`` and ``also``."""
        for _ in range(CONFLICT_RETRIES):
            row = self._asks.get(ask_id)
            now = self._clock.now()
            work = AskDoc(row.doc, self._context(now))
            change(row, work)
            if work.doc == row.doc:
                return row, work.effects
            is_open = work.doc["state"] == AskState.OPEN.value
            updated = replace(
                row,
                doc=work.doc,
                state=AskState(work.doc["state"]),
                next_due=work.next_due() if is_open else None,
                decide_by=work.decide_by,
            )
            notices = self._notices(updated, work.effects, now) if self._push else []
            try:
                return self._asks.update(updated, now, also=also, notices=notices), work.effects
            except AskConflict:
                continue
        raise AskConflict(
            f"ask {ask_id} kept changing under this gateway ({CONFLICT_RETRIES} tries); try again",
            ask_id=ask_id,
        )

    async def _apply(self, ask_id: str, change: _Change, also: _Also | None = None) -> AskRow:
        row, effects = await self._stored(self._change, ask_id, change, also)
        await self._act(row, effects)
        return row

    async def _act(self, row: AskRow, effects: Effects) -> None:
        """Say over the channels what the stored change means, then wake the waiters."""
        people = {p["id"]: p for p in row.doc["people"]}
        push = self._push
        if push and (
            any(people[h]["channel"] in push for h in effects.deliver)
            or any(channel in push for _, channel in effects.withdraw)
            or any(people[h].get("channel") in push for h, _ in effects.inform)
        ):
            self._sender.kick()  # the change stored its notices in the outbox
        for human in effects.deliver:
            entry = people[human]
            if entry["channel"] in push:
                continue
            try:
                await self._told[entry["channel"]].deliver(notice(row, entry), self)
            except Exception as exc:  # the person misses their SLA; the gateway escalates
                _log.warning(
                    "ask %s: delivery over %s failed: %s", row.ask_id, entry["channel"], exc,
                    extra={"askId": row.ask_id},
                )  # fmt: skip
                self.channel_errors.append(exc)
            else:
                _log.info(
                    "ask %s delivered to %s over %s", row.ask_id, human, entry["channel"],
                    extra={"askId": row.ask_id, "txnId": row.txn_id},
                )  # fmt: skip
        for human, channel in effects.withdraw:
            if channel in push:
                continue
            try:
                await self._told[channel].withdraw(row.ask_id, human)
            except Exception as exc:  # withdrawing is a courtesy; the ask is closed anyway
                _log.info(
                    "ask %s: withdrawing over %s failed: %s", row.ask_id, channel, exc,
                    extra={"askId": row.ask_id},
                )  # fmt: skip
                self.channel_errors.append(exc)
        if not row.is_open:
            _log.debug(
                "ask %s is %s", row.ask_id, row.state.value,
                extra={"askId": row.ask_id, "txnId": row.txn_id, "state": row.state.value},
            )  # fmt: skip
        if effects.deliver or effects.withdraw or not row.is_open:
            self._notify(row.ask_id, row)

    def _notify(self, ask_id: str, row: AskRow | None = None) -> None:
        self._wake(ask_id, row)
        self._changed.set()

    def _wake(self, ask_id: str, row: AskRow | None = None) -> None:
        """Wake the long polls waiting on ``ask_id``: each reads the ask again, or takes
        ``row``, the ask as this gateway just stored it, if that closed it."""
        for future in self._waiters.pop(ask_id, []):
            if not future.done():
                future.set_result(row)

    def _heard(self, ask_id: str | None) -> None:
        """Another process wrote ask ``ask_id`` (``None``: any ask, unheard) [GW-LISTEN].
        The loop is not woken: that process acts on what it wrote."""
        for waited in list(self._waiters) if ask_id is None else [ask_id]:
            self._wake(waited)

    def _signed_card(self, card: HumanCard) -> dict[str, Any]:
        """The card as the directory signed it."""
        if isinstance(self._directory, Directory):
            return self._directory.signed(card.id)
        return card.to_wire()  # a verified card's normal form is what its directory signed


def _people(resolution: Resolution) -> list[dict[str, Any]]:
    """An ask's people as routed: the ranked candidates, then everyone passed over."""
    return [person_entry(c.card) for c in resolution.candidates] + [
        {"id": e.id, "status": "excluded", "rule": e.rule.value, "detail": e.detail}
        for e in resolution.excluded
    ]


def _tick(row: AskRow, work: AskDoc) -> None:
    if row.is_open:
        work.tick()


def _new_ask_id() -> str:
    return "ask-" + secrets.token_urlsafe(18)


def _new_approval_id() -> str:
    return "apv-" + secrets.token_urlsafe(18)
