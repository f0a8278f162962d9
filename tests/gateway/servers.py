"""Real servers on 127.0.0.1 for the push channels' tests: a webhook receiver (uvicorn)
and a mail server (aiosmtpd), each recording what it got and able to fail on request."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage

import uvicorn
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

#: The longest any one test waits on the network.
BOUND = 10.0


# --- the receiver -----------------------------------------------------------------------


@dataclass
class Got:
    """One request as the receiver got it."""

    body: bytes
    headers: dict[str, str]
    path: str
    query: str


@dataclass
class Receiver:
    """A webhook receiver: records requests, answers ``answers`` in turn (then 200)."""

    got: list[Got] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    hang: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            self.got.append(
                Got(
                    await request.body(),
                    dict(request.headers),
                    request.url.path,
                    request.url.query,
                )
            )
            if self.hang:
                await asyncio.wait_for(self.release.wait(), BOUND)
            status = self.answers.pop(0) if self.answers else 200
            moved = {"Location": f"http://127.0.0.1:{self.port}/elsewhere"}
            return Response(status_code=status, headers=moved if 300 <= status < 400 else None)

        return Starlette(routes=[Route("/{path:path}", hook, methods=["POST"])])

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def bound_socket() -> socket.socket:
    """A socket on 127.0.0.1 at a port the OS chose, bound but not listening: a client
    connecting now is refused; once it listens, the same URL reaches the server."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serving(receiver: Receiver, sock: socket.socket) -> AsyncIterator[None]:
    """Serve ``receiver`` on ``sock`` (made to listen now) until the block ends."""
    sock.listen(16)
    config = uvicorn.Config(receiver.app(), lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield
    finally:
        receiver.release.set()
        server.should_exit = True
        await asyncio.wait_for(task, BOUND)


# --- the mail server --------------------------------------------------------------------


@dataclass
class Keeper:
    """An SMTP handler: keeps what it accepts, or answers ``rcpt`` / ``data`` instead,
    or hangs at DATA until ``release`` is set."""

    got: list[tuple[str, list[str], bytes]] = field(default_factory=list)
    rcpt: str | None = None
    data: str | None = None
    hang: bool = False
    release: threading.Event = field(default_factory=threading.Event)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.rcpt is not None:
            return self.rcpt
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.hang:
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait, BOUND)
        if self.data is not None:
            return self.data
        content = envelope.original_content or b""
        self.got.append((str(envelope.mail_from), list(envelope.rcpt_tos), content))
        return "250 Message accepted"

    def mails(self) -> list[EmailMessage]:
        parsed = [message_from_bytes(raw, policy=policy.default) for _, _, raw in self.got]
        return [m for m in parsed if isinstance(m, EmailMessage)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def mail_server() -> Iterator[tuple[Keeper, int]]:
    """A real SMTP server on 127.0.0.1 and what it keeps, until the block ends."""
    keeper = Keeper()
    port = free_port()
    controller = Controller(keeper, hostname="127.0.0.1", port=port, ready_timeout=BOUND)
    controller.start()
    try:
        yield keeper, port
    finally:
        keeper.release.set()
        controller.stop()
