"""Choosing how phase 1 fits people's decision time inside the holds [COORD-MODE].

A hold lasts only so long, renewals included (its horizon), and the
people's decision time comes out of it. In ``auto`` mode the coordinator
asks, before placing anything, how long the worst case along each approval
group's escalation chain is (the gateway's signed ChainEstimate: every
candidate's SLA in escalation order) and how long each hold could last if
placed now (the participant's signed Quote). Parallel mode fits when the
worst case plus the time commit needs is within the shortest hold;
otherwise people approve quoted prices first and the holds are placed
after (approval-first). A plan that requires effect previews
([PLAN-PREVIEWS]) is never run parallel, where people would be asked
before any step previewed: in ``auto`` it runs approval-first (``basis``
``"previews"``). Approval-first quotes every step, holds or not, so that
people approve each step's price and preview. The choice and the signed
numbers behind it are the record's ``txn.mode`` event, which an auditor
recomputes offline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hatp.coordinator._calls import bounded
from hatp.coordinator._gateway import ApprovalRequest, Gateway, gateway_for
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._vetting import describe, vet_estimate, vet_quote
from hatp.errors import StaleFence
from hatp.evidence import Keyring, json_number
from hatp.model import Branch, ChainEstimate, Mode, Quote, Tier
from hatp.participant import Participant

__all__ = ["ModeChoice", "ModeChooser", "choose_mode"]

#: Quotes by branch id: each parsed, and as its participant signed it.
_Signed = dict[str, tuple[Quote, dict[str, Any]]]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModeChoice:
    """The mode phase 1 runs in, the ``txn.mode`` body that records it, and the quotes."""

    chosen: Mode
    body: dict[str, Any]
    quotes: dict[str, Quote] = field(default_factory=dict)


def choose_mode(worst_seconds: float, shortest_hold_seconds: float, commit_seconds: float) -> Mode:
    """Parallel if the worst case and the commit fit inside the shortest hold, else
    approval-first [COORD-MODE]."""
    if worst_seconds + commit_seconds <= shortest_hold_seconds:
        return Mode.PARALLEL
    return Mode.APPROVAL_FIRST


class ModeChooser:
    """Gets the signed numbers a mode rests on, and chooses."""

    def __init__(
        self,
        *,
        participants: Mapping[str, Participant],
        gateway: Gateway,
        keyring: Keyring,
        call_timeout: float,
        commit_allowance: float,
    ) -> None:
        self._participants = participants
        self._gateway = gateway
        self._keyring = keyring
        self._timeout = call_timeout
        self._allowance = commit_allowance

    async def choose(self, run: TxnRun, decide_by: datetime) -> tuple[ModeChoice | None, str]:
        """Return the choice, or ``None`` and why it could not be made (the plan aborts).

        Raises:
            StaleFence: another coordinator owns the transaction now.
        """
        requested = run.plan.mode
        holds = [b for b in run.plan.branches if b.tier is Tier.HOLD]
        body: dict[str, Any] = {
            "requested": requested.value,
            "chosen": requested.value,
            "estimates": [],
            "quotes": [],
            "worstSeconds": None,
            "shortestHoldSeconds": None,
            "commitSeconds": json_number(self._allowance),
            "basis": None,
        }
        previewing = run.plan.preview_policy.demands
        if requested is Mode.AUTO and not holds and not previewing:
            body["chosen"] = Mode.PARALLEL.value
            return ModeChoice(Mode.PARALLEL, body), ""
        if requested in (Mode.PARALLEL, Mode.HOLDS_FIRST):
            return ModeChoice(requested, body), ""
        if requested is Mode.APPROVAL_FIRST or previewing:
            # People approve every step's quote, its preview with it, before
            # anything is prepared [COORD-PREVIEW]; in auto, a plan requiring
            # previews has no parallel to choose (people would be asked first).
            body["chosen"] = Mode.APPROVAL_FIRST.value
            if requested is Mode.AUTO:
                body["basis"] = "previews"
            return await self._approval_first(run, body, {})
        signed, problem = await self._quotes(run, holds)
        if signed is None:
            return None, problem
        body["quotes"] = [wire for _, wire in signed.values()]
        quotes = {bid: quote for bid, (quote, _) in signed.items()}
        estimates, problem = await self._estimates(run, decide_by)
        if estimates is None:
            return None, problem
        worst = max((e.worst_seconds for e in estimates), default=0)
        basis, shortest = min(
            ((bid, q.hold_seconds or 0.0) for bid, q in quotes.items()), key=lambda p: p[1]
        )
        chosen = choose_mode(worst, shortest, self._allowance)
        body.update(
            chosen=chosen.value,
            estimates=[e.to_wire() for e in estimates],
            worstSeconds=json_number(worst),
            shortestHoldSeconds=json_number(shortest),
            basis=basis,
        )
        if chosen is Mode.APPROVAL_FIRST:
            return await self._approval_first(run, body, signed)
        return ModeChoice(chosen, body, quotes), ""

    async def _approval_first(
        self, run: TxnRun, body: dict[str, Any], signed: _Signed
    ) -> tuple[ModeChoice | None, str]:
        """Approval-first: quote every branch not quoted yet, so that people approve
        each step's price and preview before anything is prepared [COORD-QUOTE]."""
        rest = [b for b in run.plan.branches if b.branch_id not in signed]
        more, problem = await self._quotes(run, rest)
        if more is None:
            return None, problem
        every = [(signed | more)[b.branch_id] for b in run.plan.branches]
        body["quotes"] = [wire for _, wire in every]
        quotes = {quote.branch_id: quote for quote, _ in every}
        return ModeChoice(Mode.APPROVAL_FIRST, body, quotes), ""

    async def _quotes(self, run: TxnRun, branches: list[Branch]) -> tuple[_Signed | None, str]:
        """Each branch's quote, checked, and as its participant signed it (what the record
        keeps: never a re-serialization of what was parsed)."""
        answers = await asyncio.gather(
            *(self._quote(run, branch) for branch in branches), return_exceptions=True
        )
        quotes: _Signed = {}
        for branch, answer in zip(branches, answers, strict=True):
            if isinstance(answer, StaleFence):
                raise answer
            if isinstance(answer, BaseException):
                return None, f"{branch.branch_id}: no quote: {describe(answer, self._timeout)}"
            parsed, problem = vet_quote(
                answer,
                self._keyring,
                txn_id=run.txn_id,
                branch=branch,
                plan_digest=run.digest,
                fence=run.fence,
            )
            if problem is not None or parsed is None:
                return None, f"{branch.branch_id}: the quote does not count: {problem}"
            quotes[branch.branch_id] = (parsed, answer)
        return quotes, ""

    async def _quote(self, run: TxnRun, branch: Branch) -> dict[str, Any]:
        participant = self._participants[branch.participant]
        return await bounded(
            participant.quote(run.plan, branch.branch_id, run.fence), self._timeout
        )

    async def _estimates(
        self, run: TxnRun, decide_by: datetime
    ) -> tuple[list[ChainEstimate] | None, str]:
        estimates: list[ChainEstimate] = []
        for group in run.plan.approvals:
            request = ApprovalRequest(run.txn_id, run.plan, run.digest, group, decide_by)
            gateway = gateway_for(self._gateway, group)  # the group's own [COORD-GATEWAYS]
            try:
                answer = await bounded(gateway.estimate(request), self._timeout)
            except Exception as exc:  # no estimate, no choice: fail closed
                failure = describe(exc, self._timeout)
                _log.info("approval %s: no estimate: %s", group.group_id, failure)
                return None, f"approval {group.group_id}: no estimate: {failure}"
            parsed, problem = vet_estimate(
                answer,
                self._keyring,
                gateway_id=gateway.gateway_id,
                txn_id=run.txn_id,
                group_id=group.group_id,
                plan_digest=run.digest,
            )
            if problem is not None or parsed is None:
                return None, f"approval {group.group_id}: the estimate does not count: {problem}"
            estimates.append(parsed)
        return estimates, ""
