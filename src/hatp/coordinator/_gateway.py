"""The approval side as the coordinator sees it: a :class:`Gateway` it asks.

The real Human Gateway (routing, Human Cards, quorum) is its own protocol
role. The coordinator only needs one call: ask an approval group about a
plan, get back a signed :class:`~hatp.model.Approval`. :class:`ScriptedGateway`
is a real gateway in every respect but the person: it signs what a script
says the person decided, on the injected clock, so tests and the demo's
``--auto`` mode get genuine signed approvals and rejections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from hatp.clock import Clock, format_time
from hatp.evidence import SigningKey, sign
from hatp.model import ApprovalDecision, ApprovalGroup, Plan
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "ApprovalRequest",
    "Gateway",
    "ScriptedAnswer",
    "ScriptedGateway",
    "sign_approval",
]


@dataclass(frozen=True)
class ApprovalRequest:
    """One ask: this approval group, about this plan, answered by ``decide_by``."""

    txn_id: str
    plan: Plan
    plan_digest: str
    group: ApprovalGroup
    decide_by: datetime


class Gateway(Protocol):
    """Where the coordinator asks for approvals."""

    @property
    def gateway_id(self) -> str:
        """The gateway's id; its signing key's issuer in the keyring."""
        ...

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        """Return the group's signed Approval (approve or reject).

        May take as long as the person takes; the coordinator cancels the
        call at the plan's ``decideBy``.
        """
        ...


def sign_approval(
    key: SigningKey,
    gateway_id: str,
    request: ApprovalRequest,
    decision: ApprovalDecision,
    approver: str,
    decided_at: datetime,
) -> dict[str, Any]:
    """Return the signed wire form of one approval group's decision."""
    return sign(
        {
            "hatpVersion": PROTOCOL_VERSION,
            "kind": "approval",
            "txnId": request.txn_id,
            "planDigest": request.plan_digest,
            "groupId": request.group.group_id,
            "decision": decision.value,
            "approver": approver,
            "gateway": gateway_id,
            "decidedAt": format_time(decided_at),
        },
        key,
    )


@dataclass(frozen=True)
class ScriptedAnswer:
    """What the scripted person does: decide, after some time on the clock, or never answer."""

    decision: ApprovalDecision
    approver: str
    after_seconds: float = 0.0
    never: bool = False


Script = Mapping[str, ScriptedAnswer] | Callable[[ApprovalRequest], Awaitable[ScriptedAnswer]]


class ScriptedGateway:
    """A gateway whose person follows a script: per group id, or a coroutine per request."""

    def __init__(self, gateway_id: str, key: SigningKey, clock: Clock, script: Script) -> None:
        self._id = gateway_id
        self._key = key
        self._clock = clock
        self._script = script
        self.asked: list[ApprovalRequest] = []

    @property
    def gateway_id(self) -> str:
        return self._id

    async def ask(self, request: ApprovalRequest) -> dict[str, Any]:
        self.asked.append(request)
        if isinstance(self._script, Mapping):
            answer = self._script[request.group.group_id]
        else:
            answer = await self._script(request)
        if answer.never:
            await asyncio.Event().wait()  # until the coordinator gives up at the deadline
        if answer.after_seconds:
            await self._clock.sleep_until(
                self._clock.now() + timedelta(seconds=answer.after_seconds)
            )
        return sign_approval(
            self._key, self._id, request, answer.decision, answer.approver, self._clock.now()
        )
