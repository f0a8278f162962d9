"""A coordinator as an MCP server: an agent hands it a plan and watches the transaction.

``serve_coordinator(server, coordinator, keys=...)`` serves ``txn/begin``
(log the plan's transaction and drive it in the background), ``txn/state``
and ``txn/record`` (the record so far, for ``hatp verify``), and
``lock/acquire``, ``lock/renew`` and ``lock/release``: the decision log's
lease on a transaction, with its fencing token (§12 [STORE-LEASE],
[STORE-FENCE]), so an operator can hold a transaction still (no coordinator
drives it while the lease is held elsewhere) and hand it back; and
``txn/undo``: the plan that takes a committed
transaction's steps back (docs/spec.md §28 [UNDO-PLAN]), shown (``dryRun``) or
begun as a transaction of its own, which people approve like any other. The
coordinator and the log decide everything; this module only carries the
requests (``txn/undo``'s answer is :func:`hatp._edge_params.undo_answer`, the JSON
API's too). Serve it
only behind the server's authentication: whoever reaches it can begin
transactions, take leases and ask for undos.

A stock MCP host, which sends no hatp method, reads a transaction through two
read-only tools: :data:`TXN_STATUS_TOOL` (``txn/state``'s answer) and
:data:`TXN_RECORD_TOOL` (``txn/record``'s), each as a tool result (a refusal
is an ``isError`` result, :mod:`hatp.mcp._tool_results`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from hatp._edge_params import (
    AcquireParams,
    BeginParams,
    ReleaseParams,
    RenewParams,
    TxnParams,
    UndoParams,
    undo_answer,
)
from hatp.coordinator import Coordinator, Outcome
from hatp.evidence import PublicKey
from hatp.mcp._advert import HatpAdvert
from hatp.mcp._install import install
from hatp.mcp._rpc import method
from hatp.mcp._tool_results import answer_or_refusal, tool_result
from hatp.mcp._wire import EXTENSION_ID, METHODS
from hatp.version import PROTOCOL_VERSION

__all__ = ["TXN_RECORD_TOOL", "TXN_STATUS_TOOL", "CoordinatorExtension", "serve_coordinator"]

#: The read-only tool a stock MCP host calls for ``txn/state``'s answer.
TXN_STATUS_TOOL: Final = "hatp_txn_status"
#: The read-only tool a stock MCP host calls for ``txn/record``'s answer.
TXN_RECORD_TOOL: Final = "hatp_txn_record"

_TxnId = Annotated[str, Field(min_length=1, description="the transaction's id (its plan's txnId)")]
_READ_ONLY = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)


class CoordinatorExtension(Extension):
    """The ``dev.hatp/hatp`` extension of a server that coordinates transactions.

    Transactions it begins run in tasks it keeps until they end; one that is
    still running when the server stops is left in the log for
    :meth:`~hatp.coordinator.Coordinator.recover`. Its tools
    :data:`TXN_STATUS_TOOL` and :data:`TXN_RECORD_TOOL` answer ``txn/state``
    and ``txn/record`` to a host that sends no hatp method.
    """

    identifier = EXTENSION_ID

    def __init__(self, coordinator: Coordinator, *, keys: Sequence[PublicKey]) -> None:
        self._coordinator = coordinator
        self._keys = list(keys)
        self._running: set[asyncio.Task[Outcome]] = set()

    def settings(self) -> dict[str, Any]:
        advert = HatpAdvert(
            hatp_version=PROTOCOL_VERSION,
            id=self._coordinator.coordinator_id,
            roles=["coordinator"],
            keys=[key.to_jwk() for key in self._keys],
        )
        return advert.settings()

    def methods(self) -> Sequence[MethodBinding]:
        return [
            method(METHODS["txn/begin"], BeginParams, self._begin),
            method(METHODS["txn/state"], TxnParams, self._state),
            method(METHODS["txn/record"], TxnParams, self._record),
            method(METHODS["lock/acquire"], AcquireParams, self._acquire),
            method(METHODS["lock/renew"], RenewParams, self._renew),
            method(METHODS["lock/release"], ReleaseParams, self._release),
            method(METHODS["txn/undo"], UndoParams, self._undo),
        ]

    def tools(self) -> Sequence[ToolBinding]:
        """The read-only tools :data:`TXN_STATUS_TOOL` and :data:`TXN_RECORD_TOOL` (``{txnId}``)."""
        where = self._coordinator.coordinator_id
        return [
            ToolBinding(
                self._txn_status,
                kwargs={
                    "name": TXN_STATUS_TOOL,
                    "description": (
                        f"Where a hatp transaction stands in the log of {where}; changes "
                        "nothing. Answers structuredContent {txnId, state}: active, committing, "
                        "in-doubt, unwinding, aborting, committed, aborted, needs-recovery or "
                        "needs-attention."
                    ),
                    "annotations": _READ_ONLY,
                },
            ),
            ToolBinding(
                self._txn_record,
                kwargs={
                    "name": TXN_RECORD_TOOL,
                    "description": (
                        f"The signed record of a hatp transaction as {where} has logged it so "
                        "far; changes nothing. Answers structuredContent {record}: the record "
                        "document (hatpVersion, recordId, events, head), which `hatp verify` "
                        "checks; the text only summarises it."
                    ),
                    "annotations": _READ_ONLY,
                },
            ),
        ]

    # The tools' parameters are named as their arguments are on the wire (camelCase).
    async def _txn_status(self, txnId: _TxnId) -> types.CallToolResult:
        async def read() -> types.CallToolResult:
            status = await self._coordinator.log.store.call(self._coordinator.status, txnId)
            text = f"transaction {txnId}: {status['state']}"
            if status.get("effectDiffers"):
                text += (
                    "; committed other than approved (flagged, for a person to judge): "
                    + ", ".join(status["effectDiffers"])
                )
            return tool_result(text, status)

        return await answer_or_refusal(TXN_STATUS_TOOL, read)

    async def _txn_record(self, txnId: _TxnId) -> types.CallToolResult:
        async def read() -> types.CallToolResult:
            coordinator = self._coordinator
            record = await coordinator.log.store.call(coordinator.record, txnId)
            state = await coordinator.log.store.call(coordinator.state, txnId)
            events = len(record["events"])
            text = (
                f"transaction {txnId}: {state.value}; its record holds {events} signed "
                f"event{'' if events == 1 else 's'} so far (structuredContent.record)"
            )
            return tool_result(text, {"record": record})

        return await answer_or_refusal(TXN_RECORD_TOOL, read)

    async def _begin(
        self, params: BeginParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        task = await self._coordinator.begin(params.plan)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        txn_id = str(params.plan["txnId"])
        state = await self._coordinator.log.store.call(self._coordinator.state, txn_id)
        return {"txnId": txn_id, "state": state.value}

    async def _undo(
        self, params: UndoParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        answer, task = await undo_answer(self._coordinator, params)
        if task is not None:
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        return answer

    async def _state(
        self, params: TxnParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        return await self._coordinator.log.store.call(self._coordinator.status, params.txn_id)

    async def _record(
        self, params: TxnParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        record = await self._coordinator.log.store.call(self._coordinator.record, params.txn_id)
        return {"record": record}

    async def _acquire(
        self, params: AcquireParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        log, now = self._coordinator.log, self._coordinator.clock.now()
        fence = await log.store.call(log.acquire, params.txn_id, params.owner, now, params.seconds)
        return {"txnId": params.txn_id, "fence": fence}

    async def _renew(
        self, params: RenewParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        log, now = self._coordinator.log, self._coordinator.clock.now()
        await log.store.call(
            log.renew, params.txn_id, params.owner, params.fence, now, params.seconds
        )
        return {"txnId": params.txn_id, "fence": params.fence}

    async def _release(
        self, params: ReleaseParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        log = self._coordinator.log
        await log.store.call(log.release, params.txn_id, params.owner, params.fence)
        return {"txnId": params.txn_id, "fence": params.fence}


def serve_coordinator(
    server: MCPServer, coordinator: Coordinator, *, keys: Sequence[PublicKey]
) -> None:
    """Make ``server`` a coordinator agents reach over MCP; its own tools keep working.

    ``keys``: the coordinator's public keys, advertised so a caller can check
    the record's signatures are the server's.

    Raises:
        ValueError: the server already has a ``dev.hatp/hatp`` extension.
    """
    install(server, CoordinatorExtension(coordinator, keys=keys))
