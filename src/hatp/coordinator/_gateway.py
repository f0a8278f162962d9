"""The approval side as the coordinator sees it: a :class:`Gateway` it asks and polls.

The Human Gateway (:class:`hatp.gateway.HumanGateway`) routes each ask to
people, who may take hours. So an ask usually answers with a signed
*pending vote* naming the ask, and the coordinator polls that ask until the
gateway signs the group's final :class:`~hatp.model.Approval`, or the plan's
``decideBy`` passes. The coordinator also asks the gateway how long the worst
case along a group's escalation chain is (``estimate``), and tells it when
the approval deadline moves earlier to fit inside the holds (``tighten``).
A poll returns as soon as the ask is decided, which is how an in-process
gateway notifies the coordinator without a busy loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from hatp.model import ApprovalGroup, Plan

__all__ = ["ApprovalRequest", "Gateway"]


@dataclass(frozen=True)
class ApprovalRequest:
    """One ask: this approval group, about this plan, answered by ``decide_by``.

    ``terms`` (holds-first mode) is the HoldTerms wire dict people approve with
    the plan: the holds' end times and the approval deadline that fits inside
    them. Their votes and the approval carry its digest (``termsDigest``).
    """

    txn_id: str
    plan: Plan
    plan_digest: str
    group: ApprovalGroup
    decide_by: datetime
    terms: dict[str, Any] | None = None


class Gateway(Protocol):
    """Where the coordinator asks for approvals."""

    @property
    def gateway_id(self) -> str:
        """The gateway's id; its signing key's issuer in the keyring."""
        ...

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Ask the group; return a signed PendingVote, or the signed final Approval.

        Asking again for the same transaction, group and plan returns the same ask.
        """
        ...

    async def poll(self, ask_id: str, *, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Return the signed PendingVote while the ask is open, else the final Approval.

        Waits up to ``wait_seconds`` (on the gateway's clock) for a decision
        and returns as soon as there is one.
        """
        ...

    async def withdraw(self, ask_id: str, reason: str) -> None:
        """Withdraw an ask the transaction no longer needs; a decided ask stays decided."""
        ...

    async def withdraw_transaction(self, txn_id: str, reason: str) -> list[str]:
        """Withdraw every open ask about the transaction, whether or not its asker
        logged it; return their ids. A decided ask stays decided."""
        ...

    async def estimate(self, request: ApprovalRequest) -> dict[str, Any]:
        """Return the signed ChainEstimate of asking the group: the worst case along
        its escalation chain, nobody answering. Asks nobody."""
        ...

    async def ask_question(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a person a question (§19); return the signed pending, or the signed Answer.
        The coordinator asks one when it brings a person in [COORD-ESCALATE]."""
        ...

    async def tighten(self, ask_id: str, decide_by: datetime) -> dict[str, Any]:
        """Move an open ask's deadline earlier (never later); return the signed
        PendingVote with the deadline now in force, or the final Approval."""
        ...
