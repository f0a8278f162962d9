"""A database that stops answering slows the requests that need it, not ``hatp serve``.

``hatp serve``'s app over the trip world runs in uvicorn, in a thread of its own,
on a loopback port; a client on the test's thread calls it over TCP. PostgreSQL is
frozen by a TCP forwarder in front of the shared server that stops moving bytes
without closing a socket (what a partition or a SIGSTOPped server looks like to
the client); SQLite by another connection holding the write lock. While it is
down, the health endpoints, the index and the OpenAPI document answer, and every
store-backed request is refused typed (503 ``STORE_UNAVAILABLE``) once the store's
``call_seconds`` pass; once it is back, the same requests succeed.
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from sqlalchemy.engine import make_url
from starlette.applications import Starlette

from databases import fresh_schema_url
from hatp.clock import SystemClock
from hatp.store import Store, StoreLimits, open_store
from serve_world import Served, open_served

#: Short bounds, so a request the store cannot serve is refused soon.
LIMITS = StoreLimits(call_seconds=0.5, connect_seconds=2, checkout_seconds=2, busy_seconds=60)
#: How long the client waits for any answer: a bound on a hang, not a timing claim.
WAIT = 30.0


class FreezableProxy:
    """A TCP forwarder on 127.0.0.1 to ``target``; :meth:`freeze` stops moving bytes
    (connections stay open, new ones are accepted and go nowhere), :meth:`thaw`
    moves them again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._sockets: list[socket.socket] = [self._listener]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._flowing.wait()
            upstream = socket.create_connection(self._target)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def running(app: Starlette) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread of its own; yield its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(WAIT)
        listener.close()


def exchange(http: httpx2.Client, served: Served, txn_id: str) -> dict[str, Any]:
    """What each endpoint answers: the status, and the error code of a refusal."""
    answers = {
        "healthz": http.get("/healthz"),
        "index": http.get("/"),
        "openapi": http.get("/openapi.json"),
        "readyz": http.get("/readyz"),
        "ask": http.post("/gateway/asks", json=served.ask_body(txn_id)),
        "state": http.get("/coordinator/txns/trip-none"),
    }
    return {
        name: (r.status_code, r.json().get("code") if r.status_code >= 400 else None)
        for name, r in answers.items()
    }


HEALTHY = {"healthz": (200, None), "index": (200, None), "openapi": (200, None)}
UNAVAILABLE = (503, "STORE_UNAVAILABLE")
SERVED = {"ask": (200, None), "state": (404, "TXN_UNKNOWN")}


def serve_through(store: Store, folder: Path) -> Served:
    return open_served(folder, store, SystemClock())


def test_a_frozen_postgres_slows_store_requests_not_the_server_HTTP_HEALTH(
    pg_database_url: str, tmp_path: Path
) -> None:
    """[HTTP-HEALTH] [STORE-OFF-LOOP] PostgreSQL behind a forwarder that stops moving
    bytes: health, index and OpenAPI answer; /readyz and store-backed requests are 503
    STORE_UNAVAILABLE; after the thaw, all of them succeed on the same server."""
    url = make_url(fresh_schema_url(pg_database_url))
    proxy = FreezableProxy((url.host or "127.0.0.1", url.port or 5432))
    store = open_store(
        url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False),
        limits=LIMITS,
    )
    served = serve_through(store, tmp_path)
    try:
        with running(served.app) as base, httpx2.Client(base_url=base, timeout=WAIT) as http:
            assert http.get("/readyz").json() == {"status": "ready"}
            proxy.freeze()
            frozen = exchange(http, served, "trip-frozen")
            proxy.thaw()
            thawed = exchange(http, served, "trip-thawed")
    finally:
        proxy.thaw()
        served.world.close()
        store.close()
        proxy.close()
    assert frozen == {**HEALTHY, "readyz": UNAVAILABLE, "ask": UNAVAILABLE, "state": UNAVAILABLE}
    assert thawed == {**HEALTHY, "readyz": (200, None), **SERVED}


def test_a_held_sqlite_write_lock_slows_store_requests_not_the_server_HTTP_HEALTH(
    tmp_path: Path,
) -> None:
    """[HTTP-HEALTH] [STORE-OFF-LOOP] another connection holds SQLite's write lock: the
    requests that write wait for it on a store worker and are refused 503
    STORE_UNAVAILABLE at the bound, while health, index, OpenAPI, /readyz and a
    transaction's state ([STORE-ATOMIC]: a read takes no write lock) answer; once the
    lock is gone, all of them succeed."""
    path = tmp_path / "hatp.db"
    store = open_store(path, limits=LIMITS)
    served = serve_through(store, tmp_path / "trip")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        with running(served.app) as base, httpx2.Client(base_url=base, timeout=WAIT) as http:
            holder.execute("BEGIN IMMEDIATE")
            locked = exchange(http, served, "trip-locked")
            holder.execute("ROLLBACK")
            free = exchange(http, served, "trip-free")
    finally:
        holder.close()
        served.world.close()
        store.close()
    assert locked == {
        **HEALTHY,
        "readyz": (200, None),
        "ask": UNAVAILABLE,
        "state": (404, "TXN_UNKNOWN"),  # read, not held up by the writer: there is none
    }
    assert free == {**HEALTHY, "readyz": (200, None), **SERVED}
