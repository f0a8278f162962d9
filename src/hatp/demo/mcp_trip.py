"""``hatp demo --mcp``: the business trip with every participant an MCP server process.

The airline and the hotel are served over stdio (the coordinator's MCP
client starts each process), the calendar and payments over streamable HTTP
(the demo starts each process on a port of 127.0.0.1). Each process opens
the trip world's folder and serves one participant with its own key and its
own store (:mod:`hatp.demo._mcp_server`). The coordinator and acme's Human
Gateway run in the demo process and reach the participants only over MCP.

Two transactions run, one after the other, on the same processes:

1. ``mcp-commit``: the trip commits across the four processes.
2. ``mcp-kill``: right after payments votes yes in prepare (its card
   authorization is in its store), its process is killed with SIGKILL, and
   started again on the same store :data:`RESTART_AFTER_SECONDS` later. The
   capture finds nobody, is retried with the same txnId + branchId, and
   commits once the process is back: the whole trip or nothing.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO, TypeVar

from hatp.clock import Clock, SystemClock
from hatp.coordinator import Coordinator
from hatp.demo._mcp_process import HttpServer, log_file, stdio_client_for
from hatp.demo.scenarios import DemoRun, Scenario
from hatp.demo.trip import AIRLINE, CALENDAR, HOTEL, PAYMENTS, TripWorld, trip_plan
from hatp.gateway import Channel, MemoryChannel
from hatp.mcp import McpLink
from hatp.participant import Participant, Relay
from hatp.store import DecisionLog, open_store

__all__ = [
    "KILLED",
    "MCP_SCENARIOS",
    "RESTART_AFTER_SECONDS",
    "TRANSPORTS",
    "McpDemo",
    "McpTrip",
    "run_mcp_demo",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: How each participant is reached: its own process over stdio or streamable HTTP.
TRANSPORTS: dict[str, str] = {
    AIRLINE: "stdio",
    HOTEL: "stdio",
    CALENDAR: "http",
    PAYMENTS: "http",
}
#: The participant whose process the second transaction kills after it voted yes.
KILLED = PAYMENTS
#: How long the killed participant stays dead before it is started again.
RESTART_AFTER_SECONDS = 1.0
#: Seconds the coordinator waits for one answer; the link gives up a little sooner.
CALL_TIMEOUT = 10.0

MCP_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "mcp-commit",
            "four MCP server processes (two stdio, two streamable HTTP) commit the trip",
        ),
        Scenario(
            "mcp-kill",
            f"the {KILLED} process is killed (SIGKILL) right after it votes yes, and started "
            "again on its store: the trip still commits whole",
        ),
    )
}


class McpTrip:
    """The four participant processes and the coordinator's links to them.

    Start it with :meth:`start`; :meth:`close` ends every process (stdio ones
    when their connection closes, HTTP ones when their stdin does).
    """

    def __init__(self, world: TripWorld, *, timeout: float = CALL_TIMEOUT - 1.0) -> None:
        self.world = world
        self.folder = world.folder
        self.http = {
            pid: HttpServer(self.folder, pid) for pid, how in TRANSPORTS.items() if how == "http"
        }
        self._logs: list[TextIO] = []
        self.links: dict[str, McpLink] = {}
        for pid, how in TRANSPORTS.items():
            if how == "stdio":
                errlog = log_file(self.folder, pid)
                self._logs.append(errlog)
                connect = _stdio(self.folder, pid, errlog)
            else:
                connect = self.http[pid].client
            self.links[pid] = McpLink(pid, connect, world.keyring, timeout=timeout)

    async def start(self) -> None:
        """Start every process and connect to each, all at once.

        Raises:
            ParticipantUnavailable: a server did not start or answer.
            PeerIncompatible: a server is not the participant it should be.
        """
        await asyncio.gather(*(server.start() for server in self.http.values()))
        await asyncio.gather(*(link.connect() for link in self.links.values()))

    def layout(self) -> list[str]:
        """One line per participant: how it is reached, and where."""
        lines = []
        for pid, how in TRANSPORTS.items():
            if how == "http":
                server = self.http[pid]
                lines.append(f"{pid}: streamable HTTP at {server.url} (process {server.pid})")
            else:
                lines.append(f"{pid}: stdio (a process the coordinator's MCP client started)")
        return lines

    async def close(self) -> None:
        """Close every link and stop every process."""
        try:
            await asyncio.gather(*(link.aclose() for link in self.links.values()))
            await asyncio.gather(*(server.stop() for server in self.http.values()))
        finally:
            for errlog in self._logs:
                errlog.close()


def _stdio(folder: Path, participant_id: str, errlog: TextIO) -> Callable[[], Any]:
    return lambda: stdio_client_for(folder, participant_id, errlog)


class KillAfterYes(Relay):
    """Forwards to ``inner``; once its participant votes yes in prepare, kills the
    participant's process (SIGKILL) and starts it again ``restart_after`` seconds later."""

    def __init__(
        self, inner: Participant, server: HttpServer, clock: Clock, restart_after: float
    ) -> None:
        super().__init__(inner)
        self._server = server
        self._clock = clock
        self._after = restart_after
        self.killed_pid: int | None = None
        self.restarted: asyncio.Task[None] | None = None

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        answer = await call()
        if (
            method == "prepare"
            and self.killed_pid is None
            and isinstance(answer, dict)
            and answer.get("vote") == "yes"
        ):
            self.killed_pid = self._server.pid
            await self._server.kill()
            self.restarted = asyncio.create_task(self._restart())
        return answer

    async def _restart(self) -> None:
        await self._clock.sleep_until(self._clock.now() + timedelta(seconds=self._after))
        await self._server.start()


@dataclass
class McpDemo:
    """What ``hatp demo --mcp`` did: the world, the process layout, one run per transaction."""

    world: TripWorld
    layout: list[str]
    runs: list[DemoRun] = field(default_factory=list)


async def run_mcp_demo(
    folder: Path,
    *,
    channel: Callable[[TripWorld], Channel] | None = None,
    restart_after: float = RESTART_AFTER_SECONDS,
) -> McpDemo:
    """Run both MCP transactions with the world, the log and the server logs in ``folder``.

    Each run's ``folder`` is ``folder/<scenario name>`` (for its record); the
    world (shared by both runs) is the caller's to close: ``demo.world.close()``.
    The finance ask goes to people on ``channel(world)`` if given, else to
    scripted people who approve.

    Raises:
        ParticipantUnavailable: a server process did not start.
    """
    clock = SystemClock()
    folder.mkdir(parents=True, exist_ok=True)
    world = TripWorld.open(folder, clock)
    try:
        return await _run_both(world, channel, restart_after)
    except BaseException:
        world.close()
        raise


async def _run_both(
    world: TripWorld, channel: Callable[[TripWorld], Channel] | None, restart_after: float
) -> McpDemo:
    folder, clock = world.folder, world.clock
    log_store = open_store(folder / "coordinator.db")
    log = DecisionLog(log_store)
    trip = McpTrip(world)
    people = world.scripted_people() if channel is None else channel(world)
    gateway = world.gateway(people)
    gateway.start()
    try:
        await trip.start()
        demo = McpDemo(world, trip.layout())
        options: dict[str, Any] = {
            "retry_delay": 0.2,
            "poll_seconds": 1.0,
            "call_timeout": CALL_TIMEOUT,
        }
        links: dict[str, Participant] = dict(trip.links)
        coordinator = world.coordinator(log, gateway, links=links, **options)
        first = MCP_SCENARIOS["mcp-commit"]
        outcome = await coordinator.run(_plan(clock, seat="14C"))
        demo.runs.append(DemoRun(first, _made(folder / first.name), world, outcome, []))

        killer = KillAfterYes(trip.links[KILLED], trip.http[KILLED], clock, restart_after)
        coordinator = world.coordinator(log, gateway, links={**links, KILLED: killer}, **options)
        demo.runs.append(await _killed_run(trip, coordinator, killer, restart_after))
        return demo
    finally:
        try:
            await trip.close()
        finally:
            await gateway.stop()
            if isinstance(people, MemoryChannel):
                await people.close()
            log_store.close()


async def _killed_run(
    trip: McpTrip, coordinator: Coordinator, killer: KillAfterYes, restart_after: float
) -> DemoRun:
    """The second transaction: :data:`KILLED`'s process dies right after it votes yes."""
    scenario = MCP_SCENARIOS["mcp-kill"]
    link = trip.links[KILLED]
    before = link.connections
    outcome = await coordinator.run(_plan(trip.world.clock, seat="14D"))
    if killer.restarted is not None:
        try:
            await killer.restarted
        except Exception as exc:  # a failed restart shows in the outcome
            _log.warning("the killed participant did not restart: %s", exc)
    if killer.killed_pid is None:
        notes = [f"{KILLED} never voted yes, so no process was killed"]
    else:
        notes = [
            f"{KILLED} (process {killer.killed_pid}) was killed with SIGKILL right after it "
            f"voted yes, and started again on the same store {restart_after:g} s later "
            f"(process {trip.http[KILLED].pid})",
            f"the coordinator's link reconnected {link.connections - before} time(s); the "
            "capture was retried with the same txnId + branchId",
        ]
    folder = _made(trip.folder / scenario.name)
    return DemoRun(scenario, folder, trip.world, outcome, notes)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _plan(clock: Clock, *, seat: str) -> dict[str, Any]:
    txn_id = f"trip-mcp-{clock.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    return trip_plan(txn_id, decide_by=clock.now() + timedelta(minutes=15), seat=seat)
