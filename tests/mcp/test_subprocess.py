"""hatp across real processes: the trip's participants as MCP servers over stdio and HTTP.

Each participant runs in a process of its own (``python -m
hatp.demo._mcp_server``) on the trip world's folder; the coordinator and the
gateway run here and reach them only over MCP. Every process is ended in a
``finally``, and none outlives its test.
"""

from __future__ import annotations

import asyncio
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import pytest
from mcp import Client

from hatp.clock import SystemClock
from hatp.demo import AIRLINE, HOTEL, PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.demo._mcp_process import HttpServer, log_file, server_command, stdio_client_for
from hatp.errors import ParticipantUnavailable, PeerIncompatible
from hatp.mcp import McpLink
from hatp.model import TxnState
from hatp.participant import Participant
from hatp.store import DecisionLog, open_store

#: Each of these starts server processes and commits across them: seconds, not milliseconds.
SLOW = pytest.mark.slow


@pytest.fixture
def world(tmp_path: Path) -> Any:
    with TripWorld.open(tmp_path / "trip", SystemClock()) as opened:
        yield opened


async def _commit_trip(world: TripWorld, links: dict[str, McpLink]) -> Any:
    """Run the trip through ``links`` only; return its outcome."""
    await asyncio.gather(*(link.connect() for link in links.values()))
    log_store = open_store(world.folder / "coordinator.db")
    people = world.scripted_people()
    gateway = world.gateway(people)
    gateway.start()
    try:
        reach: dict[str, Participant] = dict(links)
        coordinator = world.coordinator(DecisionLog(log_store), gateway, links=reach)
        plan = trip_plan("trip-subprocess", decide_by=world.clock.now() + timedelta(minutes=10))
        return await coordinator.run(plan)
    finally:
        await gateway.stop()
        await people.close()
        log_store.close()


def _stdio_link(world: TripWorld, participant_id: str, errlog: TextIO) -> McpLink:
    """A link whose every connection starts the participant's server process over stdio."""
    return McpLink(
        participant_id,
        lambda: stdio_client_for(world.folder, participant_id, errlog),
        world.keyring,
    )


def _assert_committed_whole(world: TripWorld, outcome: Any) -> None:
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert world.effects("trip-subprocess") == dict.fromkeys(PARTICIPANT_IDS, "whole")
    kinds = {
        pid: [x.kind for x in world.ledger(pid) if x.txn_id == "trip-subprocess"]
        for pid in PARTICIPANT_IDS
    }
    assert kinds == {
        "mcp://airline.example": ["held", "ticketed"],
        "mcp://hotel.example": ["held", "booked"],
        "mcp://calendar.example": ["added"],
        "mcp://payments.example": ["authorized", "captured"],
    }


@SLOW
def test_the_trip_commits_across_four_stdio_server_processes(world: TripWorld) -> None:
    """Each participant a process its MCP client started; its ledger tool still answers."""
    logs = [log_file(world.folder, pid) for pid in PARTICIPANT_IDS]

    async def scenario() -> tuple[Any, Any]:
        links = {
            pid: _stdio_link(world, pid, errlog)
            for pid, errlog in zip(PARTICIPANT_IDS, logs, strict=True)
        }
        try:
            outcome = await _commit_trip(world, links)
            async with stdio_client_for(world.folder, AIRLINE, logs[0]) as plain:
                lines = await plain.call_tool("ledger", {"txn_id": "trip-subprocess"})
            return outcome, lines
        finally:
            await asyncio.gather(*(link.aclose() for link in links.values()))

    try:
        outcome, lines = asyncio.run(scenario())
    finally:
        for errlog in logs:
            errlog.close()
    _assert_committed_whole(world, outcome)
    assert [x["kind"] for x in lines.structured_content["result"]] == ["held", "ticketed"]


@SLOW
def test_the_trip_commits_across_four_streamable_http_server_processes(world: TripWorld) -> None:
    """Each participant a process on a port of 127.0.0.1; a plain client reads a ledger."""

    async def scenario() -> tuple[Any, Any]:
        servers = {pid: HttpServer(world.folder, pid) for pid in PARTICIPANT_IDS}
        links: dict[str, McpLink] = {}
        try:
            await asyncio.gather(*(s.start() for s in servers.values()))
            links = {pid: McpLink(pid, s.client, world.keyring) for pid, s in servers.items()}
            outcome = await _commit_trip(world, links)
            async with Client(servers[HOTEL].url) as plain:  # no hatp extension declared
                lines = await plain.call_tool("ledger", {"txn_id": "trip-subprocess"})
            return outcome, lines
        finally:
            await asyncio.gather(*(link.aclose() for link in links.values()))
            for server in servers.values():
                await server.kill()

    outcome, lines = asyncio.run(scenario())
    _assert_committed_whole(world, outcome)
    assert [x["kind"] for x in lines.structured_content["result"]] == ["held", "booked"]


def test_a_server_process_that_is_another_participant_is_refused(world: TripWorld) -> None:
    """The hotel's process, reached as the airline: PEER_INCOMPATIBLE (IDENTITY), nothing sent."""

    async def scenario() -> None:
        with log_file(world.folder, HOTEL) as errlog:
            link = McpLink(
                AIRLINE, lambda: stdio_client_for(world.folder, HOTEL, errlog), world.keyring
            )
            try:
                with pytest.raises(PeerIncompatible) as caught:
                    await link.connect()
            finally:
                await link.aclose()
        assert caught.value.data["reason"] == "IDENTITY"

    asyncio.run(scenario())


@SLOW
def test_a_killed_http_server_is_unavailable_until_it_is_back_on_its_port(
    world: TripWorld,
) -> None:
    """SIGKILL: no answer (ParticipantUnavailable, not a refusal); restarted: answered again."""

    async def scenario() -> None:
        server = HttpServer(world.folder, HOTEL)
        link = McpLink(HOTEL, server.client, world.keyring, timeout=5.0, connect_seconds=5.0)
        try:
            await server.start()
            before = await link.status("trip-none", "room")
            await server.kill()
            with pytest.raises(ParticipantUnavailable):
                await link.status("trip-none", "room")
            await server.start()
            after = await link.status("trip-none", "room")
            assert before == after
            assert server.starts == 2
        finally:
            await link.aclose()
            await server.kill()

    asyncio.run(scenario())


def test_the_server_process_refuses_an_unknown_participant(tmp_path: Path) -> None:
    done = subprocess.run(
        server_command(tmp_path, "mcp://bank.example", "--stdio"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "mcp://bank.example" in done.stderr
