"""Channels that push notices out of the gateway's outbox: what they are handed, and
what they promise.

A :class:`PushChannel` (the webhook and e-mail channels) sends one
:class:`OutboxMessage` per call: a notice the gateway stored in its outbox in
the same transaction as the change that caused it (docs/spec.md [OUTBOX]). The
outbox calls :meth:`PushChannel.send` until it returns, at least once: a
message's ``noticeId`` is the same on every attempt, so a receiver that keeps
the ids it has seen acts on each notice once. A channel that cannot deliver
raises :class:`~hatp.errors.DeliveryFailed`, saying whether to try again; a
channel never carries a vote back (people vote on the approver page, or send a
signed vote).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from hatp.errors import DeliveryFailed
from hatp.gateway._channels import Notice

__all__ = ["NOTICE_EVENTS", "NoticeEvent", "OutboxMessage", "PushChannel", "delivery_failed"]

#: The failures worth trying again (docs/spec.md [OUTBOX-RETRY]).
RETRYABLE = frozenset({"CONNECT", "TIMEOUT", "SERVER_ERROR"})

#: What a notice tells its person (the ``event`` of a notice document).
NoticeEvent = Literal["ask", "reminder", "escalation", "withdrawal", "deadline", "outcome"]
NOTICE_EVENTS: tuple[NoticeEvent, ...] = (
    "ask",
    "reminder",
    "escalation",
    "withdrawal",
    "deadline",
    "outcome",
)


@dataclass(frozen=True)
class OutboxMessage:
    """One notice from the outbox, as a push channel sends it.

    ``document`` is the JSON notice (docs/spec.md [NOTICE-DOC]), what a webhook
    posts: ``noticeId`` (the idempotency key), ``event``, ``askId``, ``human``,
    the plain-text view with the agent's words labelled, and what a vote signs
    over. ``notice`` is the structured view and payload for an ``ask``,
    ``reminder`` or ``escalation`` (an e-mail renders it); ``None`` for the
    other events. ``link`` is a single-use link to this ask on the approver
    page for this person, when the gateway serves the page (an e-mail carries
    it; a webhook does not). ``attempt`` counts from 1.
    """

    document: dict[str, Any]
    notice: Notice | None
    link: str | None
    attempt: int

    @property
    def notice_id(self) -> str:
        """The idempotency key: the same on every attempt to deliver this notice."""
        return str(self.document["noticeId"])

    @property
    def event(self) -> NoticeEvent:
        """What the notice tells its person."""
        event: NoticeEvent = self.document["event"]
        return event

    @property
    def human(self) -> str:
        """The person the notice is for."""
        return str(self.document["human"])

    @property
    def ask_id(self) -> str:
        """The ask the notice is about."""
        return str(self.document["askId"])


@runtime_checkable
class PushChannel(Protocol):
    """A channel that sends notices from the outbox (a card's ``channels`` value)."""

    @property
    def channel_type(self) -> str:
        """The channel type this channel serves, e.g. ``"email"``."""
        ...

    def reaches(self, human: str) -> bool:
        """Whether this channel holds contact details for ``human``."""
        ...

    async def send(self, message: OutboxMessage) -> None:
        """Deliver ``message`` once, or raise :class:`~hatp.errors.DeliveryFailed`."""
        ...


def delivery_failed(
    channel: str,
    reason: str,
    text: str,
    message: OutboxMessage,
    log: logging.Logger,
    **data: Any,
) -> DeliveryFailed:
    """The :class:`~hatp.errors.DeliveryFailed` a push channel raises for ``message``
    (retryable as [OUTBOX-RETRY] says for ``reason``), logged on ``log`` without contact
    details; ``data`` (an HTTP status, an SMTP reply) goes with it."""
    retryable = reason in RETRYABLE
    shown = "".join(f" {value}" for value in data.values() if value is not None)
    log.warning(
        "notice %s to %s not delivered by %s: %s%s (%s)",
        message.notice_id,
        message.human,
        channel,
        reason,
        shown,
        "retryable" if retryable else "not retryable",
    )
    return DeliveryFailed(
        text,
        reason=reason,
        retryable=retryable,
        notice_id=message.notice_id,
        human=message.human,
        channel=channel,
        **data,
    )
