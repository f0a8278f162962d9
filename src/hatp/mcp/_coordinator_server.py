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
from pydantic import Field, StrictInt

from hatp.coordinator import Coordinator, Outcome
from hatp.evidence import PublicKey
from hatp.mcp._advert import HatpAdvert
from hatp.mcp._install import install
from hatp.mcp._rpc import HatpParams, method
from hatp.mcp._wire import EXTENSION_ID, METHODS
from hatp.version import PROTOCOL_VERSION

__all__ = ["CoordinatorExtension", "serve_coordinator"]


class _Begin(HatpParams):
    plan: dict[str, Any]


class _Txn(HatpParams):
    txn_id: str


class _Acquire(HatpParams):
    txn_id: str
    owner: str = Field(min_length=1, max_length=256)
    seconds: float = Field(gt=0, le=86400)


class _Renew(_Acquire):
    fence: StrictInt


class _Release(HatpParams):
    txn_id: str
    owner: str = Field(min_length=1, max_length=256)
    fence: StrictInt


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
            method(METHODS["txn/begin"], _Begin, self._begin),
            method(METHODS["txn/state"], _Txn, self._state),
            method(METHODS["txn/record"], _Txn, self._record),
            method(METHODS["lock/acquire"], _Acquire, self._acquire),
            method(METHODS["lock/renew"], _Renew, self._renew),
            method(METHODS["lock/release"], _Release, self._release),
        ]

    async def _begin(
        self, params: _Begin, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        task = self._coordinator.begin(params.plan)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        txn_id = str(params.plan["txnId"])
        return {"txnId": txn_id, "state": self._coordinator.state(txn_id).value}

    async def _state(self, params: _Txn, ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
        return {"txnId": params.txn_id, "state": self._coordinator.state(params.txn_id).value}

    async def _record(self, params: _Txn, ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
        return {"record": self._coordinator.record(params.txn_id)}

    async def _acquire(
        self, params: _Acquire, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        log, now = self._coordinator.log, self._coordinator.clock.now()
        fence = await asyncio.to_thread(
            log.acquire, params.txn_id, params.owner, now, params.seconds
        )
        return {"txnId": params.txn_id, "fence": fence}

    async def _renew(
        self, params: _Renew, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        log, now = self._coordinator.log, self._coordinator.clock.now()
        await asyncio.to_thread(
            log.renew, params.txn_id, params.owner, params.fence, now, params.seconds
        )
        return {"txnId": params.txn_id, "fence": params.fence}

    async def _release(
        self, params: _Release, ctx: ServerRequestContext[Any, Any]
    ) -> Mapping[str, Any]:
        log = self._coordinator.log
        await asyncio.to_thread(log.release, params.txn_id, params.owner, params.fence)
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
