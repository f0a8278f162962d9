"""The two-phase-commit coordinator.

Phase 1 first chooses its mode ([COORD-MODE], :mod:`hatp.coordinator._modes`):
parallel prepares every branch and asks every approval group at once;
approval-first asks for quoted prices first and prepares after; holds-first
prepares first and asks people to approve the holds' ends with the plan. Any no,
rejection, problem or a missed deadline decides abort. While it waits, the
prepared holds are renewed (a lost one is placed again), and the deadline is
``decideBy`` shrunk to fit inside the holds (``approveBy``, see
:mod:`hatp.coordinator._holds`). The
decision, with every vote and approval it rests on, is durable in the
decision log before phase 2 starts. Phase 2 commits the compensate steps, then the one final
step, then the holds. A refused compensate or final commit unwinds: undo what
ran, release the rest, ABORTED. No answer from a commit is not a failure:
the transaction is IN_DOUBT and the idempotent commit is retried.

Ownership of a transaction is a lease in the log with a fencing token; every
log write and every participant request carries the token, so a paused old
owner cannot act once another has taken over. After a crash, :meth:`recover`
finishes every open transaction from the log: presumed abort if nothing was
decided, otherwise phase 2 with the logged decision, continuing the same chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hatp import _checks
from hatp._faults import fault_point
from hatp.clock import Clock, format_time, parse_time
from hatp.coordinator._escalation import Escalator
from hatp.coordinator._gateway import ApprovalRequest, Gateway
from hatp.coordinator._holds import HoldKeeper, approve_by, deadline_body
from hatp.coordinator._modes import ModeChooser
from hatp.coordinator._phase2 import Phase2
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._vetting import describe, vet_approval, vet_pending, vet_vote
from hatp.errors import PlanInvalid, StaleFence
from hatp.evidence import Keyring, RecordWriter, SigningKey, digest
from hatp.model import (
    ApprovalGroup,
    Branch,
    Decision,
    HoldTerms,
    Mode,
    Plan,
    Tier,
    TxnEvent,
    TxnState,
    parse_plan,
)
from hatp.participant import Participant
from hatp.store import DecisionLog

__all__ = ["Coordinator", "Outcome"]


@dataclass(frozen=True)
class Outcome:
    """Where a transaction ended up when :meth:`Coordinator.run` or a recovery returned.

    ``state`` is final (committed, aborted) unless the run stopped early:
    ``in-doubt`` (the final step still has not answered; the log keeps it open
    for a later :meth:`Coordinator.recover`) or ``fenced`` set (another
    coordinator took the transaction over). ``record`` is the record so far;
    when fenced, the log's record, which the new owner writes.
    """

    txn_id: str
    state: TxnState
    reason: str
    record: dict[str, Any]
    fenced: bool = False

    @property
    def head(self) -> str | None:
        """The digest naming the record."""
        head = self.record.get("head")
        return head if isinstance(head, str) else None


class Coordinator:
    """Drives transactions: begin, prepare and ask, decide, commit or abort, recover.

    Args:
        coordinator_id: this coordinator's id; its key's issuer in the keyring.
        key: signs every record event.
        log: the durable decision log (the store layer).
        participants: every participant a plan may name, by id.
        gateway: where approvals are asked for.
        keyring: verifies receipts (issuer = participant id) and approvals
            (issuer = gateway id).
        clock: the one clock for deadlines, leases and record times.
        owner: this process's name in the log's leases (default: unique per process).
        lease_seconds: how long an ownership lease lasts without renewal.
        call_timeout: seconds to wait for one participant call.
        retry_delay: first wait before retrying a call that got no answer (doubling).
        retry_cap: the longest wait between retries.
        max_attempts: attempts per phase-2 call before leaving the transaction open.
        poll_seconds: how long one poll of a pending ask waits on the gateway
            (it returns early when the ask is decided).
        commit_allowance: seconds kept between the approval deadline and the
            first hold's horizon, for phase 2 to commit in [COORD-APPROVE-BY];
            also the commit time the mode choice allows for [COORD-MODE].
        max_replacements: how many times one lost hold is placed again [COORD-REPLACE].
    """

    def __init__(
        self,
        *,
        coordinator_id: str,
        key: SigningKey,
        log: DecisionLog,
        participants: Mapping[str, Participant],
        gateway: Gateway,
        keyring: Keyring,
        clock: Clock,
        owner: str | None = None,
        lease_seconds: float = 30.0,
        call_timeout: float = 10.0,
        retry_delay: float = 0.05,
        retry_cap: float = 2.0,
        max_attempts: int = 20,
        poll_seconds: float = 30.0,
        commit_allowance: float = 5.0,
        max_replacements: int = 2,
    ) -> None:
        self.coordinator_id = coordinator_id
        self.owner = owner or f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._key = key
        self._log = log
        self._participants = dict(participants)
        self._gateway = gateway
        self._keyring = keyring
        self._clock = clock
        self._lease = lease_seconds
        self._timeout = call_timeout
        self._poll = poll_seconds
        self._allowance = commit_allowance
        self._holds = HoldKeeper(
            key=key,
            participants=self._participants,
            keyring=keyring,
            clock=clock,
            call_timeout=call_timeout,
            max_replacements=max_replacements,
        )
        self._modes = ModeChooser(
            participants=self._participants,
            gateway=gateway,
            keyring=keyring,
            call_timeout=call_timeout,
            commit_allowance=commit_allowance,
        )
        self._phase2 = Phase2(
            key=key,
            log=log,
            participants=self._participants,
            keyring=keyring,
            clock=clock,
            call_timeout=call_timeout,
            retry_delay=retry_delay,
            retry_cap=retry_cap,
            max_attempts=max_attempts,
            holds=self._holds,
            escalator=Escalator(
                key=key, gateway=gateway, clock=clock, commit_allowance=commit_allowance
            ),
        )

    async def run(self, plan: Plan | Mapping[str, Any]) -> Outcome:
        """Begin a transaction for ``plan`` and drive it to its end.

        Raises:
            PlanInvalid: the plan breaks a rule, or names a participant this
                coordinator cannot reach (``UNKNOWN_PARTICIPANT``); nothing was logged.
            VersionUnsupported: the plan names an unknown protocol version.
            OutcomeConflict: a transaction with this id is already in the log.
        """
        parsed = parse_plan(plan)
        self._check_reachable(parsed)
        wire = parsed.to_wire()
        plan_digest = digest(wire)
        writer = RecordWriter(parsed.txn_id, self._clock)
        writer.append(
            TxnEvent.PLANNED.value,
            {
                "planDigest": plan_digest,
                "plan": wire,
                "coordinator": self.coordinator_id,
                "fence": 1,
            },
            self._key,
        )
        fence = self._log.create(
            parsed.txn_id,
            wire,
            plan_digest,
            self.owner,
            self._clock.now(),
            self._lease,
            writer.events(),
        )
        fault_point("log.planned")
        run = TxnRun(parsed, plan_digest, fence, writer, persisted=1)
        return await self._drive(run)

    async def recover(self) -> list[Outcome]:
        """Take over and finish every open transaction whose owner's lease has ended."""
        outcomes = []
        for txn_id in self._log.claimable(self._clock.now()):
            outcome = await self.resume(txn_id)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    async def resume(self, txn_id: str) -> Outcome | None:
        """Take over one open transaction and finish it; ``None`` if another owner holds it.

        Raises:
            TransactionUnknown: no such transaction in the log.
        """
        fence = self._log.acquire(txn_id, self.owner, self._clock.now(), self._lease)
        if fence is None:
            return None
        row = self._log.get(txn_id)
        events = self._log.events(txn_id)
        writer = RecordWriter.resume({"recordId": txn_id, "events": events}, self._clock)
        run = TxnRun(parse_plan(row.plan), row.plan_digest, fence, writer, len(events), row.state)
        run.restore(events)
        if row.state.finished:
            self._log.release(txn_id, self.owner, fence)
            return Outcome(txn_id, row.state, run.reason, self._log.record(txn_id))
        run.note(self._key, TxnEvent.TAKEN_OVER, owner=self.owner, fence=fence)
        if row.state is TxnState.ACTIVE:
            # Presumed abort: nothing was decided, so nothing may be committed.
            run.reason = "presumed abort: the previous owner stopped before deciding"
            run.note(self._key, TxnEvent.DECIDED, decision=Decision.ABORT.value, reason=run.reason)
            try:
                run.flush(self._log, state=TxnState.ABORTING, decision=Decision.ABORT)
            except StaleFence as exc:
                return self._fenced(run, exc)
            await self._withdraw_asks(run)
        return await self._drive(run)

    def record(self, txn_id: str) -> dict[str, Any]:
        """Return the transaction's record as logged so far.

        Raises:
            TransactionUnknown: no such transaction in the log.
        """
        return self._log.record(txn_id)

    def _check_reachable(self, plan: Plan) -> None:
        for index, branch in enumerate(plan.branches):
            if branch.participant not in self._participants:
                raise PlanInvalid(
                    "UNKNOWN_PARTICIPANT",
                    f"branch {branch.branch_id!r} names participant {branch.participant!r}, "
                    "which this coordinator cannot reach; known: "
                    + ", ".join(sorted(self._participants)),
                    where=f"/branches/{index}/participant",
                )

    async def _drive(self, run: TxnRun) -> Outcome:
        keeper = asyncio.create_task(self._keep_lease(run))
        try:
            if run.state is TxnState.ACTIVE:
                await self._decide(run)
            await self._phase2.finish(run)
        except StaleFence as exc:
            return self._fenced(run, exc)
        finally:
            keeper.cancel()
        # Finished (the outcome write gave the lease up), or stopped with a participant
        # still silent: either way another coordinator may take the transaction up at once.
        if not run.released:
            self._release(run)
        return Outcome(run.txn_id, run.state, run.reason, run.writer.to_json())

    def _fenced(self, run: TxnRun, exc: StaleFence) -> Outcome:
        """Another owner took over: report the log's record, which it now writes."""
        return Outcome(
            run.txn_id,
            run.state,
            f"fenced off: {exc.message}",
            self._log.record(run.txn_id),
            fenced=True,
        )

    async def _keep_lease(self, run: TxnRun) -> None:
        while True:
            await self._clock.sleep_until(self._clock.now() + timedelta(seconds=self._lease / 3))
            try:
                self._log.renew(run.txn_id, self.owner, run.fence, self._clock.now(), self._lease)
            except StaleFence:
                return

    def _release(self, run: TxnRun) -> None:
        with contextlib.suppress(StaleFence):  # someone else owns it now; nothing to release
            self._log.release(run.txn_id, self.owner, run.fence)

    async def _decide(self, run: TxnRun) -> None:
        """Phase 1, then the durable decision."""
        problem = await self._phase1(run)
        if problem is None:
            problem = await self._relive_lapsed(run)
        decision = Decision.ABORT if problem else Decision.COMMIT
        run.reason = problem or "every branch voted yes and every approval group approved"
        run.note(self._key, TxnEvent.DECIDED, decision=decision.value, reason=run.reason)
        state = TxnState.ABORTING if problem else TxnState.COMMITTING
        run.flush(self._log, state=state, decision=decision)
        fault_point("log.decided")

    async def _relive_lapsed(self, run: TxnRun) -> str | None:
        """Place again every hold whose lease ended before the decision [COORD-REPLACE];
        return the problem if one cannot be, or lapsed still [COORD-LEASE]."""
        while lapsed := run.lapsed_hold(self._clock.now()):
            branch_id, lease = lapsed
            problem = await self._holds.replace(run, run.plan.branch(branch_id))
            if problem is not None:
                ended = f"the hold's lease ended at {lease} before the decision"
                return f"{branch_id}: {ended}, and {problem}"
        return None

    async def _phase1(self, run: TxnRun) -> str | None:
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
            return await self._gather(run, decide_by, (), groups) or await self._gather(
                run, decide_by, branches, (), fit=False
            )
        if choice.chosen is Mode.HOLDS_FIRST:
            if placing := await self._gather(run, decide_by, branches, ()):
                return placing
            self._state_terms(run)
            holds = [b for b in branches if b.tier is Tier.HOLD]
            return await self._gather(run, decide_by, (), groups, kept=holds)
        return await self._gather(run, decide_by, branches, groups)

    def _state_terms(self, run: TxnRun) -> None:
        """Holds-first: the holds' ends and the approval deadline inside them, which
        people approve with the plan [COORD-TERMS]; recorded as ``txn.terms``."""
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
        terms = HoldTerms.model_validate(
            {
                "kind": "hold-terms",
                "planDigest": run.digest,
                "holds": holds,
                "approveBy": format_time(run.approve_by),
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
        for task in pending:
            if task in keepers:
                continue
            event, name = jobs[task]
            if event is TxnEvent.APPROVAL and name in run.asks:
                await self._close_ask(run, name, run.approve_by, problem or "")
            else:
                self._note_unanswered(run, event, name, problem or "")
        return problem

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
            with contextlib.suppress(Exception):  # the coordinator's own deadline still holds
                await self._gateway.tighten(ask_id, run.approve_by)

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
        try:
            await self._gateway.withdraw(ask_id, why)
            answer = await self._gateway.poll(ask_id)
        except Exception:  # the gateway withdraws it at the deadline on its own
            answer = {}
        if answer.get("kind") != "approval":
            self._note_unanswered(run, TxnEvent.APPROVAL, name, why)
            return
        group = next(g for g in run.plan.approvals if g.group_id == name)
        self._count_approval(run, group, answer, decide_by)

    def _note_unanswered(self, run: TxnRun, event: TxnEvent, name: str, why: str) -> None:
        problem = f"no answer before the decision ({why})"
        if event is TxnEvent.PREPARED:
            run.note(self._key, event, branchId=name, receipt=None, problem=problem)
        else:
            run.note(self._key, event, groupId=name, approval=None, problem=problem)

    async def _prepare(self, run: TxnRun, branch: Branch) -> str | None:
        participant = self._participants[branch.participant]
        try:
            receipt = await asyncio.wait_for(
                participant.prepare(run.plan, branch.branch_id, run.fence), self._timeout
            )
        except StaleFence:
            raise
        except Exception as exc:  # any failure to vote yes is a no; fail closed
            failure = describe(exc, self._timeout)
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
        if problem is None and parsed is not None:
            run.prepares[branch.branch_id] = parsed
            return None
        return f"{branch.branch_id}: {problem}"

    async def _ask(self, run: TxnRun, group: ApprovalGroup) -> str | None:
        """Ask one group and poll its ask until the gateway signs the group's approval.

        The ask's deadline is the approval deadline in force; if it moved
        earlier while the ask was on its way, the gateway is told.
        """
        name = group.group_id
        request = ApprovalRequest(
            run.txn_id, run.plan, run.digest, group, run.approve_by, terms=run.terms
        )
        try:
            answer = await self._gateway.ask(request)
            while answer.get("kind") == "pending":
                pending, problem = vet_pending(
                    answer,
                    self._keyring,
                    gateway_id=self._gateway.gateway_id,
                    txn_id=run.txn_id,
                    group_id=name,
                    plan_digest=run.digest,
                )
                if problem is not None or pending is None:
                    run.note(self._key, TxnEvent.APPROVAL, groupId=name, approval=None,
                             problem=problem)  # fmt: skip
                    return f"approval {name}: {problem}"
                if run.asks.get(name) != pending.ask_id:
                    run.asks[name] = pending.ask_id
                    run.note(self._key, TxnEvent.PENDING, groupId=name, pending=answer)
                    if parse_time(pending.decide_by) > run.approve_by:
                        with contextlib.suppress(Exception):  # our own deadline still holds
                            await self._gateway.tighten(pending.ask_id, run.approve_by)
                answer = await self._gateway.poll(pending.ask_id, wait_seconds=self._poll)
        except Exception as exc:  # a gateway that cannot answer has not approved
            failure = describe(exc, None)
            run.note(self._key, TxnEvent.APPROVAL, groupId=name, approval=None,
                     problem=failure)  # fmt: skip
            return f"approval {name}: {failure}"
        problem = self._count_approval(run, group, answer, run.approve_by)
        return None if problem is None else f"approval {name}: {problem}"

    def _count_approval(
        self, run: TxnRun, group: ApprovalGroup, answer: dict[str, Any], decide_by: datetime
    ) -> str | None:
        """Record the group's final approval, with the problem if it does not count."""
        name = group.group_id
        run.decided_asks.add(name)
        _, problem = vet_approval(
            answer,
            self._keyring,
            gateway_id=self._gateway.gateway_id,
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

    async def _withdraw_asks(self, run: TxnRun) -> None:
        """Withdraw every ask still open: the transaction will not use it [COORD-WITHDRAW]."""
        for name, ask_id in run.asks.items():
            if name in run.decided_asks:
                continue
            with contextlib.suppress(Exception):  # the deadline withdraws it in any case
                await self._gateway.withdraw(ask_id, f"transaction {run.txn_id} aborted")
