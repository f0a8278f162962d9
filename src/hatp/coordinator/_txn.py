"""One transaction as the coordinator drives it: its plan, fence, record and receipts.

Events are appended to the record in memory as things happen and made
durable with :meth:`TxnRun.flush` exactly where the protocol needs them
durable: the plan before any prepare, the decision (with every vote and
approval it rests on) before phase 2, an in-doubt or unwinding state before
acting on it, and the outcome. Phase-2 receipts need not be durable one by
one: after a crash the idempotent commit is sent again and returns the same
receipt.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hatp import _checks
from hatp.clock import parse_time
from hatp.evidence import RecordWriter, SigningKey
from hatp.model import (
    Decision,
    EffectVerdict,
    OutcomeReceipt,
    Plan,
    PrepareReceipt,
    Quote,
    RenewReceipt,
    Tier,
    TxnEvent,
    TxnState,
    Vote,
)
from hatp.store import DecisionLog


@dataclass
class TxnRun:
    """The coordinator's working state for one transaction it owns under ``fence``."""

    plan: Plan
    digest: str
    fence: int
    writer: RecordWriter
    persisted: int
    state: TxnState = TxnState.ACTIVE
    prepares: dict[str, PrepareReceipt] = field(default_factory=dict)
    commits: dict[str, OutcomeReceipt] = field(default_factory=dict)
    undone: set[str] = field(default_factory=set)
    reason: str = ""
    #: The gateway's ask for each approval group that answered with a pending vote.
    asks: dict[str, str] = field(default_factory=dict)
    #: The approval groups whose final approval is in.
    decided_asks: set[str] = field(default_factory=set)
    #: Phase 1 ends here: ``decideBy``, or earlier to fit inside the holds [COORD-APPROVE-BY].
    approve_by: datetime = field(default_factory=lambda: datetime.max.replace(tzinfo=UTC))
    #: The latest ``leaseExpiresAt`` of each prepared hold: its prepare or last renewal.
    leases: dict[str, str] = field(default_factory=dict)
    #: Approval-first: the signed quote of each hold, which its prepare must match.
    quotes: dict[str, Quote] = field(default_factory=dict)
    #: Holds-first: the HoldTerms people approve with the plan, and their digest.
    terms: dict[str, Any] | None = None
    terms_digest: str | None = None
    #: Set when a lost hold was placed again [COORD-REPLACE]: the deadline is looked at anew.
    replaced: asyncio.Event = field(default_factory=asyncio.Event)
    #: The in-doubt branches a person was brought in about [COORD-ESCALATE].
    escalated: set[str] = field(default_factory=set)
    #: Holds whose renewal was declined AUTHENTICATION_REQUIRED: the payer is needed.
    payer_needed: set[str] = field(default_factory=set)
    #: The holds that had lapsed when the final step's late answer came [COORD-LATE-ANSWER].
    lapsed: list[str] = field(default_factory=list)
    #: Those of them already released.
    released_lapsed: set[str] = field(default_factory=set)
    #: Whether recovery was offered to a person [COORD-RECOVERY-OFFER].
    offered: bool = False
    #: Branches whose participant refused, for certain, to release or undo them (why).
    held: dict[str, str] = field(default_factory=dict)
    #: How each committed branch's observed effect compares with its preview [COORD-EFFECT].
    effects: dict[str, EffectVerdict] = field(default_factory=dict)
    #: Whether the last log write gave the ownership lease up.
    released: bool = False

    @property
    def txn_id(self) -> str:
        return self.plan.txn_id

    def note(self, key: SigningKey, event: TxnEvent, **body: Any) -> None:
        """Append one signed event (not yet durable) carrying the plan digest."""
        self.writer.append(event.value, {"planDigest": self.digest, **body}, key)

    async def flush(
        self,
        log: DecisionLog,
        *,
        state: TxnState | None = None,
        decision: Decision | None = None,
        release: bool = False,
    ) -> None:
        """Make every event so far durable, with the new state, in one log write (on one
        of the store's worker threads: the event loop never waits on the database).

        ``release`` gives the ownership lease up in the same write.

        Raises:
            StaleFence: another coordinator owns the transaction now.
            StoreUnavailable: the write failed or did not answer in time; the run must
                stop (recovery reads what the log holds, the write or not).
        """
        new = self.writer.written_since(self.persisted)
        await log.store.call(
            log.append, self.txn_id, self.fence, new, state=state, decision=decision,
            release=release,
        )  # fmt: skip
        self.persisted += len(new)
        self.released = release
        if state is not None:
            self.state = state

    def lease(self, branch_id: str) -> str | None:
        """A prepared hold's latest ``leaseExpiresAt``: of its last renewal, else of its
        (latest) prepare receipt [COORD-RENEW]; ``None`` if it has none."""
        receipt = self.prepares.get(branch_id)
        renewed = self.leases.get(branch_id)
        return renewed or (receipt.lease_expires_at if receipt is not None else None)

    def first_horizon(self) -> tuple[datetime, str] | None:
        """The earliest ``holdHorizon`` of the prepared holds and its branch (the first in
        plan order on a tie): no hold lasts past it; ``None`` with no hold."""
        ends = [
            (parse_time(receipt.hold_horizon), branch.branch_id)
            for branch in self.plan.branches
            if branch.tier is Tier.HOLD
            and (receipt := self.prepares.get(branch.branch_id)) is not None
            and receipt.hold_horizon is not None
        ]
        return min(ends, key=lambda end: end[0]) if ends else None

    def lapsed_hold(self, now: datetime) -> tuple[str, str | None] | None:
        """The first hold whose lease has ended by ``now``: ``(branchId, leaseExpiresAt)``.

        Such a hold cannot be committed [COORD-LEASE]; ``None`` when every hold is live.
        The lease is the latest one: of the last renewal, if any [COORD-RENEW].
        """
        if not _checks.is_on("COORD-LEASE"):
            return None
        for branch in self.plan.branches:
            receipt = self.prepares.get(branch.branch_id)
            if branch.tier is not Tier.HOLD or receipt is None:
                continue
            lease = self.lease(branch.branch_id)
            if lease is None or parse_time(lease) <= now:
                return branch.branch_id, lease
        return None

    def restore(self, events: list[dict[str, Any]]) -> None:
        """Rebuild votes, commits and undos from a logged record (after a takeover)."""
        for event in events:
            kind, body = event["type"], event["body"]
            if kind == TxnEvent.PREPARED and body.get("problem") is None and body.get("receipt"):
                receipt = PrepareReceipt.model_validate(body["receipt"])
                if receipt.vote is Vote.YES:
                    self.prepares[receipt.branch_id] = receipt
            elif kind == TxnEvent.REPLACED and body.get("problem") is None:
                again = PrepareReceipt.model_validate(body["receipt"])
                self.prepares[again.branch_id] = again
                self.leases.pop(again.branch_id, None)
            elif kind == TxnEvent.RENEWED:
                renewed = RenewReceipt.model_validate(body["receipt"])
                self.leases[renewed.branch_id] = renewed.lease_expires_at
            elif kind == TxnEvent.COMMITTED:
                committed = OutcomeReceipt.model_validate(body["receipt"])
                self.commits[committed.branch_id] = committed
            elif kind == TxnEvent.EFFECT:
                self.effects[str(body["branchId"])] = EffectVerdict(str(body["verdict"]))
            elif kind == TxnEvent.COMPENSATED:
                self.undone.add(str(body["branchId"]))
            elif kind == TxnEvent.PENDING:
                self.asks[str(body["groupId"])] = str(body["pending"]["askId"])
            elif kind == TxnEvent.APPROVAL and body.get("approval") is not None:
                self.decided_asks.add(str(body["groupId"]))
            elif kind == TxnEvent.ESCALATED:
                self.escalated.add(str(body["branchId"]))
                self.payer_needed.update(str(b) for b in body.get("declined") or [])
            elif kind == TxnEvent.LATE_ANSWER:
                self.lapsed = [str(h["branchId"]) for h in body["holds"] if not h["live"]]
            elif kind == TxnEvent.ABORTED and str(body["branchId"]) in self.lapsed:
                self.released_lapsed.add(str(body["branchId"]))
            elif kind == TxnEvent.HELD:
                self.held[str(body["branchId"])] = (
                    f"{body.get('step')} refused: {body.get('error')}"
                )
            elif kind == TxnEvent.RECOVERY_OFFERED:
                self.offered = True
            elif kind == TxnEvent.DECIDED:
                self.reason = str(body.get("reason", ""))


def effects_differ(run: TxnRun) -> list[str]:
    """The committed branches whose observed effect differs from the approved preview."""
    return sorted(bid for bid, verdict in run.effects.items() if verdict is EffectVerdict.DIFFERS)
