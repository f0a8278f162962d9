"""An ASGI app on uvicorn in a thread of its own, for tests whose code under test is
synchronous (it blocks the thread that would otherwise run an event loop)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette

#: How long a server may take to stop, at most.
WAIT = 10.0


@contextlib.contextmanager
def serving_in_thread(app: Starlette) -> Iterator[str]:
    """``app`` on a loopback socket already listening (a client may connect before the
    server's loop accepts), until the block ends; yield its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(WAIT)
        listener.close()
