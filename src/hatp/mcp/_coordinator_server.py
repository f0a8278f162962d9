"""A coordinator as an MCP server: an agent hands it a plan and watches the transaction.

``serve_coordinator(server, coordinator, keys=...)`` serves ``txn/begin``
(log the plan's transaction and drive it in the background), ``txn/state``
and ``txn/record`` (the record so far, for ``hatp verify``), and
``lock/acquire``, ``lock/renew`` and ``lock/release``: the decision log's
lease on a transaction, with its fencing token (§12 [STORE-LEASE],
[STORE-FENCE]), so an operator can hold a transaction still (no coordinator
drives it while the lease is held elsewhere) and hand it back. The
coordinator and the log decide everything; this module only carries the
requests. Serve it only behind the server's authentication: whoever reaches
it can begin transactions and take leases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer

from hatp._edge_params import (
    AcquireParams,
    BeginParams,
    ReleaseParams,
    RenewParams,
    TxnParams,
)
from hatp.coordinator import Coordinator, Outcome
from hatp.evidence import PublicKey
from hatp.mcp._advert import HatpAdvert
from hatp.mcp._install import install
from hatp.mcp._rpc import method
from hatp.mcp._wire import EXTENSION_ID, METHODS
from hatp.version import PROTOCOL_VERSION

__all__ = ["CoordinatorExtension", "serve_coordinator"]


class CoordinatorExtension(Extension):
    """The ``dev.hatp/hatp`` extension of a server that coordinates transactions.

    Transactions it begins run in tasks it keeps until they end; one that is
    still running when the server stops is left in the log for
    :meth:`~hatp.coordinator.Coordinator.recover`.
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
        ]

    async def _begin(
        self, params: BeginParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        task = await self._coordinator.begin(params.plan)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        txn_id = str(params.plan["txnId"])
        state = await self._coordinator.log.store.call(self._coordinator.state, txn_id)
        return {"txnId": txn_id, "state": state.value}

    async def _state(
        self, params: TxnParams, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        state = await self._coordinator.log.store.call(self._coordinator.state, params.txn_id)
        return {"txnId": params.txn_id, "state": state.value}

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
