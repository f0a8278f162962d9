"""The coordinator's JSON API: begin a transaction, follow it, read its record, hold it still,
list the newest, take a committed one back.

The MCP binding's coordinator methods as routes (``txn/begin``, ``txn/state``,
``txn/record``, ``lock/acquire``, ``lock/renew``, ``lock/release``,
``txn/undo``). A begun transaction (an undo too) is in the log before the
answer is sent and runs in a task this API keeps; :meth:`CoordinatorApi.aclose`
stops the ones still running when the server stops (the log keeps them for
:meth:`~hatp.coordinator.Coordinator.recover`). Serve it only behind the
server's authentication: whoever reaches it can begin transactions, take
leases and ask for undos (an agent's token: of its own transactions).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hatp import _checks
from hatp._edge_params import (
    AcquireParams,
    BeginParams,
    LockAnswer,
    RecordAnswer,
    ReleaseParams,
    RenewParams,
    TxnListAnswer,
    TxnListParams,
    TxnParams,
    TxnStateAnswer,
    UndoAnswer,
    UndoParams,
    UndoPlanAnswer,
    undo_answer,
)
from hatp.clock import format_time
from hatp.coordinator import Coordinator, Outcome
from hatp.http._api import Operation
from hatp.http._callers import ApiCallers, Owner, member
from hatp.http._signed import SignedCallers

__all__ = ["CoordinatorApi"]

_R = TypeVar("_R")

#: Set by ``txn/undo``'s handler when it only built the plan (a dry run): nothing was begun.
_PLANNED_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hatp_undo_planned_only", default=False
)


@dataclass(frozen=True)
class _UndoOperation(Operation):
    """``txn/undo``'s route: as every operation's, 201 with the undo transaction's
    ``Location`` once begun; but a dry run, which begins (creates) nothing, answers 200
    with no ``Location``. ``other_answers``: that other success, for OpenAPI."""

    other_answers: tuple[tuple[int, type[BaseModel]], ...] = ()

    def route(
        self,
        max_body_bytes: int,
        callers: ApiCallers | None = None,
        signed: SignedCallers | None = None,
    ) -> Route:
        served = super().route(max_body_bytes, callers, signed)
        inner = served.endpoint

        async def endpoint(request: Request) -> Response:
            token = _PLANNED_ONLY.set(False)
            try:
                response: Response = await inner(request)
                if _PLANNED_ONLY.get() and response.status_code == self.status:
                    response.status_code = 200
                    del response.headers["location"]
                return response
            finally:
                _PLANNED_ONLY.reset(token)

        return Route(self.path, endpoint, methods=[self.method], name=served.name)


class CoordinatorApi:
    """The operations of one coordinator, and the transactions they began."""

    def __init__(self, coordinator: Coordinator, prefix: str = "/coordinator") -> None:
        self._coordinator = coordinator
        self._prefix = prefix
        self._running: set[asyncio.Task[Outcome]] = set()
        #: Errors a transaction's task ended with (its state is in the log).
        self.failures: list[BaseException] = []

    def operations(self) -> list[Operation]:
        """The coordinator's operations under the prefix (see docs/spec.md §25)."""
        txns = f"{self._prefix}/txns"
        txn = txns + "/{txnId}"
        return [
            Operation(
                "POST",
                txns,
                "txn/begin",
                "Begin a transaction for a plan; it runs in the background",
                BeginParams,
                self._begin,
                TxnStateAnswer,
                (
                    "PLAN_INVALID",
                    "VERSION_UNSUPPORTED",
                    "OUTCOME_CONFLICT",
                    "UNDO_REFUSED",
                    "STORE_UNAVAILABLE",
                ),
                status=201,
                names_agent=lambda p: member(p, "plan", "initiator"),
                location=lambda answer: f"{txns}/{quote(str(answer['txnId']), safe='')}",
            ),
            Operation(
                "GET",
                txns,
                "txn/list",
                "The newest transactions, in a state if given (an agent's token: its own)",
                TxnListParams,
                self._list,
                TxnListAnswer,
                ("STORE_UNAVAILABLE",),
                query=("state", "limit"),
                mcp=False,
                mcp_note="HTTP only: no MCP method carries it (docs/spec.md §25 [API-OWNER])",
                takes_caller=True,
            ),
            Operation(
                "GET",
                txn,
                "txn/state",
                "Where a transaction stands in the log",
                TxnParams,
                self._state,
                TxnStateAnswer,
                ("TXN_UNKNOWN", "STORE_UNAVAILABLE"),
                owned_by=self._owner,
            ),
            Operation(
                "GET",
                txn + "/record",
                "txn/record",
                "The Transaction Record as logged so far (verify it with hatp verify)",
                TxnParams,
                self._record,
                RecordAnswer,
                ("TXN_UNKNOWN", "STORE_UNAVAILABLE"),
                owned_by=self._owner,
            ),
            Operation(
                "POST",
                txn + "/lock",
                "lock/acquire",
                "Take the log's lease on a transaction (fence null: held elsewhere)",
                AcquireParams,
                self._acquire,
                LockAnswer,
                ("TXN_UNKNOWN", "STORE_UNAVAILABLE"),
                owned_by=self._owner,
            ),
            Operation(
                "POST",
                txn + "/lock/renew",
                "lock/renew",
                "Extend the lease held at a fence",
                RenewParams,
                self._renew,
                LockAnswer,
                ("STALE_FENCE", "TXN_UNKNOWN", "STORE_UNAVAILABLE"),
                owned_by=self._owner,
            ),
            Operation(
                "POST",
                txn + "/lock/release",
                "lock/release",
                "Hand the lease held at a fence back",
                ReleaseParams,
                self._release,
                LockAnswer,
                ("STALE_FENCE", "TXN_UNKNOWN", "STORE_UNAVAILABLE"),
                owned_by=self._owner,
            ),
            _UndoOperation(
                "POST",
                txn + "/undo",
                "txn/undo",
                "Take a committed transaction's steps back: the undo plan (dryRun: only "
                "shown, 200), begun as a transaction people approve (201)",
                UndoParams,
                self._undo,
                UndoAnswer,
                (
                    "TXN_UNKNOWN",
                    "UNDO_REFUSED",
                    "OUTCOME_CONFLICT",
                    "PLAN_INVALID",
                    "STORE_UNAVAILABLE",
                ),
                status=201,
                owned_by=self._owner,
                location=lambda answer: f"{txns}/{quote(str(answer.get('txnId')), safe='')}",
                other_answers=((200, UndoPlanAnswer),),
            ),
        ]

    def running(self) -> list[asyncio.Task[Outcome]]:
        """The tasks of the transactions begun here that are still running."""
        return list(self._running)

    async def aclose(self) -> None:
        """Stop every transaction still running here and wait for it; the log keeps it."""
        for task in list(self._running):
            task.cancel()
        for task in list(self._running):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _settled(self, task: asyncio.Task[Outcome]) -> None:
        self._running.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self.failures.append(error)

    async def _begin(self, params: BeginParams) -> Mapping[str, Any]:
        task = await self._coordinator.begin(params.plan)
        self._running.add(task)
        task.add_done_callback(self._settled)
        txn_id = str(params.plan["txnId"])
        return {"txnId": txn_id, "state": (await self._log(self._coordinator.state, txn_id)).value}

    async def _undo(self, params: UndoParams) -> Mapping[str, Any]:
        """Build the undo plan; unless a dry run, begin it in a task kept here."""
        answer, task = await undo_answer(self._coordinator, params)
        if task is None:
            _PLANNED_ONLY.set(True)
            return answer
        self._running.add(task)
        task.add_done_callback(self._settled)
        return answer

    async def _owner(self, params: TxnParams | AcquireParams | ReleaseParams | UndoParams) -> Owner:
        """The agent whose plan the transaction runs (its ``initiator``). [API-OWNER]"""
        plan = (await self._log(self._coordinator.log.get, params.txn_id)).plan
        agent = plan.get("initiator")
        return Owner(agent if isinstance(agent, str) else None, f"transaction {params.txn_id}")

    async def _log(self, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)``, which reads or writes the coordinator's log, run off the event
        loop within the store's bound ([STORE-OFF-LOOP])."""
        return await self._coordinator.log.store.call(fn, *args)

    async def _list(self, params: TxnListParams, *, by: str | None) -> Mapping[str, Any]:
        """The newest transactions; an agent's token sees only those whose plan names it
        as the initiator. [API-OWNER]"""
        own = by if by is not None and by.startswith("agent://") else None
        if own is not None and not _checks.is_on("API-OWNER"):
            own = None
        log = self._coordinator.log
        rows = await self._log(
            functools.partial(log.list, limit=params.limit, state=params.state, initiator=own)
        )
        return {
            "transactions": [
                {
                    "txnId": row.txn_id,
                    "state": row.state.value,
                    "initiator": _initiator(row.plan),
                    "createdAt": format_time(row.created_at),
                    "updatedAt": format_time(row.updated_at),
                }
                for row in rows
            ]
        }

    async def _state(self, params: TxnParams) -> Mapping[str, Any]:
        return await self._log(self._coordinator.status, params.txn_id)

    async def _record(self, params: TxnParams) -> Mapping[str, Any]:
        return {"record": await self._log(self._coordinator.record, params.txn_id)}

    async def _acquire(self, params: AcquireParams) -> Mapping[str, Any]:
        log, now = self._coordinator.log, self._coordinator.clock.now()
        fence = await self._log(log.acquire, params.txn_id, params.owner, now, params.seconds)
        return {"txnId": params.txn_id, "fence": fence}

    async def _renew(self, params: RenewParams) -> Mapping[str, Any]:
        log, now = self._coordinator.log, self._coordinator.clock.now()
        await self._log(log.renew, params.txn_id, params.owner, params.fence, now, params.seconds)
        return {"txnId": params.txn_id, "fence": params.fence}

    async def _release(self, params: ReleaseParams) -> Mapping[str, Any]:
        log = self._coordinator.log
        await self._log(log.release, params.txn_id, params.owner, params.fence)
        return {"txnId": params.txn_id, "fence": params.fence}


def _initiator(plan: Mapping[str, Any]) -> str | None:
    agent = plan.get("initiator")
    return agent if isinstance(agent, str) else None
