"""Keeping holds while people decide: lease renewals and the approval deadline.

While phase 1 waits for approvals, each prepared hold is renewed at half of
what is left of its lease ([COORD-RENEW]): early enough that a lost or slow
renewal leaves time for another try, late enough that a 20-minute lease
costs one call per ten minutes. A hold that is lost anyway is placed again
([COORD-REPLACE]) without asking anyone twice. The lease can never pass the hold's
horizon, so no approval may be counted that arrives too late to commit
before the first horizon: the approval deadline shrinks to fit inside the
holds ([COORD-APPROVE-BY]).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from hatp.clock import Clock, format_time, parse_time
from hatp.coordinator._calls import bounded
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._vetting import describe, vet_renew, vet_vote
from hatp.errors import HoldExpired, RenewalDeclined, StaleFence
from hatp.evidence import Keyring, SigningKey
from hatp.model import Branch, TxnEvent
from hatp.participant import Participant

#: A declined renewal's reason when only the payer, on session, can extend the hold.
AUTHENTICATION_REQUIRED = "AUTHENTICATION_REQUIRED"
#: A lease closer than this to its end is not renewed again: it would end mid-call.
MIN_RENEW_STEP = timedelta(seconds=1)

_log = logging.getLogger(__name__)


def approve_by(run: TxnRun, decide_by: datetime, allowance: float) -> tuple[datetime, str]:
    """The approval deadline and what sets it: ``decideBy``, or a hold's branchId.

    It is ``min(decideBy, holdHorizon - allowance)`` over every prepared hold
    [COORD-APPROVE-BY]: an approval after it could not be committed while
    every hold still lasts.
    """
    first = run.first_horizon()
    if first is not None and (latest := first[0] - timedelta(seconds=allowance)) < decide_by:
        return latest, first[1]
    return decide_by, "decideBy"


class HoldKeeper:
    """Renews the prepared holds of one transaction until phase 1 ends [COORD-RENEW]."""

    def __init__(
        self,
        *,
        key: SigningKey,
        participants: Mapping[str, Participant],
        keyring: Keyring,
        clock: Clock,
        call_timeout: float,
        max_replacements: int = 2,
    ) -> None:
        self._key = key
        self._participants = participants
        self._keyring = keyring
        self._clock = clock
        self._timeout = call_timeout
        self._max_replacements = max_replacements

    async def keep(self, run: TxnRun, branch: Branch, *, may_replace: bool = True) -> str | None:
        """Renew one hold at half its remaining lease until the lease reaches its horizon.

        Returns ``None`` when there is nothing left to renew (the lease reached
        the horizon, or is about to end: [COORD-LEASE] decides then), or the
        problem that loses the hold for good: a renew receipt that does not
        verify, or a lost hold (``HOLD_EXPIRED``) that cannot be placed again
        [COORD-REPLACE]. A renewal that gets no answer is tried again at the
        next half. Cancelled, it lets a call in flight finish first, so no
        renew or replace reaches the participant after phase 2 began. In
        phase 2 (``may_replace`` false: the decision is logged) a lost hold
        stays lost.

        Raises:
            StaleFence: another coordinator owns the transaction now.
        """
        bid = branch.branch_id
        while True:
            receipt = run.prepares[bid]
            if receipt.hold_horizon is None:
                return None
            horizon = parse_time(receipt.hold_horizon)
            lease = parse_time(run.lease(bid) or "")
            left = lease - self._clock.now()
            if lease >= horizon or left <= MIN_RENEW_STEP:
                return None
            await self._clock.sleep_until(self._clock.now() + max(left / 2, MIN_RENEW_STEP))
            call = asyncio.create_task(self._renew(run, branch, may_replace))
            try:
                problem = await asyncio.shield(call)
            except asyncio.CancelledError:
                try:
                    await call
                except Exception as exc:  # stopping anyway: the renewal's failure is moot
                    _log.debug("txn %s: %s renewal ended on stop: %s", run.txn_id, bid, exc)
                raise
            if problem is not None:
                return f"{bid}: {problem}"

    async def _renew(self, run: TxnRun, branch: Branch, may_replace: bool) -> str | None:
        """One renewal: record the new lease, place a lost hold again, or return the problem."""
        participant = self._participants[branch.participant]
        try:
            receipt = await bounded(
                participant.renew(run.txn_id, branch.branch_id, run.fence), self._timeout
            )
        except StaleFence:
            raise
        except HoldExpired as exc:
            problem = await self.replace(run, branch) if may_replace else "phase 2 began"
            if problem is None:
                return None
            return f"the hold was lost ({exc.code}: {exc.message}) and {problem}"
        except RenewalDeclined as exc:  # the lease stands; try again at the next half
            if exc.data.get("reason") == AUTHENTICATION_REQUIRED:
                # Like no consent to re-authorize off-session: only the payer can act.
                run.payer_needed.add(branch.branch_id)
            return None
        except Exception as exc:  # no answer, or a refusal: the lease stands; try at the next half
            _log.info("txn %s: %s not renewed now: %s", run.txn_id, branch.branch_id, exc)
            return None
        parsed, problem = vet_renew(
            receipt,
            self._keyring,
            txn_id=run.txn_id,
            branch=branch,
            plan_digest=run.digest,
            fence=run.fence,
        )
        if problem is not None or parsed is None:
            return f"renew receipt does not count: {problem}"
        run.leases[branch.branch_id] = parsed.lease_expires_at
        run.note(self._key, TxnEvent.RENEWED, branchId=branch.branch_id, receipt=receipt)
        return None

    async def replace(self, run: TxnRun, branch: Branch) -> str | None:
        """Place a lost hold again under the same plan [COORD-REPLACE]; ``None`` when placed.

        People approved the plan, not one particular hold, so nobody is asked
        again. The new prepare receipt is checked as the first was (and
        against the quote, approval-first), must be the next attempt, and is
        recorded as ``txn.replaced``; the hold's lease and horizon are the new
        receipt's from then on. A hold is placed again at most
        ``max_replacements`` times.

        Raises:
            StaleFence: another coordinator owns the transaction now.
        """
        bid = branch.branch_id
        attempt = run.prepares[bid].attempt + 1
        if attempt > self._max_replacements + 1:
            return f"it was placed {attempt - 1} times already"
        participant = self._participants[branch.participant]
        try:
            receipt = await bounded(
                participant.replace(run.plan, bid, run.fence, attempt), self._timeout
            )
        except StaleFence:
            raise
        except Exception as exc:  # not placed again: the hold stays lost
            failure = describe(exc, self._timeout)
            _log.warning("txn %s: %s could not be placed again: %s", run.txn_id, bid, failure)
            run.note(self._key, TxnEvent.REPLACED, branchId=bid, receipt=None, problem=failure)
            return f"it could not be placed again: {failure}"
        parsed, problem = vet_vote(receipt, self._keyring, run, branch)
        if problem is None and parsed is not None and parsed.attempt != attempt:
            problem = f"receipt is for attempt {parsed.attempt}, not {attempt}"
        run.note(self._key, TxnEvent.REPLACED, branchId=bid, receipt=receipt, problem=problem)
        if problem is not None or parsed is None:
            return f"it was not placed again: {problem}"
        run.prepares[bid] = parsed
        run.leases.pop(bid, None)
        run.replaced.set()
        return None


def deadline_body(moment: datetime, basis: str) -> dict[str, Any]:
    """The body of a ``txn.deadline`` event (besides ``planDigest``)."""
    return {"approveBy": format_time(moment), "basis": basis}
