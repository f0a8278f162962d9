"""A final step still in doubt as the holds near their end: escalate, record, offer recovery.

While the final step has not answered, the coordinator neither commits the
holds nor releases them: it keeps renewing them and keeps asking. Holds
cannot outlast their horizons, though, and a card authorization cannot be
renewed at all. So ``escalation.leadSeconds`` before the first hold ends
the coordinator brings a person in ([COORD-ESCALATE]): a question through
the gateway, to the payer when the plan's recovery clause gives no consent
to re-authorize off-session (only they can act on session), else to the
plan's escalation address. It still keeps asking. An answer that comes
after that is a late answer ([COORD-LATE-ANSWER]): it is recorded with each
hold's state, live or lapsed; the live holds are committed, the lapsed ones
released, and recovery is offered to a person ([COORD-RECOVERY-OFFER]): a
new linked transaction, never run by this coordinator, that needs its own
approval.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from hatp.clock import Clock, format_time, parse_time
from hatp.coordinator._gateway import Gateway
from hatp.coordinator._txn import TxnRun
from hatp.coordinator._vetting import describe
from hatp.evidence import SigningKey
from hatp.model import Branch, Mode, Plan, Tier, TxnEvent
from hatp.version import PROTOCOL_VERSION

__all__ = ["Escalator", "payer_present"]

_log = logging.getLogger(__name__)


def payer_present(plan: Plan, lapsed: list[str], *, declined: bool = False) -> bool:
    """Whether recovering ``lapsed`` needs the payer on session.

    Yes unless the plan's recovery clause consents to off-session
    re-authorization and what is re-placed fits under its cap, in its currency;
    and yes whenever a renewal was ``declined`` with ``AUTHENTICATION_REQUIRED``,
    which is handled like no consent.
    """
    if declined or plan.recovery is None or not plan.recovery.off_session_reauth.consented:
        return True
    cap = plan.recovery.off_session_reauth.up_to
    if cap is None:
        return True
    needed = Decimal(0)
    for branch_id in lapsed:
        amount = plan.branch(branch_id).amount
        if amount is None:
            continue
        if amount.currency != cap.currency:
            return True
        needed += amount.decimal
    return needed > cap.decimal


def _escalation_target(plan: Plan, *, declined: bool = False) -> str:
    """The payer when they must come back on session, else the escalation address."""
    consented = plan.recovery is not None and plan.recovery.off_session_reauth.consented
    if declined:
        consented = False
    if consented and plan.escalation is not None and plan.escalation.address is not None:
        return plan.escalation.address
    return plan.on_behalf_of


def _question_id(kind: str, txn_id: str, branch_id: str) -> str:
    # A question id is a name ([A-Za-z][A-Za-z0-9._/-]*); a txnId may hold ':'.
    return f"{kind}/{re.sub(r'[^A-Za-z0-9._-]', '-', txn_id)}/{branch_id}"[:128]


class Escalator:
    """Escalates an in-doubt final step, and records a late answer and the recovery offer."""

    def __init__(
        self,
        *,
        key: SigningKey,
        gateway: Gateway,
        clock: Clock,
        commit_allowance: float,
    ) -> None:
        self._key = key
        self._gateway = gateway
        self._clock = clock
        self._allowance = commit_allowance

    def due(self, run: TxnRun) -> datetime | None:
        """When an in-doubt final step must be escalated: ``leadSeconds`` (without an
        ``escalation`` clause, the commit allowance) before the first hold ends;
        ``None`` with no hold to lose."""
        first = run.first_horizon()
        if first is None:
            return None
        escalation = run.plan.escalation
        lead = self._allowance if escalation is None else escalation.lead_seconds
        return first[0] - timedelta(seconds=lead)

    async def escalate(self, run: TxnRun, branch: Branch, silence: str) -> None:
        """Bring a person in about the in-doubt ``branch`` [COORD-ESCALATE]; record it.

        The coordinator keeps asking the participant afterwards; the person
        is told, not asked to decide for it.
        """
        first = run.first_horizon()
        ends = format_time(first[0]) if first else None
        declined = bool(run.payer_needed)
        target = _escalation_target(run.plan, declined=declined)
        prompt = (
            f"The final step {branch.branch_id} ({branch.operation} at {branch.participant}) "
            f"of transaction {run.txn_id} has not answered ({silence}). Nothing is committed "
            f"or released while it is in doubt; the first hold ends at {ends}. The "
            "coordinator keeps asking. Please find out whether it took effect, and reply "
            "with what you found."
        )
        if declined:
            prompt += (
                f" The renewal of {', '.join(sorted(run.payer_needed))} was declined: "
                "authentication required. Only the payer, present, can extend it."
            )
        question = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "question",
            "questionId": _question_id("escalation", run.txn_id, branch.branch_id),
            "asker": run.plan.initiator,
            "onBehalfOf": run.plan.on_behalf_of,
            "address": target,
            "type": "text",
            "prompt": {"summary": prompt},
            "maxLength": 4000,
            "decideBy": ends or format_time(self._clock.now() + timedelta(days=1)),
        }
        asked, problem = await self._ask(question)
        run.escalated.add(branch.branch_id)
        run.note(
            self._key,
            TxnEvent.ESCALATED,
            branchId=branch.branch_id,
            detail=silence,
            firstHoldEnds=ends,
            to=target,
            payerPresent=payer_present(run.plan, _holds(run), declined=declined),
            declined=sorted(run.payer_needed),
            holds=self._holds_now(run),
            question=asked,
            problem=problem,
        )

    def late_answer(self, run: TxnRun, branch: Branch) -> list[str]:
        """Record the final step's late answer with every hold's state; return the lapsed
        holds [COORD-LATE-ANSWER]."""
        holds = self._holds_now(run)
        run.note(self._key, TxnEvent.LATE_ANSWER, branchId=branch.branch_id, holds=holds)
        return [h["branchId"] for h in holds if not h["live"]]

    async def offer_recovery(self, run: TxnRun, lapsed: list[str]) -> None:
        """Offer a person a new linked transaction that places ``lapsed`` again
        [COORD-RECOVERY-OFFER]. It needs its own approval; this coordinator never runs it."""
        linked = f"{run.txn_id}.recovery"[:128]
        decide_by = self._clock.now() + timedelta(days=7)
        plan = _recovery_plan(run.plan, linked, lapsed, decide_by)
        present = payer_present(run.plan, lapsed, declined=bool(run.payer_needed))
        how = "with the payer present" if present else "off-session, under the saved mandate"
        prompt = (
            f"Transaction {run.txn_id}: its final step answered after the holds on "
            f"{', '.join(lapsed)} lapsed. Recovery is a new transaction {linked} that places "
            f"them again, {how}; it needs its own approval. Run it?"
        )
        question = {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "question",
            "questionId": _question_id("recovery", run.txn_id, "-".join(lapsed)),
            "asker": run.plan.initiator,
            "onBehalfOf": run.plan.on_behalf_of,
            "address": _escalation_target(run.plan, declined=bool(run.payer_needed)),
            "type": "choose",
            "prompt": {"summary": prompt},
            "options": ["run-recovery", "decline"],
            "decideBy": format_time(decide_by),
        }
        asked, problem = await self._ask(question)
        run.note(
            self._key,
            TxnEvent.RECOVERY_OFFERED,
            lapsed=lapsed,
            linkedTxnId=linked,
            payerPresent=present,
            plan=plan,
            question=asked,
            problem=problem,
        )

    async def _ask(self, question: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """Ask a person through the gateway: its signed pending, or why it could not.

        Either way the coordinator goes on (it keeps asking the participant, and the
        offer stands in the record even if nobody was reached).
        """
        try:
            return await self._gateway.ask_question(question), None
        except Exception as exc:  # recorded, never fatal
            _log.warning("an escalation question could not be asked: %s", exc)
            return None, describe(exc, None)

    def _holds_now(self, run: TxnRun) -> list[dict[str, Any]]:
        now = self._clock.now()
        out = []
        for branch in run.plan.branches:
            receipt = run.prepares.get(branch.branch_id)
            if branch.tier is not Tier.HOLD or receipt is None:
                continue
            lease = run.lease(branch.branch_id)
            live = lease is not None and parse_time(lease) > now
            out.append({"branchId": branch.branch_id, "leaseExpiresAt": lease, "live": live})
        return out


def _holds(run: TxnRun) -> list[str]:
    return [b.branch_id for b in run.plan.branches if b.tier is Tier.HOLD]


def _recovery_plan(
    plan: Plan, linked: str, lapsed: list[str], decide_by: datetime
) -> dict[str, Any]:
    """The linked transaction: the lapsed holds again, the same approvals, its own deadline."""
    wire = plan.to_wire()
    branches = [{**b.to_wire(), "settles": []} for b in plan.branches if b.branch_id in lapsed]
    summary = f"Recovery of {plan.txn_id}: place {', '.join(lapsed)} again."
    return {
        **wire,
        "txnId": linked,
        "branches": branches,
        "deadlines": {"decideBy": format_time(decide_by)},
        "mode": Mode.AUTO.value,
        "agentText": {"summary": summary},
    }
