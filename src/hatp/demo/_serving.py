"""Serving a demo's Starlette app with uvicorn on a socket it bound, for as long as a block runs.

The demos stop their server themselves (Ctrl-C, SIGTERM, or when their walk is
done), so uvicorn's own signal handlers are off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

__all__ = ["serving", "write_json"]


@contextlib.asynccontextmanager
async def serving(
    app: Starlette, sock: socket.socket, *, grace_seconds: int | None = None
) -> AsyncIterator[None]:
    """Serve ``app`` on ``sock`` until the block ends (the app's lifespan runs first);
    requests under way get ``grace_seconds`` to finish when it does.

    Raises:
        RuntimeError: the server stopped before it listened.
        Exception: whatever stopped it (a lifespan that failed).
    """
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_graceful_shutdown=grace_seconds
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the demo's HTTP server stopped before it listened")
        yield
    finally:
        server.should_exit = True
        await task


def write_json(path: Path, document: object) -> None:
    """Write ``document`` to ``path`` as indented JSON, for a person or a program to read."""
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the demo stops it itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
