"""The gateway's side of its outbox: what each notice says, and the sender that delivers it.

Notices to people over push channels (:class:`~hatp.gateway.PushChannel`: a
webhook, an e-mail) are rows of the store's :class:`~hatp.store.Outbox`,
written in the transaction of the ask change that causes them
([OUTBOX-ATOMIC]; :func:`notice_rows` builds them from the change's
:class:`~hatp.gateway._ask.Effects`). :class:`OutboxSender` delivers them, at
least once: it claims due rows ([OUTBOX-CLAIM]), reads the ask as it stands,
sends a notice its person still needs (else marks it superseded), and records
what happened. A failure the channel says is worth retrying is tried again
with exponential backoff, up to :attr:`SendPolicy.attempts`; a failure for
good (or the last try) fails the notice, and the gateway asks the person over
their next channel ([GW-CHANNEL-NEXT]). A restart loses nothing: the rows are
in the store, and an unfinished claim lapses and is taken again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hatp._waiting import first_of
from hatp.clock import Clock, format_time
from hatp.errors import AskUnknown, DeliveryFailed, HatpError, StoreUnavailable
from hatp.evidence import SigningKey
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway._ask import Effects
from hatp.gateway._channels import Notice
from hatp.gateway._notices import notice
from hatp.gateway._push import OutboxMessage, PushChannel
from hatp.gateway._view import (
    ApproverView,
    CallView,
    QuestionView,
    render_call_text,
    render_question_text,
    render_text,
)
from hatp.store import AskRow, Outbox, OutboxRow
from hatp.version import PROTOCOL_VERSION

__all__ = ["OutboxSender", "SendPolicy", "link_token", "notice_rows", "read_link_token"]

_log = logging.getLogger(__name__)

#: The events that ask a person to respond: sent only while they are still asked.
_ASKING = frozenset({"ask", "escalation", "reminder"})
#: What a single-use link's token signs over, before the notice id.
_LINK_CONTEXT = b"hatp-approver-link-v1\n"


@dataclass(frozen=True)
class SendPolicy:
    """How the sender retries: ``attempts`` tries in all per notice and channel, waiting
    ``first_retry_seconds`` after the first failure and twice as long after each next
    one, at most ``max_retry_seconds``; a claim lasts ``claim_seconds`` (longer than a
    channel's own timeout); ``batch`` notices are claimed at a time."""

    attempts: int = 5
    first_retry_seconds: float = 2.0
    max_retry_seconds: float = 300.0
    claim_seconds: float = 60.0
    batch: int = 20

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a notice gets at least one attempt")
        if not 0 < self.first_retry_seconds <= self.max_retry_seconds:
            raise ValueError("retry waits are positive, the first no longer than the longest")
        if self.claim_seconds <= 0 or self.batch < 1:
            raise ValueError("a claim lasts a positive time and takes at least one notice")

    def retry_after(self, attempt: int) -> timedelta:
        """How long to wait after failed attempt number ``attempt`` (counted from 1)."""
        seconds = self.first_retry_seconds * 2 ** min(attempt - 1, 30)
        return timedelta(seconds=min(seconds, self.max_retry_seconds))


@dataclass
class SendStats:
    """What this process's sender did, by channel type (``hatp_outbox_*`` metrics)."""

    delivered: Counter[str] = field(default_factory=Counter)
    retried: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    superseded: Counter[str] = field(default_factory=Counter)


def notice_rows(
    row: AskRow,
    effects: Effects,
    push: Mapping[str, PushChannel],
    gateway_id: str,
    now: datetime,
    approver_url: str | None,
) -> list[OutboxRow]:
    """The outbox rows for what the change that left ``row`` says over push channels
    ([OUTBOX-ATOMIC]): one per person and event whose channel is a push channel."""
    if not push:
        return []
    people = {p["id"]: p for p in row.doc["people"]}
    told: list[tuple[str, str, str]] = []  # (person, channel, event)
    for human in effects.deliver:
        entry = people[human]
        told.append((human, entry["channel"], "escalation" if entry.get("delegateOf") else "ask"))
    told.extend((human, channel, "withdrawal") for human, channel in effects.withdraw)
    for human, event in effects.inform:
        channel = people[human].get("channel")
        if channel is not None:
            told.append((human, channel, event))
    return [
        _row(row, people[human], channel, event, gateway_id, now, approver_url)
        for human, channel, event in told
        if channel in push
    ]


def _row(
    row: AskRow,
    entry: Mapping[str, Any],
    channel: str,
    event: str,
    gateway_id: str,
    now: datetime,
    approver_url: str | None,
) -> OutboxRow:
    notice_id = f"ntc_{secrets.token_urlsafe(16)}"
    doc = row.doc
    document: dict[str, Any] = {
        "hatpVersion": PROTOCOL_VERSION,
        "type": "hatp.notice",
        "noticeId": notice_id,
        "event": event,
        "gateway": gateway_id,
        "askId": row.ask_id,
        "txnId": row.txn_id,
        "askKind": row.kind.value,
        "human": entry["id"],
        "createdAt": format_time(now),
        "decideBy": doc["decideBy"],
    }
    if event in _ASKING:
        told = notice(row, entry)
        document.update(respondBy=entry["respondBy"], text=_text(told), payload=told.payload)
    elif event == "withdrawal":
        document.update(reason=entry.get("detail") or "the ask no longer needs you")
    elif event == "deadline":
        document.update(reason=f"the ask now closes at {doc['decideBy']}")
    elif event == "outcome":
        result = doc.get("result") or {}
        document.update(
            outcome=result.get("decision", "answered" if row.kind.value == "question" else None),
            reason=result.get("reason") or doc.get("closedReason"),
        )
    if approver_url is not None:
        document["approverUrl"] = f"{approver_url.rstrip('/')}/asks/{row.ask_id}"
    return OutboxRow(
        notice_id=notice_id,
        ask_id=row.ask_id,
        human=entry["id"],
        channel=channel,
        event=event,
        doc={k: v for k, v in document.items() if v is not None},
    )


def _text(told: Notice) -> str:
    view = told.view
    if isinstance(view, ApproverView):
        return render_text(view)
    if isinstance(view, QuestionView):
        return render_question_text(view)
    assert isinstance(view, CallView)
    return render_call_text(view)


def link_token(key: SigningKey, notice_id: str) -> str:
    """The token of a notice's single-use link to the approver page: the notice id and
    the gateway's Ed25519 signature over it (nothing to store; [OUTBOX-LINK])."""
    signature = key.sign_bytes(_LINK_CONTEXT + notice_id.encode())
    return f"{notice_id}.{b64url_encode(signature)}"


def read_link_token(key: SigningKey, token: str) -> str | None:
    """The notice id a link token names, if the gateway's key signed it; else ``None``."""
    notice_id, _, signature = token.rpartition(".")
    if not notice_id.startswith("ntc_"):
        return None
    try:
        raw = b64url_decode(signature)
        key.public.verify_bytes(raw, _LINK_CONTEXT + notice_id.encode())
    except (ValueError, HatpError):
        return None
    return notice_id


_Fallback = Callable[[str, str, str, str], Awaitable[None]]
_Stored = Callable[..., Awaitable[Any]]


class OutboxSender:
    """Delivers the outbox's notices over the gateway's push channels (see the module
    docstring). The gateway owns one; :meth:`kick` after writing notices, :meth:`run`
    in its background loop."""

    def __init__(
        self,
        outbox: Outbox,
        channels: Mapping[str, PushChannel],
        clock: Clock,
        *,
        stored: _Stored,
        read_ask: Callable[[str], AskRow],
        fallback: _Fallback,
        link: Callable[[str, str], str | None],
        policy: SendPolicy | None = None,
    ) -> None:
        self._outbox = outbox
        self._channels = dict(channels)
        self._clock = clock
        self._stored = stored
        self._read_ask = read_ask
        self._fallback = fallback
        self._link = link
        self.policy = policy or SendPolicy()
        self.stats = SendStats()
        self._wake = asyncio.Event()
        self._draining: asyncio.Task[None] | None = None

    @property
    def outbox(self) -> Outbox:
        """The store's outbox this sender delivers from."""
        return self._outbox

    def kick(self) -> None:
        """Notices were just written: deliver them now (in the background)."""
        self._wake.set()
        if self._draining is None or self._draining.done():
            self._draining = asyncio.create_task(self._drain_logged())

    async def drain(self) -> int:
        """Send every notice due now, batch by batch; return how many were tried.

        Raises:
            StoreUnavailable: the store failed; what was recorded before stays recorded.
        """
        tried = 0
        while True:
            now = self._clock.now()
            until = now + timedelta(seconds=self.policy.claim_seconds)
            claimed: list[OutboxRow] = await self._stored(
                self._outbox.claim, now, until, self.policy.batch
            )
            if not claimed:
                return tried
            for row in claimed:
                await self._send(row)
            tried += len(claimed)

    async def run(self, stop: asyncio.Event, recheck_seconds: float) -> None:
        """Deliver due notices until ``stop``: at once when kicked, else when the next is
        due, and every ``recheck_seconds`` (another process's notices)."""
        while not stop.is_set():
            self._wake.clear()
            wake = self._clock.now() + timedelta(seconds=recheck_seconds)
            try:
                await self.drain()
                due = await self._stored(self._outbox.next_due)
                if due is not None:
                    wake = min(wake, due)
            except StoreUnavailable as error:
                _log.warning("outbox: the store failed: %s", error)
            await first_of(stop.wait(), self._wake.wait(), self._clock.sleep_until(wake))

    async def close(self) -> None:
        """Stop a background drain begun by :meth:`kick`, and wait for it."""
        if self._draining is not None:
            self._draining.cancel()
            await asyncio.gather(self._draining, return_exceptions=True)
            self._draining = None

    async def _drain_logged(self) -> None:
        try:
            await self.drain()
        except StoreUnavailable as error:  # the loop (or the next kick) tries again
            _log.warning("outbox: the store failed while sending: %s", error)

    async def _send(self, row: OutboxRow) -> None:
        channel = self._channels.get(row.channel)
        if channel is None:
            await self._failed(row, "NO_CHANNEL", f"this gateway serves no {row.channel} channel")
            return
        told: Notice | None = None
        if row.event in _ASKING:
            try:
                ask = await self._stored(self._read_ask, row.ask_id)
            except AskUnknown:
                ask = None
            entry = _waiting_entry(ask, row)
            if ask is None or entry is None:
                await self._stored(self._outbox.superseded, row.notice_id, self._clock.now())
                self.stats.superseded[row.channel] += 1
                _log.info(
                    "outbox: notice %s to %s superseded (no longer asked over %s)",
                    row.notice_id, row.human, row.channel,
                    extra={"askId": row.ask_id, "noticeId": row.notice_id},
                )  # fmt: skip
                return
            told = notice(ask, entry)
        link = self._link(row.notice_id, row.ask_id) if row.event in _ASKING else None
        message = OutboxMessage(document=row.doc, notice=told, link=link, attempt=row.attempts)
        try:
            await channel.send(message)
        except DeliveryFailed as error:
            retry = bool(error.data.get("retryable")) and row.attempts < self.policy.attempts
            if retry:
                await self._retry(row, error.reason, error.message)
            else:
                await self._failed(row, error.reason, error.message)
            return
        except Exception as error:  # a channel's bug: tried again, as a failure would be
            _log.exception("outbox: the %s channel raised", row.channel)
            if row.attempts < self.policy.attempts:
                await self._retry(row, "ERROR", f"{type(error).__name__}: {error}")
            else:
                await self._failed(row, "ERROR", f"{type(error).__name__}: {error}")
            return
        await self._stored(self._outbox.delivered, row.notice_id, self._clock.now())
        self.stats.delivered[row.channel] += 1
        _log.info(
            "outbox: notice %s (%s) delivered to %s over %s, attempt %d",
            row.notice_id, row.event, row.human, row.channel, row.attempts,
            extra={"askId": row.ask_id, "noticeId": row.notice_id},
        )  # fmt: skip

    async def _retry(self, row: OutboxRow, reason: str, message: str) -> None:
        now = self._clock.now()
        at = now + self.policy.retry_after(row.attempts)
        await self._stored(self._outbox.retry, row.notice_id, now, at, f"{reason}: {message}")
        self.stats.retried[row.channel] += 1
        _log.warning(
            "outbox: notice %s to %s over %s failed (%s), attempt %d of %d; again at %s",
            row.notice_id, row.human, row.channel, reason, row.attempts,
            self.policy.attempts, format_time(at),
            extra={"askId": row.ask_id, "noticeId": row.notice_id, "reason": reason},
        )  # fmt: skip

    async def _failed(self, row: OutboxRow, reason: str, message: str) -> None:
        await self._stored(
            self._outbox.failed, row.notice_id, self._clock.now(), f"{reason}: {message}"
        )
        self.stats.failed[row.channel] += 1
        _log.warning(
            "outbox: notice %s to %s over %s failed for good (%s) after %d attempts",
            row.notice_id, row.human, row.channel, reason, row.attempts,
            extra={"askId": row.ask_id, "noticeId": row.notice_id, "reason": reason},
        )  # fmt: skip
        if row.event in _ASKING:
            await self._fallback(row.ask_id, row.human, row.channel, reason)


def _waiting_entry(ask: AskRow | None, row: OutboxRow) -> dict[str, Any] | None:
    """The person's entry if they are still asked over the notice's channel."""
    if ask is None or not ask.is_open:
        return None
    for entry in ask.doc["people"]:
        if entry["id"] == row.human:
            asked = entry["status"] == "asked" and entry.get("channel") == row.channel
            return entry if asked else None
    return None
