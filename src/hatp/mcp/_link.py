"""A participant over MCP that reconnects: a link to a server process that may die.

:class:`McpLink` is a :class:`~hatp.participant.Participant`. It opens an MCP
client on first use and checks the server with
:func:`~hatp.mcp._participant_client.mcp_participant`; a call that gets no
answer (:class:`~hatp.errors.ParticipantUnavailable`) drops that connection,
and the next call opens a new one. Over stdio a new connection starts a new
server process on the same store; over HTTP it reaches whatever now listens
on the port. So a participant killed after it voted is reached again when it
is back, and the coordinator's retries (same txnId + branchId) find its
durable state there.

Each connection lives in a task of its own, which enters and leaves the
client (the SDK's task groups must be left by the task that entered them);
calls from any task use its session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp import Client

from hatp.errors import HatpError, ParticipantUnavailable
from hatp.evidence import Keyring
from hatp.mcp._participant_client import McpParticipant, mcp_participant
from hatp.model import BranchStatus, Plan, Preconditions

__all__ = ["McpLink"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


def _refusal(exc: BaseException) -> HatpError | None:
    """The hatp refusal in ``exc``, which the client's task group may have wrapped."""
    if isinstance(exc, HatpError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _refusal(inner)) is not None:
                return found
    return None


class _Connection:
    """One entered MCP client, held open by its own task until :meth:`close`."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[McpParticipant] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    async def open(
        self,
        client: Client,
        participant_id: str,
        keyring: Keyring,
        timeout: float | None,
        connect_seconds: float,
    ) -> McpParticipant:
        self.task = asyncio.create_task(self._hold(client, participant_id, keyring, timeout))
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), connect_seconds)
        except TimeoutError:
            self._ready.cancel()
            self.task.cancel()
            raise ParticipantUnavailable(
                f"{participant_id} did not answer within {connect_seconds:g} s of connecting",
                participant=participant_id,
            ) from None

    async def _hold(
        self, client: Client, participant_id: str, keyring: Keyring, timeout: float | None
    ) -> None:
        try:
            async with client:
                found = await mcp_participant(participant_id, client, keyring, timeout=timeout)
                if self._ready.done():  # the opener gave up waiting
                    return
                self._ready.set_result(found)
                await self._stop.wait()
        except Exception as exc:  # the server died, or never answered: no connection
            _log.info("connection to %s ended: %s", participant_id, exc)
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            if not self._ready.done():
                self._ready.cancel()

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self._stop.is_set()

    def close(self) -> None:
        """Let the holding task leave the client (in the background)."""
        self._stop.set()


class McpLink:
    """A participant reached through MCP clients made by ``connect``, reconnecting after silence.

    Args:
        participant_id: the participant's id; the server must advertise it.
        connect: makes a new, not yet entered client (declaring the hatp extension).
        keyring: trusts the participant's keys.
        timeout: seconds to wait for each answer.
        connect_seconds: seconds to wait for a new connection (a stdio server
            process starts within it).

    Every call raises what :class:`~hatp.mcp._participant_client.McpParticipant`
    raises; failing to connect is :class:`~hatp.errors.ParticipantUnavailable`
    (a server that answers but is not this participant: ``PeerIncompatible``).
    """

    def __init__(
        self,
        participant_id: str,
        connect: Callable[[], Client],
        keyring: Keyring,
        *,
        timeout: float | None = None,
        connect_seconds: float = 30.0,
    ) -> None:
        self._id = participant_id
        self._connect = connect
        self._keyring = keyring
        self._timeout = timeout
        self._connect_seconds = connect_seconds
        self._lock = asyncio.Lock()
        self._current: tuple[_Connection, McpParticipant] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        #: How many connections were opened (1 + reconnects).
        self.connections = 0

    @property
    def participant_id(self) -> str:
        return self._id

    async def connect(self) -> None:
        """Connect now rather than on the first call.

        Raises:
            ParticipantUnavailable: the server cannot be reached.
            PeerIncompatible: it is not this participant.
        """
        await self._live()

    async def _live(self) -> tuple[_Connection, McpParticipant]:
        async with self._lock:
            if self._current is not None and self._current[0].alive:
                return self._current
            self._drop()
            connection = _Connection()
            try:
                found = await connection.open(
                    self._connect(), self._id, self._keyring, self._timeout, self._connect_seconds
                )
            except Exception as exc:
                self._retire(connection)
                if (refusal := _refusal(exc)) is not None:
                    raise refusal from None
                raise ParticipantUnavailable(
                    f"cannot reach {self._id}: {type(exc).__name__}: {exc}", participant=self._id
                ) from None
            self.connections += 1
            self._current = (connection, found)
            return self._current

    def _drop(self) -> None:
        if self._current is not None:
            self._retire(self._current[0])
            self._current = None

    def _retire(self, connection: _Connection) -> None:
        connection.close()
        if connection.task is not None and not connection.task.done():
            self._closing.add(connection.task)
            connection.task.add_done_callback(self._closing.discard)

    async def _call(self, call: Callable[[McpParticipant], Awaitable[T]]) -> T:
        connection, participant = await self._live()
        try:
            return await call(participant)
        except ParticipantUnavailable:
            if self._current is not None and self._current[0] is connection:
                self._drop()
            raise

    async def aclose(self) -> None:
        """Close the connection (a stdio server process exits) and wait for it."""
        self._drop()
        if self._closing:
            try:
                await asyncio.wait_for(asyncio.gather(*self._closing), 10.0)
            except Exception as exc:  # closing anyway: what was left open dies with us
                _log.info("links to %s did not close cleanly: %s", self._id, exc)

    async def prepare(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        return await self._call(lambda p: p.prepare(plan, branch_id, fence))

    async def quote(self, plan: Plan, branch_id: str, fence: int) -> dict[str, Any]:
        return await self._call(lambda p: p.quote(plan, branch_id, fence))

    async def replace(self, plan: Plan, branch_id: str, fence: int, attempt: int) -> dict[str, Any]:
        return await self._call(lambda p: p.replace(plan, branch_id, fence, attempt))

    async def commit(
        self,
        txn_id: str,
        branch_id: str,
        fence: int,
        plan_digest: str,
        preconditions: Preconditions | None,
    ) -> dict[str, Any]:
        return await self._call(
            lambda p: p.commit(txn_id, branch_id, fence, plan_digest, preconditions)
        )

    async def abort(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        return await self._call(lambda p: p.abort(txn_id, branch_id, fence))

    async def compensate(
        self, txn_id: str, branch_id: str, fence: int, undo_token: str
    ) -> dict[str, Any]:
        return await self._call(lambda p: p.compensate(txn_id, branch_id, fence, undo_token))

    async def renew(self, txn_id: str, branch_id: str, fence: int) -> dict[str, Any]:
        return await self._call(lambda p: p.renew(txn_id, branch_id, fence))

    async def status(self, txn_id: str, branch_id: str) -> BranchStatus:
        return await self._call(lambda p: p.status(txn_id, branch_id))
