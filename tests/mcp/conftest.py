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

from hatp.mcp import EXTENSION_ID, serve_hatp
from hatp.participant import ParticipantServer
from participant.conftest import airline, ledgers  # noqa: F401  (the same airline fixtures)
from participant.ops import KEY

Connect = Callable[..., AbstractAsyncContextManager[Client]]


def seat_map_server() -> MCPServer:
    """An airline's ordinary MCP server, with one tool of its own (``seat_map``)."""
    mcp = MCPServer("airline")

    @mcp.tool()
    def seat_map(row: int) -> str:
        """The seats of one row."""
        return f"row {row}: A B C D E F"

    return mcp


@pytest.fixture
def airline_mcp(airline: ParticipantServer) -> MCPServer:  # noqa: F811 (the fixture)
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
