"""A participant process killed on its own, mid-call, is started again and the
coordinator's retries finish the trip right [COORD-CRASH] [COORD-IN-DOUBT].

Payments runs as an MCP server process of its own (streamable HTTP,
:class:`hatp.demo._mcp_process.HttpServer`) that SIGKILLs itself at one of its
fault points (``participant.<call>.staged``: its work written, not committed;
``participant.<call>.done``: committed, not answered); the coordinator, the
gateway and the other three participants run in the test process. When a call
finds the process dead, it is started again, healthy, on the same store, and the
call fails as the coordinator saw it: no answer. The coordinator sends the same
idempotent call again and the trip ends whole or not at all, the capture or the
void done once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from coordinator.crashkit import ALL_NONE, ALL_WHOLE, check_verifies
from hatp._faults import CRASH_ENV
from hatp.clock import SystemClock
from hatp.coordinator import Outcome
from hatp.demo import PAYMENTS, TripWorld, trip_plan
from hatp.demo._mcp_process import HttpServer
from hatp.mcp import McpLink
from hatp.model import TxnState
from hatp.participant import Relay
from hatp.store import DecisionLog, open_store

T = TypeVar("T")
TXN = "trip-participant-killed"


class Restarting(Relay):
    """The link to a participant process: a call that finds the process dead starts it
    again (without the crash switch) and still fails, as the coordinator saw it."""

    def __init__(self, link: McpLink, server: HttpServer) -> None:
        super().__init__(link)
        self._server = server

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except Exception:
            if not self._server.running:
                await self._server.start()
            raise


@pytest.fixture
def world(tmp_path: Path) -> Iterator[TripWorld]:
    with TripWorld.open(tmp_path / "trip", SystemClock()) as opened:
        yield opened


async def _run_with_payments_killed_at(
    world: TripWorld, log: DecisionLog, point: str, decision: str
) -> tuple[Outcome, int]:
    server = HttpServer(world.folder, PAYMENTS)
    link = McpLink(PAYMENTS, server.client, world.keyring, timeout=10.0, connect_seconds=10.0)
    people = world.scripted_people(decision)
    gateway = world.gateway(people)
    gateway.start()
    try:
        await server.start({CRASH_ENV: point})
        coordinator = world.coordinator(
            log, gateway, links={PAYMENTS: Restarting(link, server)}, retry_delay=0.1
        )
        plan = trip_plan(TXN, decide_by=world.clock.now() + timedelta(minutes=10))
        outcome = await coordinator.run(plan)
        return outcome, server.starts
    finally:
        await link.aclose()
        await server.kill()
        await gateway.stop()
        await people.close()


COMMITTED = [["authorized", "captured"]]
#: The rejection may come before payments voted: then the abort is remembered, nothing done.
ABORTED = [["authorized", "voided"], []]
#: (the point payments dies at, what the people decide, payments' ledger after: one of)
CASES = [
    ("participant.commit.done", "approve", COMMITTED),
    ("participant.commit.staged", "approve", COMMITTED),
    ("participant.abort.done", "reject", ABORTED),
    ("participant.abort.staged", "reject", ABORTED),
]


@pytest.mark.slow  # two server process starts each: seconds
@pytest.mark.parametrize(("point", "decision", "kinds"), CASES, ids=[c[0] for c in CASES])
def test_a_participant_process_killed_in_its_call_is_restarted_and_retried_to_the_right_end(
    world: TripWorld, store_url: str, point: str, decision: str, kinds: list[list[str]]
) -> None:
    log_store = open_store(store_url)
    log = DecisionLog(log_store)
    try:
        outcome, starts = asyncio.run(_run_with_payments_killed_at(world, log, point, decision))
        record: dict[str, Any] = log.record(TXN)
        logged = log.get(TXN).state
    finally:
        log_store.close()
    state = TxnState.COMMITTED if decision == "approve" else TxnState.ABORTED
    assert starts == 2, "the payments process was to die once and be started again"
    assert outcome.state is state, outcome.reason
    assert world.effects(TXN) == (ALL_WHOLE if state is TxnState.COMMITTED else ALL_NONE)
    assert [x.kind for x in world.ledger(PAYMENTS) if x.txn_id == TXN] in kinds
    assert logged is state
    check_verifies(record, world)
