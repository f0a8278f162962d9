"""The two-phase-commit coordinator.

Phase 1 (:mod:`hatp.coordinator._phase1`) gathers the votes and approvals
in the order the mode says: parallel, approval-first or holds-first. Any
no, rejection, problem or a missed deadline decides abort. The decision,
with every vote and approval it rests on, is durable in the decision log
before phase 2 starts. Phase 2 (:mod:`hatp.coordinator._phase2`) commits
the compensate steps, then the one final step, then the holds. A refused
compensate or final commit unwinds: undo what ran, release the rest,
ABORTED. No answer from a commit is not a failure: the transaction is
IN_DOUBT and the idempotent commit is retried.

Ownership of a transaction is a lease in the log with a fencing token; every
log write and every participant request carries the token, so a paused old
owner cannot act once another has taken over. After a crash, :meth:`recover`
finishes every open transaction from the log: presumed abort if nothing was
decided, otherwise phase 2 with the logged decision, continuing the same chain.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Unpack

from hatp._faults import fault_point
from hatp.clock import Clock
from hatp.coordinator._escalation import Escalator
from hatp.coordinator._gateway import Gateway, every_gateway, withdraw_open_asks
from hatp.coordinator._holds import HoldKeeper
from hatp.coordinator._observer import TxnObserver, tell, tell_effects, tell_undo
from hatp.coordinator._phase1 import Phase1
from hatp.coordinator._phase2 import Phase2
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._undo import UndoOptions, UndoPlanner
from hatp.errors import PlanInvalid, StaleFence, StoreUnavailable, UndoRefused
from hatp.evidence import Keyring, RecordWriter, SigningKey, canonicalize, digest_bytes
from hatp.model import (
    Decision,
    Plan,
    TxnEvent,
    TxnState,
    parse_plan,
)
from hatp.participant import Participant
from hatp.store import DecisionLog, UndoClaim

__all__ = ["Coordinator", "Outcome"]

_log = logging.getLogger(__name__)


#: The states a transaction ends in; its outcome may name steps that differ from preview.
_ENDED = frozenset(
    {TxnState.COMMITTED, TxnState.ABORTED, TxnState.NEEDS_ATTENTION, TxnState.NEEDS_RECOVERY}
)


@dataclass(frozen=True)
class Outcome:
    """Where a transaction ended up when :meth:`Coordinator.run` or a recovery returned.

    ``state`` is final (committed, aborted) unless the run stopped early:
    ``in-doubt`` (the final step still has not answered; the log keeps it open
    for a later :meth:`Coordinator.recover`) or ``fenced`` set (another
    coordinator took the transaction over). ``record`` is the record so far;
    when fenced, the log's record, which the new owner writes.

    The fourth argument is the record, or what makes it: the record of a run
    that ended is read out of its writer only when ``record`` is first asked for
    (a served coordinator never asks: it reads records from the log).
    """

    txn_id: str
    state: TxnState
    reason: str
    _record: dict[str, Any] | Callable[[], dict[str, Any]] = field(repr=False, compare=False)
    fenced: bool = False

    @functools.cached_property
    def record(self) -> dict[str, Any]:
        """The transaction's record (see ``schemas/TransactionRecord.json``)."""
        return self._record() if callable(self._record) else self._record

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
        gateway: where approvals are asked for (a
            :class:`~hatp.coordinator.GatewayRoutes` asks each group at its
            organisation's gateway [COORD-GATEWAYS]).
        keyring: verifies receipts (issuer = participant id) and approvals
            (issuer = the id of the gateway the group is asked at).
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
        self._clock = clock
        self._lease = lease_seconds
        self._observers: list[TxnObserver] = []
        self._undo = UndoPlanner(
            coordinator_id=coordinator_id, key=key, keyring=keyring, log=log, clock=clock
        )
        self._holds = HoldKeeper(
            key=key,
            participants=self._participants,
            keyring=keyring,
            clock=clock,
            call_timeout=call_timeout,
            max_replacements=max_replacements,
        )
        self._phase1 = Phase1(
            key=key,
            participants=self._participants,
            gateway=gateway,
            keyring=keyring,
            clock=clock,
            holds=self._holds,
            call_timeout=call_timeout,
            poll_seconds=poll_seconds,
            commit_allowance=commit_allowance,
            retry_delay=retry_delay,
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

    @property
    def log(self) -> DecisionLog:
        """The decision log this coordinator writes (and leases transactions in)."""
        return self._log

    @property
    def lease_seconds(self) -> float:
        """How long this coordinator's ownership of a transaction lasts unrenewed: an
        owner that stops is taken over this long after its last renewal at most."""
        return self._lease

    @property
    def clock(self) -> Clock:
        """The clock this coordinator's deadlines and leases run on."""
        return self._clock

    def observe(self, observer: TxnObserver) -> None:
        """Tell ``observer`` of every change of state this coordinator writes from now on
        (begun, decided, ended or left open), once it is durable in the log; and, if it
        is an :class:`EffectObserver` or an :class:`UndoObserver`, of each step's effect
        verdict and of each undo asked."""
        self._observers.append(observer)

    async def run(self, plan: Plan | Mapping[str, Any]) -> Outcome:
        """Begin a transaction for ``plan`` and drive it to its end.

        Raises:
            PlanInvalid: the plan breaks a rule, or names a participant this
                coordinator cannot reach (``UNKNOWN_PARTICIPANT``); nothing was logged.
            UndoRefused: an undo plan that fails [UNDO-CHECK], or whose steps another
                undo holds [UNDO-CLAIM]; nothing was logged.
            VersionUnsupported: the plan names an unknown protocol version.
            OutcomeConflict: a transaction with this id is already in the log.
            StoreUnavailable: the log could not take the plan; nothing was begun.
        """
        return await self._drive(await self._create(plan))

    async def begin(self, plan: Plan | Mapping[str, Any]) -> asyncio.Task[Outcome]:
        """Log a transaction for ``plan`` and drive it in a task of its own.

        The transaction is in the log (leased to this coordinator) when this
        returns, so :meth:`state` and :meth:`record` answer for it at once; the
        task ends with its :class:`Outcome`.

        Raises:
            PlanInvalid, VersionUnsupported, OutcomeConflict, StoreUnavailable: as
                :meth:`run`; nothing was logged.
        """
        run = await self._create(plan)
        return asyncio.get_running_loop().create_task(self._drive(run))

    async def plan_undo(self, txn_id: str, **options: Unpack[UndoOptions]) -> Plan:
        """Build, and do not begin, the plan that takes back a committed transaction's
        steps, from the journal of what each step offered (docs/spec.md §28 [UNDO-PLAN]);
        ``options`` (:class:`~hatp.coordinator.UndoOptions`): which steps, who approves,
        by when.

        Its ``undoes`` is this coordinator's signed reference to the original record's
        head, with each step it leaves and why; each branch names the step it undoes,
        with the cost its participant signed. Show it to people; :meth:`run` or
        :meth:`begin` it (or call :meth:`undo`) and it is approved like any plan.

        Raises:
            TransactionUnknown: no such transaction in the log.
            UndoRefused: the steps cannot be taken back (``data.reason``); nothing was written.
            PlanInvalid: ``approvals`` or ``initiator`` make no valid plan.
            StoreUnavailable: the log could not be read.
        """
        try:
            plan = await self._log.store.call(
                functools.partial(self._undo.build, txn_id, **options)
            )
        except UndoRefused as refused:
            self._refused_undo(refused)
            raise
        tell_undo(self._observers, txn_id, None)
        _log.info(
            "undo plan %s built for txn %s: takes back %s",
            plan.txn_id,
            txn_id,
            ", ".join(b.branch_id for b in plan.branches),
            extra={"txnId": txn_id},
        )
        return plan

    async def undo(self, txn_id: str, **options: Unpack[UndoOptions]) -> asyncio.Task[Outcome]:
        """Build the undo plan of a committed transaction (:meth:`plan_undo`, with the same
        ``options``) and begin it as a transaction of its own: nothing is taken back until
        people approve it and every branch votes yes; then all of it is, or none [UNDO-RUN].

        Raises:
            TransactionUnknown, UndoRefused, PlanInvalid, StoreUnavailable: as
                :meth:`plan_undo` and :meth:`begin`; nothing was begun.
        """
        return await self.begin(await self.plan_undo(txn_id, **options))

    def undo_claims(self, txn_id: str) -> dict[str, UndoClaim]:
        """Return the journal's claims on the steps of ``txn_id``: which undo transaction
        takes back each step, and where it stands (this reads the store: from async code,
        call it through ``log.store.call``)."""
        return self._log.undo_claims(txn_id)

    def state(self, txn_id: str) -> TxnState:
        """Return where the transaction stands in the log now (this reads the store:
        from async code, call it through ``log.store.call``).

        Raises:
            TransactionUnknown: no such transaction in the log.
            StoreUnavailable: the log could not be read.
        """
        return self._log.get(txn_id).state

    async def _create(self, plan: Plan | Mapping[str, Any]) -> TxnRun:
        parsed = parse_plan(plan)
        self._check_reachable(parsed)
        claims = None
        if parsed.undoes is not None:  # [UNDO-CHECK], then claimed as it is logged
            try:
                claims = await self._log.store.call(self._undo.check, parsed)
            except UndoRefused as refused:
                self._refused_undo(refused)
                raise
        wire = parsed.to_wire()
        canonical = canonicalize(wire)  # once: for the digest and the log's plan column
        plan_digest = digest_bytes(canonical)
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
        try:
            fence = await self._log.store.call(
                self._log.create,
                parsed.txn_id,
                canonical,
                plan_digest,
                self.owner,
                self._clock.now(),
                self._lease,
                writer.written_since(0),
                claims,
            )
        except UndoRefused as refused:  # another undo holds a step [UNDO-CLAIM]
            self._refused_undo(refused)
            raise
        fault_point("log.planned")
        _log.info(
            "txn %s begun by %s (fence %d)",
            parsed.txn_id,
            self.owner,
            fence,
            extra={"txnId": parsed.txn_id, "state": TxnState.ACTIVE.value},
        )
        tell(self._observers, parsed.txn_id, TxnState.ACTIVE, self._clock.now())
        return TxnRun(parsed, plan_digest, fence, writer, persisted=1)

    async def recover(self) -> list[Outcome]:
        """Take over and finish, one after another, every open transaction whose owner's
        lease has ended; return their outcomes (:class:`Recovery` does the same in the
        background, concurrently, for a served process).

        Raises:
            StoreUnavailable: the log could not be read.
        """
        outcomes = []
        for txn_id in await self._log.store.call(self._log.claimable, self._clock.now()):
            outcome = await self.resume(txn_id)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    async def resume(self, txn_id: str) -> Outcome | None:
        """Take over one open transaction and finish it; ``None`` if another owner holds it.

        Raises:
            TransactionUnknown: no such transaction in the log.
            StoreUnavailable: the log could not be read or written.
        """
        call = self._log.store.call
        fence = await call(self._log.acquire, txn_id, self.owner, self._clock.now(), self._lease)
        if fence is None:
            return None
        row = await call(self._log.get, txn_id)
        events = await call(self._log.events, txn_id)
        writer = RecordWriter.resume({"recordId": txn_id, "events": events}, self._clock)
        run = TxnRun(parse_plan(row.plan), row.plan_digest, fence, writer, len(events), row.state)
        run.restore(events)
        if row.state.finished:
            await call(self._log.release, txn_id, self.owner, fence)
            return Outcome(txn_id, row.state, run.reason, await call(self._log.record, txn_id))
        _log.warning(
            "txn %s taken over by %s (fence %d) in state %s",
            txn_id,
            self.owner,
            fence,
            row.state.value,
            extra={"txnId": txn_id, "state": row.state.value},
        )
        run.note(self._key, TxnEvent.TAKEN_OVER, owner=self.owner, fence=fence)
        if row.state is TxnState.ACTIVE:
            # Presumed abort: nothing was decided, so nothing may be committed.
            run.reason = "presumed abort: the previous owner stopped before deciding"
            run.note(self._key, TxnEvent.DECIDED, decision=Decision.ABORT.value, reason=run.reason)
            try:
                await run.flush(self._log, state=TxnState.ABORTING, decision=Decision.ABORT)
            except StaleFence as exc:
                return await self._fenced(run, exc)
        if run.state is TxnState.ABORTING:
            await self._withdraw_asks(run)
        return await self._drive(run)

    def status(self, txn_id: str) -> dict[str, Any]:
        """Return ``{txnId, state}`` as the log has it now, and for an ended transaction
        whose outcome names steps that committed other than their approved preview,
        ``effectDiffers`` ([COORD-EFFECT]) (this reads the store: from async code, call
        it through ``log.store.call``).

        Raises:
            TransactionUnknown: no such transaction in the log.
            StoreUnavailable: the log could not be read.
        """
        state = self._log.get(txn_id).state
        answer: dict[str, Any] = {"txnId": txn_id, "state": state.value}
        if state in _ENDED:
            for event in reversed(self._log.events(txn_id)):
                if event["type"] == TxnEvent.OUTCOME and event["body"].get("effectDiffers"):
                    answer["effectDiffers"] = sorted(map(str, event["body"]["effectDiffers"]))
                    break
        return answer

    def record(self, txn_id: str) -> dict[str, Any]:
        """Return the transaction's record as logged so far (this reads the store: from
        async code, call it through ``log.store.call``).

        Raises:
            TransactionUnknown: no such transaction in the log.
            StoreUnavailable: the log could not be read.
        """
        return self._log.record(txn_id)

    def _refused_undo(self, refused: UndoRefused) -> None:
        """Log an undo refusal and tell the observers [UNDO-REFUSE]."""
        txn_id = str(refused.data.get("txnId"))
        _log.warning(
            "undo of txn %s refused (%s): %s",
            txn_id,
            refused.reason,
            refused.message,
            extra={"txnId": txn_id},
        )
        tell_undo(self._observers, txn_id, refused.reason)

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
            tell(self._observers, run.txn_id, run.state, self._clock.now())
            tell_effects(self._observers, run.txn_id, run.effects)
        except StaleFence as exc:
            return await self._fenced(run, exc)
        finally:
            keeper.cancel()
        # Finished (the outcome write gave the lease up), or stopped with a participant
        # still silent: either way another coordinator may take the transaction up at once.
        if not run.released:
            await self._release(run)
        return Outcome(run.txn_id, run.state, run.reason, run.writer.to_json)

    async def _fenced(self, run: TxnRun, exc: StaleFence) -> Outcome:
        """Another owner took over: report the log's record, which it now writes."""
        _log.warning("txn %s: %s was fenced off: %s", run.txn_id, self.owner, exc.message)
        return Outcome(
            run.txn_id,
            run.state,
            f"fenced off: {exc.message}",
            await self._log.store.call(self._log.record, run.txn_id),
            fenced=True,
        )

    async def _keep_lease(self, run: TxnRun) -> None:
        """Renew the ownership lease at a third of its length until cancelled. A renewal
        the store does not take is tried again at the next turn: the lease has two more
        thirds to run, and a run that loses it is fenced off, never doubled."""
        while True:
            await self._clock.sleep_until(self._clock.now() + timedelta(seconds=self._lease / 3))
            try:
                await self._log.store.call(
                    self._log.renew, run.txn_id, self.owner, run.fence, self._clock.now(),
                    self._lease,
                )  # fmt: skip
            except StaleFence:
                return
            except StoreUnavailable as exc:
                _log.warning("txn %s: lease renewal failed, trying again: %s", run.txn_id, exc)

    async def _release(self, run: TxnRun) -> None:
        try:
            await self._log.store.call(self._log.release, run.txn_id, self.owner, run.fence)
        except StaleFence:
            pass  # someone else owns it now; nothing to release
        except StoreUnavailable as exc:  # the lease runs out by itself; recovery then claims it
            _log.warning("txn %s: could not release its lease: %s", run.txn_id, exc)

    async def _decide(self, run: TxnRun) -> None:
        """Phase 1, then the durable decision."""
        problem = await self._phase1.gather_votes(run)
        if problem is None:
            problem = await self._phase1.relive_lapsed(run)
        if problem is None:
            problem = self._phase1.preview_changed(run)
        decision = Decision.ABORT if problem else Decision.COMMIT
        run.reason = problem or "every branch voted yes and every approval group approved"
        run.note(self._key, TxnEvent.DECIDED, decision=decision.value, reason=run.reason)
        state = TxnState.ABORTING if problem else TxnState.COMMITTING
        await run.flush(self._log, state=state, decision=decision)
        fault_point("log.decided")
        _log.info(
            "txn %s decided %s: %s",
            run.txn_id,
            decision.value,
            run.reason,
            extra={"txnId": run.txn_id, "state": state.value},
        )
        tell(self._observers, run.txn_id, state, self._clock.now())

    async def _withdraw_asks(self, run: TxnRun) -> None:
        """Withdraw every ask still open about the transaction: it will not use them
        [COORD-WITHDRAW]. The gateway's own asks say which are open, so an ask whose
        pending vote never reached this log is withdrawn too; with several gateways,
        at each of them, one that fails not stopping the others [COORD-GATEWAYS]."""
        reason = f"transaction {run.txn_id} aborted: {run.reason}"[:1000]
        await withdraw_open_asks(every_gateway(self._gateway), run.txn_id, reason)
