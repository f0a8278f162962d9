"""One trip participant as an MCP server in a process of its own.

``python -m hatp.demo._mcp_server FOLDER PARTICIPANT_ID --stdio`` serves the
participant over stdin/stdout; ``... --http PORT`` over streamable HTTP at
``http://127.0.0.1:PORT/mcp`` (``PORT`` 0: any free port); ``--store URL``
names the participant's store if it is not ``FOLDER/<name>.db``. It opens the trip
world in FOLDER (the same keys and stores every process opening the folder
uses) and serves that one participant: an ordinary MCP server with one plain
tool, ``ledger``, made a hatp participant by :func:`~hatp.mcp._participant_server.serve_hatp`.

Over HTTP it prints one line on stdout once it accepts connections,
``ready http://127.0.0.1:PORT/mcp``, and stops when its stdin closes (so it
never outlives the process that started it). Logs go to stderr only: over
stdio, stdout is the MCP channel.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from hatp._sockets import listening
from hatp.clock import SystemClock, format_time
from hatp.demo.trip import PARTICIPANT_IDS, TripWorld
from hatp.mcp import serve_hatp
from hatp.participant import ParticipantServer

__all__ = ["READY", "build_server", "main"]

#: The first word of the line an HTTP server prints once it accepts connections.
READY = "ready"


def build_server(world: TripWorld, participant_id: str) -> MCPServer:
    """Return the MCP server of one trip participant: a ``ledger`` tool, and hatp.

    Raises:
        ValueError: not one of the world's participants.
    """
    if participant_id not in PARTICIPANT_IDS:
        raise ValueError(
            f"{participant_id!r} is not a trip participant; one of {', '.join(PARTICIPANT_IDS)}"
        )
    name = participant_id.removeprefix("mcp://")
    server: MCPServer = MCPServer(
        name,
        instructions=f"{name}: a trip participant; read its ledger, or drive it over hatp.",
        log_level="WARNING",
    )

    @server.tool(description="Every change this service made, oldest first (optionally one txn).")
    def ledger(txn_id: str | None = None) -> list[dict[str, Any]]:
        return [
            {
                "txnId": line.txn_id,
                "branchId": line.branch_id,
                "kind": line.kind,
                "detail": line.detail,
                "time": format_time(line.time),
            }
            for line in world.ledger(participant_id)
            if txn_id is None or line.txn_id == txn_id
        ]

    serve_hatp(server, world.participants[participant_id], keys=[world.keys[participant_id].public])
    return server


def listen(port: int) -> socket.socket:
    """Bind a listening socket on 127.0.0.1:``port`` (0: any free port); see
    :func:`hatp._sockets.listening`.

    Raises:
        OSError: the port is taken.
    """
    return listening("127.0.0.1", port)


async def serve_http(server: MCPServer, sock: socket.socket) -> None:
    """Serve ``server`` over streamable HTTP on ``sock`` until stdin closes."""
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        server.streamable_http_app(host="127.0.0.1"), log_level="warning", lifespan="on"
    )
    web = uvicorn.Server(config)
    loop = asyncio.get_running_loop()

    def stop_at_eof() -> None:
        # The parent holds our stdin: when it goes away, so do we.
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(setattr, web, "should_exit", True)

    threading.Thread(target=stop_at_eof, name="stdin-watch", daemon=True).start()
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started and not serving.done():
        await asyncio.sleep(0.01)
    if web.started:
        print(f"{READY} http://127.0.0.1:{port}/mcp", flush=True)
    await serving


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hatp.demo._mcp_server")
    parser.add_argument("folder", type=Path, help="the trip world's folder")
    parser.add_argument("participant", choices=PARTICIPANT_IDS)
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    how.add_argument("--http", type=int, metavar="PORT", help="serve on 127.0.0.1:PORT")
    parser.add_argument("--store", metavar="URL", help="its store (default: FOLDER/<name>.db)")
    args = parser.parse_args(argv)
    urls = {args.participant: args.store} if args.store else None
    with TripWorld.open(args.folder, SystemClock(), store_urls=urls) as world:
        server = build_server(world, args.participant)
        participant = world.participants[args.participant]
        if args.stdio:
            asyncio.run(_sweeping(participant, server.run_stdio_async()))
        else:
            asyncio.run(_sweeping(participant, serve_http(server, listen(args.http))))
    return 0


async def _sweeping(participant: ParticipantServer, serving: Coroutine[Any, Any, None]) -> None:
    """Serve, releasing holds whose lease ended meanwhile [PART-SWEEP]."""
    async with participant.sweeping():
        await serving


if __name__ == "__main__":
    sys.exit(main())
