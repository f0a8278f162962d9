"""Phase 2: commit in tier order, or unwind, or abort; then the outcome.

Every step here may run twice (once before a crash and once after), so each
is an idempotent request keyed by txnId + branchId: a repeat returns the
participant's stored receipt and has no second effect. A final step that
stays in doubt keeps its holds alive and is escalated to a person before
they end; an answer after some lapsed ends the transaction ``needs-recovery``
(see :mod:`hatp.coordinator._escalation`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from hatp import _checks
from hatp._faults import fault_point
from hatp.clock import Clock
from hatp.coordinator._calls import backoff, call_once
from hatp.coordinator._escalation import Escalator
from hatp.coordinator._holds import HoldKeeper
from hatp.coordinator._txn import TxnRun, effects_differ
from hatp.coordinator._vetting import vet_outcome
from hatp.errors import HatpError, HoldExpired
from hatp.evidence import Keyring, SigningKey
from hatp.model import (
    COMMIT_ORDER,
    Branch,
    BranchState,
    EffectVerdict,
    OutcomeReceipt,
    Tier,
    TxnEvent,
    TxnState,
    effect_verdict,
)
from hatp.participant import Participant
from hatp.store import DecisionLog

_Call = Callable[[], Awaitable[dict[str, Any]]]
_log = logging.getLogger(__name__)


class Phase2:
    """Finishes a decided transaction; shared by fresh runs and takeovers."""

    def __init__(
        self,
        *,
        key: SigningKey,
        log: DecisionLog,
        participants: Mapping[str, Participant],
        keyring: Keyring,
        clock: Clock,
        call_timeout: float,
        retry_delay: float,
        retry_cap: float,
        max_attempts: int,
        holds: HoldKeeper,
        escalator: Escalator,
    ) -> None:
        self._key = key
        self._log = log
        self._participants = participants
        self._keyring = keyring
        self._clock = clock
        self._timeout = call_timeout
        self._delay = retry_delay
        self._cap = retry_cap
        self._attempts = max(1, max_attempts)
        self._holds = holds
        self._escalator = escalator

    async def finish(self, run: TxnRun) -> None:
        """Drive a decided transaction as far as it can go now.

        Returns with ``run.state`` committed or aborted, or still in-doubt /
        aborting when a participant never answered (the log keeps it open).
        """
        if run.state in (TxnState.COMMITTING, TxnState.IN_DOUBT):
            await self._commit_all(run)
        elif run.state is TxnState.UNWINDING:
            await self._undo_all(run)
        elif run.state is TxnState.ABORTING:
            await self._abort_all(run)

    def _ordered(self, run: TxnRun) -> list[Branch]:
        return [b for tier in COMMIT_ORDER for b in run.plan.branches if b.tier is tier]

    async def _commit_all(self, run: TxnRun) -> None:
        failed: list[str] = []
        for branch in self._ordered(run):
            if branch.branch_id in run.commits or branch.branch_id in run.lapsed:
                continue
            # Before the irreversible step is first sent, every hold must be live; once it
            # was sent (in doubt), it may have run: never unwind on a guess.
            if (
                branch.tier is Tier.FINAL
                and run.state is not TxnState.IN_DOUBT
                and (lapsed := self._lapsed_hold(run))
            ):
                await self._unwind(run, branch.branch_id, lapsed)
                return
            result = await self._commit(run, branch)
            if result is None:
                return  # still in doubt; the log keeps the transaction open
            if isinstance(result, HatpError):
                if branch.tier is Tier.HOLD and any(
                    b.tier is Tier.FINAL and b.branch_id in run.commits for b in run.plan.branches
                ):
                    # The final step ran and cannot be undone; a hold that broke its
                    # promise is recorded, and the record will not verify as clean.
                    failed.append(f"{branch.branch_id}: {result}")
                    continue
                await self._unwind(run, branch.branch_id, result)
                return
            if branch.tier is Tier.FINAL and self._late(run, branch):
                run.lapsed = self._escalator.late_answer(run, branch)
        if run.lapsed:
            await self._recover_lapsed(run)
            return
        run.reason = "; ".join(failed) or "every branch committed"
        await self._finish(run, TxnState.COMMITTED, failed)

    def _late(self, run: TxnRun, branch: Branch) -> bool:
        """Whether the final step's answer is a late one [COORD-LATE-ANSWER]: a person was
        brought in about it, or a hold lapsed while it was awaited."""
        return branch.branch_id in run.escalated or (run.lapsed_hold(self._clock.now()) is not None)

    async def _recover_lapsed(self, run: TxnRun) -> None:
        """Release the holds that lapsed behind a late answer, offer recovery, finish."""
        for branch_id in run.lapsed:
            branch = run.plan.branch(branch_id)
            if branch_id in run.released_lapsed:
                continue
            call = self._abort_call(run, branch)
            if not await self._settle(run, branch, call, TxnEvent.ABORTED):
                return
            run.released_lapsed.add(branch_id)
        if not run.offered:
            await self._escalator.offer_recovery(run, run.lapsed)
            run.offered = True
        run.reason = (
            f"the final step answered after the holds on {', '.join(run.lapsed)} lapsed: "
            "they were released, and recovery was offered to a person"
        )
        await self._finish(run, TxnState.NEEDS_RECOVERY, [f"{b}: lapsed" for b in run.lapsed])

    async def _commit(self, run: TxnRun, branch: Branch) -> OutcomeReceipt | HatpError | None:
        """Commit one branch; a receipt, a definite refusal, or ``None`` if still no answer.

        While the final step is in doubt its holds are kept (renewed, never
        placed again), and a person is brought in ``leadSeconds`` before the
        first one ends [COORD-ESCALATE]; the commit is still retried.
        """
        keepers: list[asyncio.Task[str | None]] = []
        try:
            return await self._commit_retried(run, branch, keepers)
        finally:
            for keeper in keepers:
                keeper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)

    async def _commit_retried(
        self, run: TxnRun, branch: Branch, keepers: list[asyncio.Task[str | None]]
    ) -> OutcomeReceipt | HatpError | None:
        bid = branch.branch_id
        participant = self._participants[branch.participant]
        prepared = run.prepares.get(bid)
        if prepared is None:
            return HatpError(f"no yes vote for {bid} is in the log")
        for attempt in range(1, self._attempts + 1):
            fault_point(f"commit.before:{bid}")
            answer = await call_once(
                lambda: participant.commit(
                    run.txn_id, bid, run.fence, run.digest, prepared.preconditions
                ),
                self._timeout,
            )
            if answer.refusal is not None:
                return answer.refusal
            silence = answer.silence
            if answer.receipt is not None:
                parsed, problem = self._vet(run, branch, answer.receipt, BranchState.COMMITTED)
                if parsed is not None and problem is None:
                    run.commits[bid] = parsed
                    run.note(self._key, TxnEvent.COMMITTED, branchId=bid, receipt=answer.receipt)
                    self._compare_effect(run, bid, parsed)
                    fault_point(f"commit.after:{bid}")
                    if run.state is TxnState.IN_DOUBT:
                        await run.flush(self._log, state=TxnState.COMMITTING)
                        fault_point("log.committing")
                    return parsed
                silence = f"unusable receipt: {problem}"
            if attempt == 1 and _checks.is_on("COORD-IN-DOUBT"):
                run.note(
                    self._key, TxnEvent.IN_DOUBT, branchId=bid, attempt=attempt, detail=silence
                )
                await run.flush(self._log, state=TxnState.IN_DOUBT)
                fault_point("log.in-doubt")
            elif not _checks.is_on("COORD-IN-DOUBT"):
                return HatpError(f"{bid}: {silence}")  # the naive reading: silence is failure
            due = None
            if branch.tier is Tier.FINAL:
                due = await self._in_doubt(run, branch, silence or "", keepers)
            await self._wait(attempt, due)
        run.reason = f"{bid} has not answered after {self._attempts} attempts; still in doubt"
        return None

    async def _in_doubt(
        self, run: TxnRun, branch: Branch, silence: str, keepers: list[asyncio.Task[str | None]]
    ) -> datetime | None:
        """Keep the holds and escalate when due; return when escalation is due, if not yet."""
        if not keepers:
            keepers.extend(
                asyncio.create_task(self._holds.keep(run, hold, may_replace=False))
                for hold in run.plan.branches
                if hold.tier is Tier.HOLD and hold.branch_id in run.prepares
            )
        due = self._escalator.due(run)
        if run.payer_needed:  # a renewal needs the payer: bring them in now, not later
            due = self._clock.now()
        if due is None or branch.branch_id in run.escalated:
            return None
        if self._clock.now() < due:
            return due
        await self._escalator.escalate(run, branch, silence)
        await run.flush(self._log)
        fault_point("log.escalated")
        return None

    async def _wait(self, attempt: int, until: datetime | None = None) -> None:
        """The pause before a retry, on the coordinator's clock (tests move it); it ends
        early at ``until`` (when an escalation is due)."""
        pause = timedelta(seconds=backoff(attempt, self._delay, self._cap))
        wake = self._clock.now() + pause
        await self._clock.sleep_until(wake if until is None else min(wake, until))

    def _lapsed_hold(self, run: TxnRun) -> HatpError | None:
        """Before the irreversible step, every hold must still be live."""
        lapsed = run.lapsed_hold(self._clock.now())
        if lapsed is None:
            return None
        branch_id, lease = lapsed
        return HoldExpired(
            f"the hold on {branch_id} ended at {lease}, before the final step",
            branch_id=branch_id,
        )

    async def _unwind(self, run: TxnRun, branch_id: str, error: HatpError) -> None:
        run.reason = f"{branch_id}: {error}"
        run.note(self._key, TxnEvent.UNWINDING, branchId=branch_id, error=error.to_dict())
        await run.flush(self._log, state=TxnState.UNWINDING)
        fault_point("log.unwinding")
        await self._undo_all(run)

    async def _undo_all(self, run: TxnRun) -> None:
        """Undo the compensate steps that ran (last first) and release everything else."""
        for branch in reversed(self._ordered(run)):
            bid = branch.branch_id
            participant = self._participants[branch.participant]
            committed = run.commits.get(bid)
            if bid in run.undone:
                continue
            if committed is not None and committed.undo_token is not None:
                call = self._compensate_call(run, participant, bid, committed.undo_token)
                settled = await self._settle(run, branch, call, TxnEvent.COMPENSATED)
            else:
                call = self._abort_call(run, branch)
                settled = await self._settle(run, branch, call, TxnEvent.ABORTED)
            if not settled:
                return
        await self._finish(run, TxnState.ABORTED)

    async def _abort_all(self, run: TxnRun) -> None:
        for branch in run.plan.branches:
            if not await self._settle(run, branch, self._abort_call(run, branch), TxnEvent.ABORTED):
                return
        await self._finish(run, TxnState.ABORTED)

    @staticmethod
    def _compensate_call(run: TxnRun, participant: Participant, bid: str, token: str) -> _Call:
        return lambda: participant.compensate(run.txn_id, bid, run.fence, token)

    def _abort_call(self, run: TxnRun, branch: Branch) -> _Call:
        participant = self._participants[branch.participant]
        return lambda: participant.abort(run.txn_id, branch.branch_id, run.fence)

    async def _settle(self, run: TxnRun, branch: Branch, call: _Call, event: TxnEvent) -> bool:
        """Send an undo or abort until it is answered for certain; ``False`` leaves the
        transaction open.

        Only a receipt settles a branch: an abort receipt (``planDigest`` null when it
        was never prepared) or a compensate receipt. A definite refusal (the branch
        committed, the undo token is not the one issued) settles nothing either: the
        branch is logged as still held (``txn.held``) and the transaction ends
        ``needs-attention`` naming it. Silence, and an ``Unavailable`` refusal (the
        participant's store was down), is no answer at all [COORD-SETTLE]: it is sent
        again with backoff, and after the last attempt the transaction stays open in
        its state, where recovery takes it up again.
        """
        bid = branch.branch_id
        if bid in run.held:
            return True  # logged as held: retrying cannot change a definite refusal
        expected = (
            {BranchState.COMPENSATED}
            if event is TxnEvent.COMPENSATED
            else {BranchState.ABORTED, BranchState.COMPENSATED}
        )
        for attempt in range(1, self._attempts + 1):
            answer = await call_once(call, self._timeout)
            if answer.refusal is not None:
                if _checks.is_on("COORD-SETTLE"):
                    self._hold(run, branch, event, answer.refusal)
                return True  # definite: nothing more this coordinator can do
            if answer.receipt is not None:
                parsed, problem = self._vet(run, branch, answer.receipt, *expected)
                if parsed is not None and problem is None:
                    run.note(self._key, event, branchId=bid, receipt=answer.receipt)
                    fault_point(f"{event.value.removeprefix('txn.')}.after:{bid}")
                    if event is TxnEvent.COMPENSATED:
                        run.undone.add(bid)
                    return True
                _log.warning("txn %s: unusable %s receipt from %s: %s", run.txn_id,
                             event.value, bid, problem)  # fmt: skip
            else:
                _log.info("txn %s: %s of %s not answered (attempt %d): %s", run.txn_id,
                          event.value, bid, attempt, answer.silence)  # fmt: skip
            await self._wait(attempt)
        run.reason += f"; {bid} has not answered {event.value}"
        _log.warning(
            "txn %s stays %s: %s has not answered %s after %d attempts; recovery retries it",
            run.txn_id,
            run.state.value,
            bid,
            event.value,
            self._attempts,
        )
        return False

    def _hold(self, run: TxnRun, branch: Branch, event: TxnEvent, refusal: HatpError) -> None:
        """Log a definite refusal to release or undo ``branch``: it is still held."""
        bid = branch.branch_id
        run.held[bid] = f"{event.value} refused: {refusal}"
        run.reason += f"; {bid} refused {event.value}: {refusal}"
        run.note(self._key, TxnEvent.HELD, branchId=bid, step=event.value, error=refusal.to_dict())
        _log.error(
            "txn %s: %s refused %s for certain (%s); it stays held and needs a person",
            run.txn_id,
            bid,
            event.value,
            refusal.code,
        )

    def _vet(
        self, run: TxnRun, branch: Branch, receipt: dict[str, Any], *expected: BranchState
    ) -> tuple[OutcomeReceipt | None, str | None]:
        parsed: OutcomeReceipt | None = None
        problem: str | None = "no expected outcome"
        for outcome in expected:
            parsed, problem = vet_outcome(
                receipt,
                self._keyring,
                txn_id=run.txn_id,
                branch=branch,
                plan_digest=run.digest,
                expected=outcome,
            )
            if problem is None:
                break
        return parsed, problem

    def _compare_effect(self, run: TxnRun, bid: str, committed: OutcomeReceipt) -> None:
        """Record how the commit's observed effect compares with the approved preview
        [COORD-EFFECT]; a difference is recorded, and nothing is changed for it."""
        prepared = run.prepares.get(bid)
        preview = None if prepared is None else prepared.preview
        verdict = effect_verdict(preview, committed.observed)
        if verdict is EffectVerdict.UNCHECKED:
            return
        run.effects[bid] = verdict
        run.note(
            self._key,
            TxnEvent.EFFECT,
            branchId=bid,
            certainty=None if preview is None else preview.certainty.value,
            verdict=verdict.value,
        )
        if verdict is EffectVerdict.DIFFERS:
            said = "nothing" if committed.observed is None else committed.observed.summary
            _log.warning(
                "txn %s: %s committed other than its approved preview: %s",
                run.txn_id,
                bid,
                said,
                extra={"txnId": run.txn_id, "branchId": bid},
            )

    async def _finish(
        self, run: TxnRun, state: TxnState, problems: list[str] | None = None
    ) -> None:
        body: dict[str, Any] = {"state": state.value}
        differs = effects_differ(run)
        if differs and _checks.is_on("COORD-EFFECT"):
            body["effectDiffers"] = differs  # a distinct flag: what was approved is not what ran
            if state is TxnState.COMMITTED:
                # Offered, never done: an undo of those steps needs its own approval [UNDO-PLAN].
                _log.warning(
                    "txn %s: %s committed other than approved; an undo of just those steps "
                    "can be planned and approved (hatp txn undo %s --differing)",
                    run.txn_id,
                    ", ".join(differs),
                    run.txn_id,
                    extra={"txnId": run.txn_id},
                )
        if run.held and state is TxnState.ABORTED:
            # Not aborted cleanly: say so, naming what is still held [COORD-SETTLE].
            state = TxnState.NEEDS_ATTENTION
            body = {"state": state.value, "held": sorted(run.held)}
            problems = [f"{bid}: {why}" for bid, why in sorted(run.held.items())]
            run.reason = "aborted, but still held: " + "; ".join(problems)
        if problems:
            body["problems"] = problems
        run.note(self._key, TxnEvent.OUTCOME, **body)
        run.writer.seal(self._key)
        await run.flush(self._log, state=state, release=True)
        fault_point("log.outcome")
        _log.info(
            "txn %s ended %s: %s",
            run.txn_id,
            state.value,
            run.reason,
            extra={"txnId": run.txn_id, "state": state.value},
        )
