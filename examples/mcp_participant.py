"""An MCP server made a hatp participant (``hatp.mcp.serve_hatp``), reached by a coordinator.

Shows: an airline's MCP server (the official ``mcp`` SDK) that keeps its own
tool (``seat_map``) and, with one call, serves hatp's participant methods for
the demo airline's operations; a coordinator's side checking what the server
advertises (its id, role, protocol version and keys, against its keyring) with
``mcp_participant`` and asking it for a branch's status, exactly as it would
drive a local participant. In process here; ``Client(StdioServerParameters(...))``
or ``Client("http://…/mcp")`` reach a server process the same way.

Run it: ``python examples/mcp_participant.py`` (it works in a temporary folder).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from mcp.client import Client, advertise
from mcp.server.mcpserver import MCPServer

from hatp.clock import SystemClock
from hatp.demo import AIRLINE, TripWorld
from hatp.mcp import EXTENSION_ID, mcp_participant, serve_hatp


async def main() -> None:
    world = TripWorld.open(Path(tempfile.mkdtemp(prefix="hatp-mcp-")), SystemClock())
    try:
        airline = MCPServer("airline")

        @airline.tool()
        def seat_map(flight: str) -> str:  # the server's own tools keep working
            return f"{flight}: 14C is free"

        serve_hatp(airline, world.participants[AIRLINE], keys=[world.keys[AIRLINE].public])

        async with Client(airline, extensions=[advertise(EXTENSION_ID)]) as client:
            own = await client.call_tool("seat_map", {"flight": "LH400"})
            print("its own tool:", own.content[0].text)  # type: ignore[union-attr]
            remote = await mcp_participant(AIRLINE, client, world.keyring)
            # Coordinator(participants={AIRLINE: remote, ...}) drives it as a local one.
            status = await remote.status("trip-1", "seat")
        print("hatp status of trip-1/seat:", status.state.value)
        if status.state.value == "unknown":
            print("OK: the MCP server is a hatp participant")
    finally:
        world.close()


if __name__ == "__main__":
    asyncio.run(main())
