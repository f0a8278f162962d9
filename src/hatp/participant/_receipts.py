"""Building and signing a participant's receipts [PART-SIGNED].

Each receipt is written in its normal form (every member present, absent
ones ``null``), signed with the participant's key, and checked against its
pydantic model before it leaves, so a malformed receipt is never stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from hatp.clock import format_time
from hatp.evidence import SigningKey, json_number, sign
from hatp.model import (
    Amount,
    BranchState,
    EffectPreview,
    ObservedEffect,
    OutcomeReceipt,
    Preconditions,
    PrepareReceipt,
    Quote,
    RenewReceipt,
    Tier,
    UndoOffer,
    Vote,
)
from hatp.version import PROTOCOL_VERSION


@dataclass(frozen=True)
class Signer:
    """Who signs, and what every receipt of one request shares."""

    key: SigningKey
    participant: str
    txn_id: str
    branch_id: str
    fence: int
    now: datetime

    def _head(self, kind: str, plan_digest: str | None) -> dict[str, Any]:
        return {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": kind,
            "txnId": self.txn_id,
            "branchId": self.branch_id,
            "participant": self.participant,
            "planDigest": plan_digest,
            "fence": self.fence,
        }

    def prepare(
        self,
        plan_digest: str,
        tier: Tier,
        vote: Vote,
        *,
        reason: str | None = None,
        lease_expires_at: datetime | None = None,
        hold_horizon: datetime | None = None,
        preconditions: Preconditions | None = None,
        cost: Amount | None = None,
        preview: EffectPreview | None = None,
        attempt: int = 1,
    ) -> dict[str, Any]:
        """Return a signed PrepareReceipt (its wire dict); ``attempt`` > 1 for a replacement."""
        body = {
            **self._head("prepare", plan_digest),
            "attempt": attempt,
            "vote": vote.value,
            "reason": reason,
            "tier": tier.value,
            "leaseExpiresAt": _time(lease_expires_at),
            "holdHorizon": _time(hold_horizon),
            "preconditions": None if preconditions is None else preconditions.to_wire(),
            "cost": None if cost is None else cost.to_wire(),
            "preview": None if preview is None else preview.to_wire(),
            "time": format_time(self.now),
        }
        signed = sign(body, self.key)
        PrepareReceipt.model_validate(signed)
        return signed

    def quote(
        self,
        plan_digest: str,
        tier: Tier,
        *,
        cost: Amount | None,
        valid_until: datetime | None,
        lease_seconds: float | None,
        hold_seconds: float | None,
        preview: EffectPreview | None = None,
    ) -> dict[str, Any]:
        """Return a signed Quote (its wire dict)."""
        body = {
            **self._head("quote", plan_digest),
            "tier": tier.value,
            "cost": None if cost is None else cost.to_wire(),
            "validUntil": _time(valid_until),
            "leaseSeconds": None if lease_seconds is None else json_number(lease_seconds),
            "holdSeconds": None if hold_seconds is None else json_number(hold_seconds),
            "preview": None if preview is None else preview.to_wire(),
            "time": format_time(self.now),
        }
        signed = sign(body, self.key)
        Quote.model_validate(signed)
        return signed

    def renew(
        self, plan_digest: str, lease_expires_at: datetime, hold_horizon: datetime
    ) -> dict[str, Any]:
        """Return a signed RenewReceipt (its wire dict)."""
        body = {
            **self._head("renew", plan_digest),
            "leaseExpiresAt": format_time(lease_expires_at),
            "holdHorizon": format_time(hold_horizon),
            "time": format_time(self.now),
        }
        signed = sign(body, self.key)
        RenewReceipt.model_validate(signed)
        return signed

    def outcome(
        self,
        kind: Literal["commit", "abort", "compensate"],
        plan_digest: str | None,
        outcome: BranchState,
        *,
        undo_token: str | None = None,
        effect: dict[str, Any] | None = None,
        observed: ObservedEffect | None = None,
        undo: UndoOffer | None = None,
    ) -> dict[str, Any]:
        """Return a signed OutcomeReceipt (its wire dict); ``undo`` (a commit's offer)
        is written only when given."""
        body = {
            **self._head(kind, plan_digest),
            "outcome": outcome.value,
            "undoToken": undo_token,
            "effect": effect,
            "observed": None if observed is None else observed.to_wire(),
            "time": format_time(self.now),
        }
        if undo is not None:
            body["undo"] = undo.to_wire()
        signed = sign(body, self.key)
        OutcomeReceipt.model_validate(signed)
        return signed


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else format_time(moment)
