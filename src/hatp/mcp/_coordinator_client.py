"""Reaching a coordinator over MCP: begin a transaction, follow it, fetch its record, take
a committed one back."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Unpack

from mcp import Client

from hatp._undo_ask import UndoAsk, undo_request
from hatp.errors import PeerUnavailable
from hatp.evidence import Keyring
from hatp.mcp._advert import check_server
from hatp.mcp._rpc import request
from hatp.mcp._wire import METHODS
from hatp.model import Plan, TxnState

__all__ = ["McpCoordinator", "mcp_coordinator"]


class McpCoordinator:
    """A coordinator behind an MCP client session (see :func:`mcp_coordinator`)."""

    def __init__(self, coordinator_id: str, client: Client, timeout: float | None) -> None:
        self._id = coordinator_id
        self._client = client
        self._timeout = timeout

    @property
    def coordinator_id(self) -> str:
        """The coordinator's id, as its advert and its record name it."""
        return self._id

    async def begin(self, plan: Plan | Mapping[str, Any]) -> TxnState:
        """Hand the coordinator ``plan``; return the transaction's state once it is logged.

        Raises:
            PlanInvalid, VersionUnsupported, OutcomeConflict: refused; nothing was logged.
        """
        wire = plan.to_wire() if isinstance(plan, Plan) else dict(plan)
        answer = await self._call("txn/begin", {"plan": wire})
        return TxnState(answer["state"])

    async def state(self, txn_id: str) -> TxnState:
        """Return where the transaction stands.

        Raises:
            TransactionUnknown: the coordinator has no such transaction.
        """
        return TxnState((await self._call("txn/state", {"txnId": txn_id}))["state"])

    async def record(self, txn_id: str) -> dict[str, Any]:
        """Return the transaction's record as logged so far (verify it with ``hatp verify``)."""
        record: dict[str, Any] = (await self._call("txn/record", {"txnId": txn_id}))["record"]
        return record

    async def acquire(self, txn_id: str, owner: str, seconds: float) -> int | None:
        """Take the transaction's lease for ``owner``; return its new fence, or ``None``
        while another holder's lease is live. No coordinator drives it until released.

        Raises:
            TransactionUnknown: no such transaction.
        """
        answer = await self._call(
            "lock/acquire", {"txnId": txn_id, "owner": owner, "seconds": seconds}
        )
        fence = answer["fence"]
        return None if fence is None else int(fence)

    async def renew(self, txn_id: str, owner: str, fence: int, seconds: float) -> None:
        """Extend the lease ``owner`` holds under ``fence``.

        Raises:
            StaleFence: the fence moved, or ``owner`` no longer holds the lease.
        """
        params = {"txnId": txn_id, "owner": owner, "fence": fence, "seconds": seconds}
        await self._call("lock/renew", params)

    async def release(self, txn_id: str, owner: str, fence: int) -> None:
        """Give the lease up (twice is harmless); a coordinator may then resume the transaction.

        Raises:
            StaleFence: the fence moved, or ``owner`` does not hold the lease.
        """
        await self._call("lock/release", {"txnId": txn_id, "owner": owner, "fence": fence})

    async def plan_undo(
        self,
        txn_id: str,
        **ask: Unpack[UndoAsk],
    ) -> dict[str, Any]:
        """Return the plan that would take back the committed transaction's steps (wire
        form); nothing is begun. Its ``undoes.kept`` lists each step it leaves, and why.

        ``steps``: only these (default: every step that can be undone); ``differing``: only
        those that committed other than their approved preview; ``decide_seconds``: how
        long people would have to approve it; ``undo_txn_id``: the undo's own id.

        Raises:
            TransactionUnknown: no such transaction.
            UndoRefused: nothing can be taken back as asked (``data.reason``).
        """
        params = {"txnId": txn_id, **undo_request(ask)}
        answer = await self._call(METHODS["txn/undo"], {**params, "dryRun": True})
        plan: dict[str, Any] = answer["plan"]
        return plan

    async def undo(
        self,
        txn_id: str,
        **ask: Unpack[UndoAsk],
    ) -> dict[str, Any]:
        """Begin taking back the committed transaction's steps (as :meth:`plan_undo`): an
        undo transaction of its own, which people approve before anything is undone.

        Returns:
            ``{"txnId", "state", "plan"}``: the undo transaction once logged, and its plan.

        Raises:
            TransactionUnknown: no such transaction.
            UndoRefused: nothing can be taken back as asked (``data.reason``); nothing begun.
            OutcomeConflict: a transaction with ``undo_txn_id`` is already in the log.
        """
        params = {"txnId": txn_id, **undo_request(ask)}
        return await self._call(METHODS["txn/undo"], params)

    async def wait(self, txn_id: str, *, every: float = 0.2) -> TxnState:
        """Ask every ``every`` seconds until the transaction is committed or aborted."""
        while not (state := await self.state(txn_id)).finished:
            await asyncio.sleep(every)
        return state

    async def _call(self, name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``name`` (a short name of :data:`METHODS`, or a full method name)."""
        return await request(
            self._client,
            METHODS.get(name, name),
            params,
            server=self._id,
            timeout=self._timeout,
            silence=PeerUnavailable,
        )


async def mcp_coordinator(
    coordinator_id: str, client: Client, keyring: Keyring, *, timeout: float | None = None
) -> McpCoordinator:
    """Check that ``client``'s server is the coordinator ``coordinator_id``; return its handle.

    Raises:
        PeerIncompatible: the server does not advertise itself as that
            coordinator, with keys ``keyring`` trusts under its id.
    """
    check_server(client, role="coordinator", server_id=coordinator_id, keyring=keyring)
    return McpCoordinator(coordinator_id, client, timeout)
