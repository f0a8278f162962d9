"""Phase 1: the votes and approvals a decision rests on, in the order the mode says.

The mode is chosen first ([COORD-MODE], :mod:`hatp.coordinator._modes`).
Parallel prepares every branch and asks every approval group at once;
approval-first asks people to approve every step's quoted price and
preview first and prepares after ([COORD-QUOTE]); holds-first prepares
first and asks people to approve the holds' ends and each step's signed
preview with the plan ([COORD-TERMS]). In both, what people approve beyond
the plan is one ``txn.terms`` their votes bind by digest ([COORD-PREVIEW]).
Every answer is checked before it counts (:mod:`hatp.coordinator._vetting`),
the prepared holds are kept while people decide and a lost one is placed
again (:mod:`hatp.coordinator._holds`), and the approval deadline shrinks to
fit inside the holds, the gateway told. The first problem ends phase 1; what
has not answered is recorded as such.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from hatp import _checks
from hatp._faults import fault_point
from hatp.clock import Clock, format_time, parse_time
from hatp.coordinator._calls import backoff, bounded
from hatp.coordinator._gateway import ApprovalRequest, Gateway, gateway_for, withdraw_open_asks
from hatp.coordinator._holds import HoldKeeper, approve_by, deadline_body
from hatp.coordinator._modes import ModeChooser
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._vetting import describe, vet_approval, vet_pending, vet_vote
from hatp.errors import StaleFence, Unavailable
from hatp.evidence import Keyring, SigningKey, digest
from hatp.model import (
    ApprovalGroup,
    Branch,
    Certainty,
    EffectPreview,
    HoldTerms,
    Mode,
    Tier,
    TxnEvent,
    meets,
)
from hatp.participant import Participant

_log = logging.getLogger(__name__)


class Phase1:
    """Gathers one transaction's votes and approvals; the coordinator decides on them."""

    def __init__(
        self,
        *,
        key: SigningKey,
        participants: Mapping[str, Participant],
        gateway: Gateway,
        keyring: Keyring,
        clock: Clock,
        holds: HoldKeeper,
        call_timeout: float,
        poll_seconds: float,
        commit_allowance: float,
        retry_delay: float = 0.05,
        prepare_attempts: int = 3,
    ) -> None:
        self._key = key
        self._participants = participants
        self._gateway = gateway
        self._keyring = keyring
        self._clock = clock
        self._holds = holds
        self._timeout = call_timeout
        self._poll = poll_seconds
        self._allowance = commit_allowance
        self._delay = retry_delay
        self._prepare_attempts = max(1, prepare_attempts)
        self._modes = ModeChooser(
            participants=participants,
            gateway=gateway,
            keyring=keyring,
            call_timeout=call_timeout,
            commit_allowance=commit_allowance,
        )

    def _previews_short(self, run: TxnRun, shown: Mapping[str, EffectPreview | None]) -> str | None:
        """Why people may not be asked: a step's preview (``shown``, by branch) says less
        than the plan's policy, or an approval group's, asks of its tier
        [COORD-PREVIEW-MIN]; ``None`` when every preview says enough."""
        policy = run.plan.preview_policy
        for branch in run.plan.branches:
            need = policy.required(branch.tier)
            preview = shown.get(branch.branch_id)
            if meets(preview, need) or not _checks.is_on("COORD-PREVIEW-MIN"):
                continue
            said = "no preview" if preview is None else f"a {preview.certainty.value} preview"
            if preview is not None and preview.certainty is Certainty.PREDICTED:
                said += " with no bound" if preview.bound is None else ""
            return (
                f"{branch.branch_id} gives {said}; {_asker(run, branch.tier, need)} asks at "
                f"least {need} of a {branch.tier.value} step, so nobody was asked"
            )
        return None

    def preview_changed(self, run: TxnRun) -> str | None:
        """Why a step may not be committed because its yes vote previews another change
        than people approved in the terms (holds-first: a hold placed again since;
        approval-first: a prepare unlike its quote) [COORD-PREVIEW]; ``None`` when every
        step previews what was approved. A step approved as ``none`` (nobody could say
        what it would change) is held to nothing here."""
        shown = (run.terms or {}).get("previews") or {}
        for branch_id, approved in sorted(shown.items()):
            if approved.get("certainty") == Certainty.NONE.value:
                continue
            receipt = run.prepares.get(branch_id)
            now = None if receipt is None or receipt.preview is None else receipt.preview
            if (now is None or now.to_wire() != approved) and _checks.is_on("COORD-PREVIEW"):
                said = "nothing" if now is None else repr(now.summary)
                if now is not None and now.summary == approved.get("summary"):
                    said += f" with other changes ({_first_difference(approved, now)})"
                return (
                    f"{branch_id} now previews {said}, not what people approved "
                    f"({approved.get('summary')!r}): nothing is committed on a changed step"
                )
        return None

    async def relive_lapsed(self, run: TxnRun) -> str | None:
        """Place again every hold whose lease ended before the decision [COORD-REPLACE];
        return the problem if one cannot be, or lapsed still [COORD-LEASE]."""
        while lapsed := run.lapsed_hold(self._clock.now()):
            branch_id, lease = lapsed
            problem = await self._holds.replace(run, run.plan.branch(branch_id))
            if problem is not None:
                ended = f"the hold's lease ended at {lease} before the decision"
                return f"{branch_id}: {ended}, and {problem}"
        return None

    async def gather_votes(self, run: TxnRun) -> str | None:
        """Choose the mode [COORD-MODE], then prepare and ask in its order.

        Returns the first problem, which decides abort; ``None`` when every
        branch voted yes and every group approved in time.
        """
        decide_by = run.approve_by = parse_time(run.plan.deadlines.decide_by)
        choice, problem = await self._modes.choose(run, decide_by)
        if choice is None:
            return problem
        run.note(self._key, TxnEvent.MODE, **choice.body)
        run.quotes = choice.quotes
        branches, groups = run.plan.branches, run.plan.approvals
        if choice.chosen is Mode.APPROVAL_FIRST:
            self._quote_deadline(run)
            quoted = {bid: quote.preview for bid, quote in run.quotes.items()}
            if short := self._previews_short(run, quoted):
                return short
            self._state_terms(run, quoted)
            return await self._gather(run, decide_by, (), groups) or await self._gather(
                run, decide_by, branches, (), fit=False
            )
        if choice.chosen is Mode.HOLDS_FIRST:
            if placing := await self._gather(run, decide_by, branches, ()):
                return placing
            prepared = {bid: receipt.preview for bid, receipt in run.prepares.items()}
            if short := self._previews_short(run, prepared):
                return short
            self._state_terms(run, prepared)
            holds = [b for b in branches if b.tier is Tier.HOLD]
            return await self._gather(run, decide_by, (), groups, kept=holds)
        return await self._gather(run, decide_by, branches, groups)

    def _state_terms(self, run: TxnRun, shown: Mapping[str, EffectPreview | None]) -> None:
        """The terms people approve with the plan, recorded as ``txn.terms``: every
        hold's end and the approval deadline inside them (holds-first
        [COORD-TERMS]; none is placed yet in approval-first), and what each step will
        change as its participant signed it, in its yes vote or its quote (``shown``)
        [COORD-PREVIEW]."""
        holds = []
        for branch in run.plan.branches:
            receipt = run.prepares.get(branch.branch_id)
            if branch.tier is Tier.HOLD and receipt is not None:
                holds.append(
                    {
                        "branchId": branch.branch_id,
                        "leaseExpiresAt": receipt.lease_expires_at,
                        "holdHorizon": receipt.hold_horizon,
                    }
                )
        previews = {
            bid: preview.to_wire()
            for bid, preview in shown.items()
            if preview is not None and _checks.is_on("COORD-PREVIEW")
        }
        terms = HoldTerms.model_validate(
            {
                "kind": "hold-terms",
                "planDigest": run.digest,
                "holds": holds,
                "approveBy": format_time(run.approve_by),
                "previews": previews,
            }
        ).to_wire()
        run.terms, run.terms_digest = terms, digest(terms)
        run.note(self._key, TxnEvent.TERMS, terms=terms, termsDigest=run.terms_digest)

    def _quote_deadline(self, run: TxnRun) -> None:
        """Approval-first: an approval must come while every quote is still valid
        [COORD-QUOTE]; the asks, opened after this, carry the deadline."""
        for branch_id, quote in run.quotes.items():
            if quote.valid_until is None:
                continue
            latest = parse_time(quote.valid_until) - timedelta(seconds=self._allowance)
            if latest < run.approve_by:
                run.approve_by = latest
                run.note(self._key, TxnEvent.DEADLINE, **deadline_body(latest, branch_id))

    async def _gather(
        self,
        run: TxnRun,
        decide_by: datetime,
        branches: Sequence[Branch],
        groups: Sequence[ApprovalGroup],
        *,
        fit: bool = True,
        kept: Sequence[Branch] = (),
    ) -> str | None:
        """Prepare ``branches`` and ask ``groups`` at once; return the first problem.

        Each prepared hold is renewed while approvals are awaited
        [COORD-RENEW] (the holds in ``kept``, prepared before, from the
        start), and with ``fit`` the deadline shrinks to fit inside the
        holds [COORD-APPROVE-BY]; without it (approval-first, the approvals
        already in) it stays.
        """
        jobs: dict[asyncio.Task[str | None], tuple[TxnEvent, str]] = {}
        for branch in branches:
            jobs[asyncio.create_task(self._prepare(run, branch))] = (
                TxnEvent.PREPARED,
                branch.branch_id,
            )
        for group in groups:
            jobs[asyncio.create_task(self._ask(run, group))] = (TxnEvent.APPROVAL, group.group_id)
        keepers = {asyncio.create_task(self._holds.keep(run, b)): b.branch_id for b in kept}
        deadline: asyncio.Task[Any] = asyncio.create_task(self._clock.sleep_until(run.approve_by))
        replaced: asyncio.Task[Any] = asyncio.create_task(run.replaced.wait())
        pending: set[asyncio.Task[Any]] = set(jobs) | set(keepers)
        problem: str | None = None
        try:
            while pending - set(keepers) and problem is None:
                done, _ = await asyncio.wait(
                    pending | {deadline, replaced}, return_when=asyncio.FIRST_COMPLETED
                )
                pending -= done
                problem = next(
                    (t.result() for t in done if (t in jobs or t in keepers) and t.result()), None
                )
                started = self._keep_holds(run, done, jobs, keepers, pending)
                if replaced in done:
                    run.replaced.clear()
                    replaced = asyncio.create_task(run.replaced.wait())
                if problem is None and fit and (started or replaced in done):
                    deadline = await self._shrink_deadline(run, decide_by, deadline)
                if deadline.done() and problem is None:
                    if _checks.is_on("COORD-DEADLINE"):
                        problem = self._deadline_passed(run, decide_by)
                    else:  # the naive coordinator: keep waiting, however long it takes
                        deadline = asyncio.create_task(asyncio.Event().wait())
        finally:
            deadline.cancel()
            replaced.cancel()
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, deadline, replaced, return_exceptions=True)
        unnamed: list[ApprovalGroup] = []
        for task in pending:
            if task in keepers:
                continue
            event, name = jobs[task]
            if event is TxnEvent.APPROVAL and name in run.asks:
                await self._close_ask(run, name, run.approve_by, problem or "")
            else:
                self._note_unanswered(run, event, name, problem or "")
                if event is TxnEvent.APPROVAL:
                    unnamed.append(_group(run, name))
        await self._withdraw_unnamed(run, unnamed, problem or "")
        return problem

    async def _withdraw_unnamed(
        self, run: TxnRun, groups: Sequence[ApprovalGroup], why: str
    ) -> None:
        """Withdraw the asks of groups whose ask was stopped before the gateway's pending
        vote named it: the gateway may have stored it all the same [COORD-WITHDRAW]. Each
        such group's gateway withdraws every ask of the transaction it still holds open
        (the named ones were closed just before)."""
        reason = f"transaction {run.txn_id} decided without this approval: {why}"[:1000]
        gateways = {id(g): g for g in (gateway_for(self._gateway, group) for group in groups)}
        await withdraw_open_asks(gateways.values(), run.txn_id, reason)

    def _keep_holds(
        self,
        run: TxnRun,
        done: set[asyncio.Task[Any]],
        jobs: dict[asyncio.Task[str | None], tuple[TxnEvent, str]],
        keepers: dict[asyncio.Task[str | None], str],
        pending: set[asyncio.Task[Any]],
    ) -> bool:
        """Start renewing each hold just prepared [COORD-RENEW]; return whether any was."""
        started = False
        for task in done:
            event, name = jobs.get(task, (None, ""))
            branch = next((b for b in run.plan.branches if b.branch_id == name), None)
            if event is not TxnEvent.PREPARED or branch is None or branch.tier is not Tier.HOLD:
                continue
            if name in run.prepares:
                keeper = asyncio.create_task(self._holds.keep(run, branch))
                keepers[keeper] = name
                pending.add(keeper)
                started = True
        return started

    async def _shrink_deadline(
        self, run: TxnRun, decide_by: datetime, deadline: asyncio.Task[Any]
    ) -> asyncio.Task[Any]:
        """Move the approval deadline earlier if a new hold ends sooner [COORD-APPROVE-BY]."""
        if not _checks.is_on("COORD-DEADLINE"):  # the naive coordinator waits, however long
            return deadline
        moment, basis = approve_by(run, decide_by, self._allowance)
        if moment >= run.approve_by or deadline.done():
            return deadline
        run.approve_by = moment
        run.note(self._key, TxnEvent.DEADLINE, **deadline_body(moment, basis))
        deadline.cancel()
        await self._tighten_asks(run)
        return asyncio.create_task(self._clock.sleep_until(moment))

    async def _tighten_asks(self, run: TxnRun) -> None:
        """Tell the gateway the approval deadline moved earlier, for every open ask
        [COORD-APPROVE-BY]: it withdraws them there, and refuses a later vote."""
        for name, ask_id in run.asks.items():
            if name in run.decided_asks:
                continue
            await self._tighten(run, _group(run, name), ask_id)

    def _deadline_passed(self, run: TxnRun, decide_by: datetime) -> str:
        if run.approve_by >= decide_by:
            return f"the deadline decideBy {run.plan.deadlines.decide_by} passed"
        why = (
            "an approval after it would approve a price no longer quoted"
            if run.quotes
            else "an approval after it could not be committed before a hold's horizon"
        )
        return f"the approval deadline approveBy {format_time(run.approve_by)} passed: {why}"

    async def _close_ask(self, run: TxnRun, name: str, decide_by: datetime, why: str) -> None:
        """Withdraw a group's pending ask and record the gateway's signed last word on it.

        That is a withdrawn reject whose routing record shows who was asked
        ([COORD-WITHDRAW]), or the approval that beat the withdrawal.
        """
        ask_id = run.asks[name]
        group = _group(run, name)
        gateway = gateway_for(self._gateway, group)  # where it was asked [COORD-GATEWAYS]
        try:
            await gateway.withdraw(ask_id, why)
            answer = await gateway.poll(ask_id)
        except Exception as exc:  # the gateway withdraws it at the deadline on its own
            _log.info("txn %s: ask %s could not be read: %s", run.txn_id, ask_id, exc)
            answer = {}
        if answer.get("kind") != "approval":
            self._note_unanswered(run, TxnEvent.APPROVAL, name, why)
            return
        self._count_approval(run, group, answer, decide_by)

    def _note_unanswered(self, run: TxnRun, event: TxnEvent, name: str, why: str) -> None:
        problem = f"no answer before the decision ({why})"
        if event is TxnEvent.PREPARED:
            run.note(self._key, event, branchId=name, receipt=None, problem=problem)
        else:
            run.note(self._key, event, groupId=name, approval=None, problem=problem)

    async def _prepare(self, run: TxnRun, branch: Branch) -> str | None:
        try:
            receipt = await self._prepare_retried(run, branch)
        except StaleFence:
            raise
        except Exception as exc:  # any failure to vote yes is a no; fail closed
            failure = describe(exc, self._timeout)
            _log.info("txn %s: %s gave no yes vote: %s", run.txn_id, branch.branch_id, failure)
            run.note(self._key, TxnEvent.PREPARED, branchId=branch.branch_id, receipt=None,
                     problem=failure)  # fmt: skip
            return f"{branch.branch_id}: {failure}"
        parsed, problem = vet_vote(receipt, self._keyring, run, branch)
        run.note(
            self._key,
            TxnEvent.PREPARED,
            branchId=branch.branch_id,
            receipt=receipt,
            problem=problem,
        )
        fault_point(f"prepared.after:{branch.branch_id}")  # voted, nothing decided
        if problem is None and parsed is not None:
            run.prepares[branch.branch_id] = parsed
            return None
        return f"{branch.branch_id}: {problem}"

    async def _prepare_retried(self, run: TxnRun, branch: Branch) -> dict[str, Any]:
        """Ask the participant to prepare; a transient failure is asked again [COORD-PREPARE-RETRY].

        No answer, or an :class:`~hatp.errors.Unavailable` refusal (its store was
        down, a pooled connection had gone stale), is not a no: prepare is
        idempotent by txnId + branchId, so it is sent again with backoff, up to
        ``prepare_attempts`` times and never past the approval deadline. What is
        still failing then counts as a no vote.

        Raises:
            StaleFence, HatpError, TimeoutError, Exception: the last failure.
        """
        participant = self._participants[branch.participant]
        attempt = 1
        while True:
            try:
                return await bounded(
                    participant.prepare(run.plan, branch.branch_id, run.fence), self._timeout
                )
            except (Unavailable, TimeoutError) as exc:
                wake = self._clock.now() + timedelta(seconds=backoff(attempt, self._delay))
                if (
                    attempt >= self._prepare_attempts
                    or wake >= run.approve_by
                    or not _checks.is_on("COORD-PREPARE-RETRY")
                ):
                    raise
                _log.warning(
                    "txn %s: prepare of %s failed for now (attempt %d), asking again: %s",
                    run.txn_id,
                    branch.branch_id,
                    attempt,
                    describe(exc, self._timeout),
                )
                await self._clock.sleep_until(wake)
                attempt += 1

    async def _ask(self, run: TxnRun, group: ApprovalGroup) -> str | None:
        """Ask one group and poll its ask until the gateway signs the group's approval.

        The ask's deadline is the approval deadline in force; if it moved
        earlier while the ask was on its way, the gateway is told. The group is
        asked at its organisation's gateway, and its answers count only as signed
        by that gateway [COORD-GATEWAYS].
        """
        name = group.group_id
        gateway = gateway_for(self._gateway, group)
        request = ApprovalRequest(
            run.txn_id, run.plan, run.digest, group, run.approve_by, terms=run.terms
        )
        try:
            answer = await gateway.ask(request)
            while answer.get("kind") == "pending":
                pending, problem = vet_pending(
                    answer,
                    self._keyring,
                    gateway_id=gateway.gateway_id,
                    txn_id=run.txn_id,
                    group_id=name,
                    plan_digest=run.digest,
                )
                if problem is not None or pending is None:
                    return self._no_approval(run, name, problem)
                if run.asks.get(name) != pending.ask_id:
                    run.asks[name] = pending.ask_id
                    run.note(self._key, TxnEvent.PENDING, groupId=name, pending=answer)
                    if parse_time(pending.decide_by) > run.approve_by:
                        await self._tighten(run, group, pending.ask_id)
                answer = await gateway.poll(pending.ask_id, wait_seconds=self._poll)
        except Exception as exc:  # a gateway that cannot answer has not approved
            _log.info("txn %s: approval %s not given: %s", run.txn_id, name, exc)
            return self._no_approval(run, name, describe(exc, None))
        problem = self._count_approval(run, group, answer, run.approve_by)
        return None if problem is None else f"approval {name}: {problem}"

    async def _tighten(self, run: TxnRun, group: ApprovalGroup, ask_id: str) -> None:
        try:
            await gateway_for(self._gateway, group).tighten(ask_id, run.approve_by)
        except Exception as exc:  # the coordinator's own deadline still holds
            _log.info("txn %s: ask %s not tightened: %s", run.txn_id, ask_id, exc)

    def _no_approval(self, run: TxnRun, name: str, problem: str | None) -> str:
        """Record that group ``name`` gave no approval that counts, and why."""
        run.note(self._key, TxnEvent.APPROVAL, groupId=name, approval=None, problem=problem)
        return f"approval {name}: {problem}"

    def _count_approval(
        self, run: TxnRun, group: ApprovalGroup, answer: dict[str, Any], decide_by: datetime
    ) -> str | None:
        """Record the group's final approval, with the problem if it does not count: it
        must be signed by the gateway the group is asked at [COORD-GATEWAYS]."""
        name = group.group_id
        run.decided_asks.add(name)
        _, problem = vet_approval(
            answer,
            self._keyring,
            gateway_id=gateway_for(self._gateway, group).gateway_id,
            txn_id=run.txn_id,
            group=group,
            plan=run.plan,
            plan_digest=run.digest,
            ask_id=run.asks.get(name),
            decide_by=decide_by,
            terms_digest=run.terms_digest,
        )
        run.note(self._key, TxnEvent.APPROVAL, groupId=name, approval=answer, problem=problem)
        return problem


def _group(run: TxnRun, name: str) -> ApprovalGroup:
    """The plan's approval group ``name`` (a group the run asked, so it is there)."""
    return next(g for g in run.plan.approvals if g.group_id == name)


def _asker(run: TxnRun, tier: Tier, need: str) -> str:
    """Who asks ``need`` of a ``tier`` step: the plan, or the approval group whose own
    policy asks it [PLAN-PREVIEWS]."""
    if run.plan.previews is not None and run.plan.previews.required(tier) == need:
        return "the plan"
    for group in run.plan.approvals:
        if group.previews is not None and group.previews.required(tier) == need:
            return f"approval group {group.group_id!r}"
    return "the plan"


def _first_difference(approved: Mapping[str, Any], now: EffectPreview) -> str:
    """The first change that is not as approved, for a person reading why (the two
    summaries being the same)."""
    was: list[Mapping[str, Any]] = list(approved.get("changes") or [])
    for index, change in enumerate(now.changes):
        wire = change.to_wire()
        before = was[index] if index < len(was) else None
        if wire != before:
            field = "" if change.field is None else f" {change.field}"
            return (
                f"{change.resource}{field}: approved {_change_text(before)}, "
                f"now {_change_text(wire)}"
            )
    return f"{len(was)} changes approved, {len(now.changes)} now"


def _change_text(change: Mapping[str, Any] | None) -> str:
    if change is None:
        return "no such change"
    return f"{change.get('kind')} {change.get('before')!r} -> {change.get('after')!r}"
