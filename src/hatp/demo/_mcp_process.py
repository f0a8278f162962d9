"""Starting trip participant servers (:mod:`hatp.demo._mcp_server`) as processes of their own.

Over stdio the MCP client starts the process itself (:func:`stdio_client`):
it lives as long as the client's connection. Over streamable HTTP the demo
starts and owns it (:class:`HttpServer`): it can be killed with SIGKILL and
started again on the same port and the same store. Every server's stderr goes
to ``FOLDER/logs/<name>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from mcp import Client, StdioServerParameters
from mcp.client import advertise
from mcp.client.stdio import stdio_client

from hatp.demo._mcp_server import READY
from hatp.errors import ParticipantUnavailable
from hatp.mcp._wire import EXTENSION_ID

__all__ = [
    "START_SECONDS",
    "HttpServer",
    "end_process",
    "log_file",
    "server_command",
    "stdio_client_for",
]

#: How long a server process may take to start (it imports the SDK and opens the world).
START_SECONDS = 30.0


def server_command(
    folder: Path, participant_id: str, *how: str, store: str | None = None
) -> list[str]:
    """The command line of one participant server: ``how`` is ``--stdio`` or ``--http PORT``;
    ``store`` its store's URL, if not the world's default file."""
    where = [] if store is None else ["--store", store]
    return [
        sys.executable,
        "-m",
        "hatp.demo._mcp_server",
        str(folder),
        participant_id,
        *how,
        *where,
    ]


def log_file(folder: Path, participant_id: str) -> TextIO:
    """Open (append) the log file a participant server's stderr goes to."""
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name = participant_id.removeprefix("mcp://").split(".")[0]
    return (logs / f"{name}.log").open("a", encoding="utf-8")


def stdio_client_for(
    folder: Path, participant_id: str, errlog: TextIO, *, store: str | None = None
) -> Client:
    """An MCP client that starts the participant's server process and talks over its stdio.

    The process starts when the client is entered and ends when it exits.
    """
    command = server_command(folder, participant_id, "--stdio", store=store)
    params = StdioServerParameters(command=command[0], args=command[1:])
    return Client(stdio_client(params, errlog=errlog), extensions=[advertise(EXTENSION_ID)])


class HttpServer:
    """One participant server process on streamable HTTP, started and owned by the caller.

    :meth:`start` runs it (on any free port the first time, on the same port
    after that), :meth:`kill` sends it SIGKILL, :meth:`stop` closes its stdin
    (it exits) and waits. It never outlives its parent: it stops when its
    stdin closes.
    """

    def __init__(self, folder: Path, participant_id: str) -> None:
        self.folder = folder
        self.participant_id = participant_id
        self.port = 0
        self.starts = 0
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        """Where its MCP endpoint is (once started)."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def pid(self) -> int | None:
        """The running process's id, or ``None``."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """Whether the process was started and has not ended (a killed one has)."""
        return self._process is not None and self._process.returncode is None

    def client(self) -> Client:
        """A new MCP client for this server, declaring the hatp extension."""
        return Client(self.url, extensions=[advertise(EXTENSION_ID)])

    async def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the process and wait until it accepts connections; ``env`` adds to
        its environment for this start only (a test's ``HATP_CRASH_AT``).

        Raises:
            ParticipantUnavailable: it exited or stayed silent for :data:`START_SECONDS`.
        """
        with log_file(self.folder, self.participant_id) as errlog:
            process = await asyncio.create_subprocess_exec(
                *server_command(self.folder, self.participant_id, "--http", str(self.port)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=errlog,
                env=None if env is None else {**os.environ, **env},
            )
        self._process = process
        line = b""
        if process.stdout is not None:
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(process.stdout.readline(), START_SECONDS)
        words = line.decode().split()
        if len(words) != 2 or words[0] != READY:
            await self.stop()
            raise ParticipantUnavailable(
                f"the {self.participant_id} server did not start (see "
                f"{self.folder / 'logs'}): {line.decode().strip() or 'no ready line'}",
                participant=self.participant_id,
            )
        self.port = int(words[1].rsplit(":", 1)[1].split("/")[0])
        self.starts += 1

    async def kill(self) -> None:
        """Kill the process with SIGKILL, as a power cut would, and reap it."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
        self._close_pipes()

    async def stop(self) -> None:
        """Close its stdin so it exits; kill it if it has not after a few seconds."""
        process = self._process
        if process is None:
            return
        await end_process(process)
        self._close_pipes()
        self._process = None

    def _close_pipes(self) -> None:
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()


async def end_process(process: asyncio.subprocess.Process) -> None:
    """Close a child server's stdin so it exits; kill it if it has not after a few
    seconds, and reap it."""
    if process.returncode is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), 5.0)
    except TimeoutError:
        process.kill()
        await process.wait()
