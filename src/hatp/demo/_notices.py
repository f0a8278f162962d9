"""Where the served demos' notices land: a local mail server and a webhook receiver.

``hatp demo --web`` and ``hatp serve --demo`` send the finance approver's notices
over push channels, as a deployment would ([OUTBOX]): first a webhook (his chat
bot, say), then e-mail. :class:`NoticeSinks` plays both ends on this machine. Its
mail server (``aiosmtpd`` on 127.0.0.1) keeps every message it is sent under
``<folder>/mail/`` and says what came (the subject and the approver-page link);
its webhook receiver, served by the demo's own app at :data:`WEBHOOK_PATH`,
checks each request with :func:`~hatp.gateway.verify_webhook` against the
gateway's key and answers as it was scripted to: by default first 503 (tried
again) and then 410 (the bot is gone for good), so the demo shows a retry and the
gateway moving the approver on to e-mail ([GW-CHANNEL-NEXT]). With
:meth:`NoticeSinks.read_by` the mail server also plays the people who read their
mail and answer with a vote signed by their own key, as ``hatp serve --demo``'s
scripted approvers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hatp.clock import Clock
from hatp.errors import HatpError, WebhookInvalid
from hatp.evidence import Keyring, SigningKey
from hatp.gateway import (
    EmailChannel,
    HumanGateway,
    SmtpSettings,
    WebhookChannel,
    sign_vote,
    verify_webhook,
)
from hatp.gateway._notices import notice
from hatp.gateway._outbox import SendPolicy

__all__ = ["DEMO_SEND_POLICY", "WEBHOOK_PATH", "NoticeSinks"]

#: Where the demo's app receives the approver's webhooks.
WEBHOOK_PATH = "/demo/webhook"
#: A demo retries sooner than a deployment would, so a person sees it happen.
DEMO_SEND_POLICY = SendPolicy(attempts=3, first_retry_seconds=2.0, max_retry_seconds=8.0)
#: What the receiver answers the first webhooks, in turn (then 200).
WEBHOOK_ANSWERS = (503, 410)
_LINK = re.compile(r"https?://\S+/link/\S+")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Readers:
    """People who read their mail and vote on what it asks, each with their own key."""

    keys: Mapping[str, SigningKey]
    gateway: HumanGateway
    loop: asyncio.AbstractEventLoop


@dataclass
class NoticeSinks:
    """The demo's mail server and webhook receiver (see the module docstring).

    ``shown`` is told one line per notice that arrives; ``keyring`` holds the
    gateway's key, which every webhook must verify under. The receiver answers the
    statuses in ``answers`` in turn, then ``then`` to every webhook after.
    """

    folder: Path
    keyring: Keyring
    clock: Clock
    shown: Callable[[str], None]
    answers: list[int] = field(default_factory=lambda: list(WEBHOOK_ANSWERS))
    then: int = 200
    mails: list[EmailMessage] = field(default_factory=list)
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _readers: _Readers | None = None

    def read_by(self, keys: Mapping[str, SigningKey], gateway: HumanGateway) -> None:
        """From now on, a person in ``keys`` who is mailed an ask approves it at once with
        a vote signed by their key, handed to ``gateway`` (call on its event loop)."""
        self._readers = _Readers(dict(keys), gateway, asyncio.get_running_loop())

    @contextlib.contextmanager
    def mail_server(self) -> Iterator[int]:
        """Run the mail server on 127.0.0.1 while the block runs; yield its port."""
        (self.folder / "mail").mkdir(parents=True, exist_ok=True)
        port = _free_port()
        controller = Controller(_Keeper(self), hostname="127.0.0.1", port=port)
        controller.start()
        try:
            yield port
        finally:
            controller.stop()

    def channels(
        self, gateway_key: Any, gateway_id: str, people: Sequence[str], origin: str, port: int
    ) -> list[WebhookChannel | EmailChannel]:
        """The gateway's webhook and e-mail channels, reaching ``people`` here."""
        hooks = {human: f"{origin}{WEBHOOK_PATH}" for human in people}
        mail = {human: f"{human.rsplit('/', 1)[-1]}@acme.example" for human in people}
        smtp = SmtpSettings(
            host="127.0.0.1", port=port, sender="approvals@acme.example", starttls=False
        )
        return [
            WebhookChannel(gateway_key, gateway_id, hooks, clock=self.clock),
            EmailChannel(smtp, mail, gateway_name="acme approvals (hatp demo)"),
        ]

    def route(self) -> Route:
        """The webhook receiver's route (``POST`` :data:`WEBHOOK_PATH`)."""

        async def receive(request: Request) -> Response:
            body = await request.body()
            try:
                notice = verify_webhook(body, request.headers, self.keyring, now=self.clock.now())
            except WebhookInvalid as error:
                self.shown(f"webhook refused ({error.reason}): {error.message}")
                return Response(status_code=400)
            with self._lock:
                self.webhooks.append(notice)
                status = self.answers.pop(0) if self.answers else self.then
            said = {200: "taken", 503: "busy, try again", 410: "gone for good"}.get(status, "")
            self.shown(
                f"webhook to {notice['human']}: {notice['event']} of ask {notice['askId']} "
                f"(signed by the gateway, verified; notice {notice['noticeId']}) "
                f"-> {status} {said}"
            )
            return Response(status_code=status)

        return Route(WEBHOOK_PATH, receive, methods=["POST"])

    def _kept(self, raw: bytes) -> None:
        message = message_from_bytes(raw, policy=policy.default)
        if not isinstance(message, EmailMessage):
            return
        with self._lock:
            self.mails.append(message)
            number = next(self._count)
        (self.folder / "mail" / f"{number:03d}.eml").write_bytes(raw)
        plain = message.get_body(("plain",))
        text = plain.get_content() if plain is not None else ""
        link = _LINK.search(text)
        where = f"; open it: {link.group(0)}" if link else ""
        self.shown(f"e-mail to {message['To']}: {message['Subject']}{where}")
        readers = self._readers
        notice_id = message.get("Hatp-Notice-Id")
        if readers is not None and notice_id is not None:
            asyncio.run_coroutine_threadsafe(self._answer(readers, str(notice_id)), readers.loop)

    async def _answer(self, readers: _Readers, notice_id: str) -> None:
        """The mailed person votes on the ask the notice asked them about, if it did."""
        gateway = readers.gateway
        outbox = gateway.outbox.outbox
        try:
            row = await outbox.store.call(outbox.get, notice_id)
            if row is None or row.event not in ("ask", "escalation"):
                return
            key = readers.keys.get(row.human)
            ask = await gateway.asks.store.call(gateway.asks.get, row.ask_id)
            entry = next((p for p in ask.doc["people"] if p["id"] == row.human), None)
            if key is None or entry is None or not ask.is_open:
                return
            told = notice(ask, entry)
            await gateway.submit_vote(
                row.ask_id, sign_vote(key, told.payload, "approve", gateway.clock.now())
            )
        except HatpError as error:
            _log.warning("the demo's mailed approver could not vote: %s", error)
            return
        self.shown(f"{row.human} read the mail and approved, signing the vote with their key")


class _Keeper:
    """The mail server's handler: every message it accepts goes to its sinks."""

    def __init__(self, sinks: NoticeSinks) -> None:
        self._sinks = sinks

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self._sinks._kept(envelope.original_content or b"")
        return "250 Message accepted"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
