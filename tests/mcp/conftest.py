"""Participants behind MCP servers: the airline of the participant tests, served in process.

The airline (``participant.ops``: a hold, a compensate and a final
operation, each with its own ledger) runs on the parametrized store, so
every test here runs on SQLite and on PostgreSQL. ``airline_mcp`` is an
ordinary MCP server with a tool of its own, made a participant by
:func:`hatp.mcp.serve_hatp`; ``connect`` opens an in-process MCP client to a
server, declaring the hatp extension unless told not to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
from mcp.client import Client, advertise
from mcp.server.mcpserver import MCPServer

from hatp.clock import ManualClock
from hatp.mcp import EXTENSION_ID, serve_hatp
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import KEY, server, setup_ledgers

Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def ledgers(store: Store) -> Store:
    """The parametrized store with the airline's ledgers stocked."""
    setup_ledgers(store)
    return store


@pytest.fixture
def airline(ledgers: Store, clock: ManualClock) -> ParticipantServer:
    """The airline participant, in process."""
    return server(ledgers, clock)


def seat_map_server() -> MCPServer:
    """An airline's ordinary MCP server, with one tool of its own (``seat_map``)."""
    mcp = MCPServer("airline")

    @mcp.tool()
    def seat_map(row: int) -> str:
        """The seats of one row."""
        return f"row {row}: A B C D E F"

    return mcp


@pytest.fixture
def airline_mcp(airline: ParticipantServer) -> MCPServer:
    """The airline's MCP server, made a hatp participant by ``serve_hatp``."""
    mcp = seat_map_server()
    serve_hatp(mcp, airline, keys=[KEY.public])
    return mcp


@pytest.fixture
def connect() -> Connect:
    """``async with connect(server) as client``: an in-process client declaring the hatp
    extension (``hatp=False``: a plain MCP client declaring nothing)."""

    @asynccontextmanager
    async def opened(server: MCPServer, *, hatp: bool = True) -> AsyncIterator[Client]:
        extensions = [advertise(EXTENSION_ID)] if hatp else None
        async with Client(server, extensions=extensions) as client:
            yield client

    return opened
