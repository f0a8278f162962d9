"""The gated-call benchmark's payments server, in a process of its own over streamable HTTP.

``python benchmarks/_gated_rig.py FOLDER`` opens the trip world in FOLDER
(the keys, acme's directory and the payments store the benchmark's process
uses too) and serves, on ``127.0.0.1`` (any free port), an MCP server with
two tools of one body and one signature, ``charge_card(card, amount, payee)``,
which charges the card now in the payments store:

- :data:`GATED` runs only with acme's finance approval of exactly the call
  (:func:`hatp.demo.gated.payments_gate`: ``approve.spend``, amount at
  ``/amount``), through :func:`hatp.mcp.gate_tools`;
- :data:`UNGATED` is not gated.

For a stock client (one that declares no hatp extension) the gate asks a
Human Gateway of this process itself, whose scripted people approve at once;
its asks are kept in ``FOLDER/``:data:`STOCK_ASKS`, apart from the gateway of
the benchmark's process. Every caller is taken to be the travel bot working
for alice (nobody is authenticated here).

It prints ``ready http://127.0.0.1:PORT/mcp`` once it accepts connections and
stops when its stdin closes. :class:`GatedRig` starts it and owns it; its
stderr goes to ``FOLDER/logs/gated-rig.log``.
"""

# ruff: noqa: E402
from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/ holds mcp.py: run as a script, this folder comes first on sys.path and
# would hide the mcp SDK. Look here last (as benchmarks/mcp.py does).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse
import asyncio
import contextlib
from collections.abc import Sequence

from mcp.server.mcpserver import MCPServer

from hatp._sockets import listening
from hatp.clock import SystemClock
from hatp.demo._mcp_process import end_process
from hatp.demo._mcp_server import READY, serve_http
from hatp.demo.gated import AGENT, payments_gate
from hatp.demo.gated_serve import charger
from hatp.demo.trip import GATEWAY, PAYMENTS, TRAVELLER, TripWorld
from hatp.gate import Requester
from hatp.gateway import HumanGateway
from hatp.mcp import gate_tools
from hatp.store import AskStore, GateAsks, open_store

#: The two tools: one body, one signature; only the first is gated.
GATED = "charge_card"
UNGATED = "charge_card_ungated"
#: Where this process's gateway keeps the asks it made for stock clients (under FOLDER).
STOCK_ASKS = "stock-gateway.db"
#: Who every caller is taken to be.
REQUESTER = Requester(AGENT, TRAVELLER)
#: How long the process may take to start (it imports the SDK and opens the world).
START_SECONDS = 30.0
_DESCRIPTION = "Charge a company card now. Irreversible."


def payments_server(world: TripWorld, gateway: HumanGateway) -> MCPServer:
    """The benchmark's payments server: :data:`GATED` and :data:`UNGATED`, one body."""
    server: MCPServer = MCPServer("payments", log_level="WARNING")
    store = world.stores[PAYMENTS]

    charge = charger(world)

    server.add_tool(charge, name=GATED, description=_DESCRIPTION)
    server.add_tool(charge, name=UNGATED, description=_DESCRIPTION)
    gate_tools(
        server,
        payments_gate(world),
        requester=lambda _ctx: REQUESTER,
        gateway=gateway,
        asks=GateAsks(store),
    )
    return server


async def serve(folder: Path) -> None:
    """Serve the payments server of ``folder``'s trip world until stdin closes."""
    clock = SystemClock()
    with TripWorld.open(folder, clock) as world:
        asks_store = open_store(folder / STOCK_ASKS)
        people = world.scripted_people("approve")
        gateway = HumanGateway(
            GATEWAY, world.keys["gateway"], world.directory, AskStore(asks_store), [people], clock
        )
        gateway.start()
        try:
            await serve_http(payments_server(world, gateway), listening("127.0.0.1", 0))
        finally:
            await gateway.stop()
            await people.close()
            asks_store.close()


class GatedRig:
    """The server process, started on ``folder``'s world and owned by the caller."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.url = ""
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Start the process and wait until it accepts connections.

        Raises:
            RuntimeError: it exited, or printed no ready line within :data:`START_SECONDS`.
        """
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "gated-rig.log").open("a", encoding="utf-8") as errlog:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(Path(__file__).resolve()),
                str(self.folder),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=errlog,
            )
        line = b""
        if self._process.stdout is not None:
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(self._process.stdout.readline(), START_SECONDS)
        words = line.decode().split()
        if len(words) != 2 or words[0] != READY:
            await self.stop()
            raise RuntimeError(f"the gated rig did not start (see {logs / 'gated-rig.log'})")
        self.url = words[1]

    async def stop(self) -> None:
        """Close its stdin so it exits; kill it if it has not after a few seconds."""
        process, self._process = self._process, None
        if process is not None:
            await end_process(process)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/_gated_rig.py")
    parser.add_argument("folder", type=Path, help="the trip world's folder")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
