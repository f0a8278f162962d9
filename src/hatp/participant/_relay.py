"""A participant that forwards every call to another: the base of links and middleware."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from hatp.model import BranchStatus, Plan, Preconditions
from hatp.participant._protocol import Participant

__all__ = ["Relay"]

T = TypeVar("T")


class Relay:
    """Forwards every :class:`Participant` call to ``inner``, unchanged.

    Subclass it to watch or change what passes: override :meth:`relay` to
    wrap every call (a timer, a link that loses answers), or one method to
    change just that call. It is a Participant itself, so relays stack.
    """

    def __init__(self, inner: Participant) -> None:
        self.inner = inner

    @property
    def participant_id(self) -> str:
        return self.inner.participant_id

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one forwarded call (``method`` names it); the default just awaits it."""
        return await call()

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        return await self.relay("prepare", lambda: self.inner.prepare(plan, branch_id, fence))

    async def quote(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        return await self.relay("quote", lambda: self.inner.quote(plan, branch_id, fence))

    async def replace(self, plan: Plan, branch_id: str, fence: int, attempt: int) -> dict[str, Any]:
        return await self.relay(
            "replace", lambda: self.inner.replace(plan, branch_id, fence, attempt)
        )

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        return await self.relay(
            "commit",
            lambda: self.inner.commit(txn_id, branch_id, fence, plan_digest, preconditions),
        )

    async def abort(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        return await self.relay("abort", lambda: self.inner.abort(txn_id, branch_id, fence))

    async def compensate(
        self, txn_id: str, branch_id: str, fence: int, undo_token: str
    ) -> dict[str, Any]:
        return await self.relay(
            "compensate", lambda: self.inner.compensate(txn_id, branch_id, fence, undo_token)
        )

    async def renew(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        return await self.relay("renew", lambda: self.inner.renew(txn_id, branch_id, fence))

    async def status(self, txn_id: str, branch_id: str) -> BranchStatus:
        return await self.relay("status", lambda: self.inner.status(txn_id, branch_id))
