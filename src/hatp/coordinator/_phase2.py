"""Phase 2: commit in tier order, or unwind, or abort; then the outcome.

Every step here may run twice (once before a crash and once after), so each
is an idempotent request keyed by txnId + branchId: a repeat returns the
participant's stored receipt and has no second effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hatp import _checks
from hatp._faults import fault_point
from hatp.clock import Clock, parse_time
from hatp.coordinator._calls import backoff, call_once
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._vetting import vet_outcome
from hatp.errors import HatpError, HoldExpired
from hatp.evidence import Keyring, SigningKey
from hatp.model import COMMIT_ORDER, Branch, BranchState, OutcomeReceipt, Tier, TxnEvent, TxnState
from hatp.participant import Participant
from hatp.store import DecisionLog

_Call = Callable[[], Awaitable[dict[str, Any]]]
T = TypeVar("T")


@dataclass(frozen=True)
class _Raised:
    """An exception a concurrent call raised (as opposed to a refusal it returned)."""

    error: BaseException


async def _caught(call: Awaitable[T]) -> T | _Raised:
    try:
        return await call
    except Exception as error:
        return _Raised(error)


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
        max_attempts: int,
    ) -> None:
        self._key = key
        self._log = log
        self._participants = participants
        self._keyring = keyring
        self._clock = clock
        self._timeout = call_timeout
        self._delay = retry_delay
        self._attempts = max(1, max_attempts)

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
        """Commit tier by tier; the branches of one tier at the same time."""
        failed: list[str] = []
        for tier in COMMIT_ORDER:
            branches = [
                b for b in run.plan.branches if b.tier is tier and b.branch_id not in run.commits
            ]
            if not branches:
                continue
            if tier is Tier.FINAL and (lapsed := self._lapsed_hold(run)):
                await self._unwind(run, branches[0].branch_id, lapsed)
                return
            results = await self._commit_tier(run, branches)
            if any(result is None for _, result in results):
                return  # still in doubt; the log keeps the transaction open
            refused = [(b, r) for b, r in results if isinstance(r, HatpError)]
            if not refused:
                continue
            if tier is Tier.HOLD:
                # The final step ran and cannot be undone; a hold that broke its
                # promise is recorded, and the record will not verify as clean.
                failed += [f"{b.branch_id}: {r}" for b, r in refused]
                continue
            await self._unwind(run, refused[0][0].branch_id, refused[0][1])
            return
        run.reason = "; ".join(failed) or "every branch committed"
        self._finish(run, TxnState.COMMITTED, failed)

    async def _commit_tier(
        self, run: TxnRun, branches: list[Branch]
    ) -> list[tuple[Branch, OutcomeReceipt | HatpError | None]]:
        """Commit ``branches`` at once; note the receipts in plan order, whatever came first."""
        outcomes = await asyncio.gather(*(_caught(self._commit(run, b)) for b in branches))
        # Every call is let finish before anything raised (StaleFence: the lease is
        # lost; or a bug) stops the run; refusals come back as values, not raised.
        raised = [o for o in outcomes if isinstance(o, _Raised)]
        if raised:
            raise raised[0].error
        results: list[tuple[Branch, OutcomeReceipt | HatpError | None]] = []
        for branch, answer in zip(branches, outcomes, strict=True):
            if isinstance(answer, tuple):
                parsed, receipt = answer
                run.commits[branch.branch_id] = parsed
                run.note(self._key, TxnEvent.COMMITTED, branchId=branch.branch_id, receipt=receipt)
                results.append((branch, parsed))
            elif not isinstance(answer, _Raised):
                results.append((branch, answer))
        if run.state is TxnState.IN_DOUBT and all(r is not None for _, r in results):
            run.flush(self._log, state=TxnState.COMMITTING)  # the doubt is resolved
        return results

    async def _commit(
        self, run: TxnRun, branch: Branch
    ) -> tuple[OutcomeReceipt, dict[str, Any]] | HatpError | None:
        """Commit one branch: its checked receipt, a definite refusal, or ``None`` if no answer."""
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
                    fault_point(f"commit.after:{bid}")
                    return parsed, answer.receipt
                silence = f"unusable receipt: {problem}"
            if attempt == 1 and _checks.is_on("COORD-IN-DOUBT"):
                run.note(
                    self._key, TxnEvent.IN_DOUBT, branchId=bid, attempt=attempt, detail=silence
                )
                run.flush(self._log, state=TxnState.IN_DOUBT)
            elif not _checks.is_on("COORD-IN-DOUBT"):
                return HatpError(f"{bid}: {silence}")  # the naive reading: silence is failure
            await asyncio.sleep(backoff(attempt, self._delay))
        run.reason = f"{bid} has not answered after {self._attempts} attempts; still in doubt"
        return None

    def _lapsed_hold(self, run: TxnRun) -> HatpError | None:
        """Before the irreversible step, every hold must still be live."""
        now = self._clock.now()
        for branch in run.plan.branches:
            receipt = run.prepares.get(branch.branch_id)
            if branch.tier is not Tier.HOLD or receipt is None or not _checks.is_on("COORD-LEASE"):
                continue
            lease = receipt.lease_expires_at
            if lease is None or parse_time(lease) <= now:
                return HoldExpired(
                    f"the hold on {branch.branch_id} ended at {lease}, before the final step",
                    branch_id=branch.branch_id,
                )
        return None

    async def _unwind(self, run: TxnRun, branch_id: str, error: HatpError) -> None:
        run.reason = f"{branch_id}: {error}"
        run.note(self._key, TxnEvent.UNWINDING, branchId=branch_id, error=error.to_dict())
        run.flush(self._log, state=TxnState.UNWINDING)
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
        self._finish(run, TxnState.ABORTED)

    async def _abort_all(self, run: TxnRun) -> None:
        for branch in run.plan.branches:
            if not await self._settle(run, branch, self._abort_call(run, branch), TxnEvent.ABORTED):
                return
        self._finish(run, TxnState.ABORTED)

    @staticmethod
    def _compensate_call(run: TxnRun, participant: Participant, bid: str, token: str) -> _Call:
        return lambda: participant.compensate(run.txn_id, bid, run.fence, token)

    def _abort_call(self, run: TxnRun, branch: Branch) -> _Call:
        participant = self._participants[branch.participant]
        return lambda: participant.abort(run.txn_id, branch.branch_id, run.fence)

    async def _settle(self, run: TxnRun, branch: Branch, call: _Call, event: TxnEvent) -> bool:
        """Retry an undo or abort until it is answered; ``False`` leaves the txn open."""
        expected = (
            {BranchState.COMPENSATED}
            if event is TxnEvent.COMPENSATED
            else {BranchState.ABORTED, BranchState.COMPENSATED}
        )
        for attempt in range(1, self._attempts + 1):
            answer = await call_once(call, self._timeout)
            if answer.refusal is not None:
                run.reason += f"; {branch.branch_id} refused {event.value}: {answer.refusal}"
                return True  # definite; nothing more this coordinator can do
            if answer.receipt is not None:
                parsed, problem = self._vet(run, branch, answer.receipt, *expected)
                if parsed is not None and problem is None:
                    run.note(self._key, event, branchId=branch.branch_id, receipt=answer.receipt)
                    fault_point(f"{event.value.removeprefix('txn.')}.after:{branch.branch_id}")
                    if event is TxnEvent.COMPENSATED:
                        run.undone.add(branch.branch_id)
                    return True
            await asyncio.sleep(backoff(attempt, self._delay))
        run.reason += f"; {branch.branch_id} has not answered {event.value}"
        return False

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

    def _finish(self, run: TxnRun, state: TxnState, problems: list[str] | None = None) -> None:
        body: dict[str, Any] = {"state": state.value}
        if problems:
            body["problems"] = problems
        run.note(self._key, TxnEvent.OUTCOME, **body)
        run.writer.seal(self._key)
        run.flush(self._log, state=state, release=True)
        fault_point("log.outcome")
