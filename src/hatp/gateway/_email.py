"""The e-mail channel: the gateway mails each notice to the person, over SMTP.

:class:`EmailChannel` is a :class:`~hatp.gateway.PushChannel` of type
``email``. :func:`render_email` turns a notice into the mail: a plain-text part
(the notice's text view, with the agent's words already under their label)
and an HTML part built from the structured view ([GW-VIEW]): each step with
its arguments, the amounts the gateway computed, the deadline, and whatever
the agent wrote in a box of its own under :data:`~hatp.gateway.AGENT_TEXT_LABEL`
([GW-VIEW-AGENT-TEXT]). Every value is escaped for HTML as well as for lines
([GW-VIEW-ESCAPE]).

A mail never takes a vote ([EMAIL-NO-VOTE]): it carries a link to the ask on
the approver page (single use, for this person) and says that replies are not
read. Its ``Message-ID`` is made from the notice's ``noticeId``, the same on
every retry, so a mailbox that keeps the first shows a retried notice once.

How the mail server answers decides what the outbox does next
(:data:`~hatp.errors.DELIVERY_REASONS`): no connection, no answer in time, or a
4xx reply (greylisting, a full queue) are tried again; a 5xx reply or a server
that lacks what the settings require (STARTTLS, AUTH) moves on to the
person's next channel.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import format_datetime, formataddr, parseaddr
from typing import Any
from urllib.parse import urlsplit

import aiosmtplib

from hatp.clock import format_time, parse_time
from hatp.errors import DeliveryFailed, TimeInvalid
from hatp.gateway._preview_view import preview_lines
from hatp.gateway._push import OutboxMessage, delivery_failed
from hatp.gateway._shown_json import escape_line, shown_json
from hatp.gateway._view import (
    AGENT_TEXT_LABEL,
    ARGUMENTS_LABEL,
    STEP_ARGUMENTS_LABEL,
    TERMS_LABEL,
    TIER_WORDS,
    TOOL_TEXT_LABEL,
    ApproverView,
    CallView,
    QuestionView,
    terms_lines,
)
from hatp.model import QuestionType

__all__ = ["EMAIL", "NO_VOTE_BY_MAIL", "EmailChannel", "SmtpSettings", "render_email"]

#: The channel type this channel serves (a card's ``channels`` value).
EMAIL = "email"
#: What every mail about an open ask says about answering it.
NO_VOTE_BY_MAIL = (
    "Replies to this e-mail are not read. A vote is only taken on the approver page, "
    "never by e-mail."
)
_KIND_WORDS = {"approval": "Approval", "call": "Tool call approval", "question": "Question"}
_ASKING_EVENTS = ("ask", "reminder", "escalation")
_MAX_SUBJECT = 200
_MAX_REPLY = 200
_MSG_ID_LEFT = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,200}")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}")

_log = logging.getLogger("hatp.gateway.email")


@dataclass(frozen=True, kw_only=True)
class SmtpSettings:
    """How the gateway reaches its mail server.

    ``sender`` is the address mail comes from (the envelope and ``From``).
    ``starttls`` upgrades the connection with STARTTLS and refuses a server
    that does not offer it; ``use_tls`` speaks TLS from the start (port 465,
    usually); with neither, mail goes in clear. ``username`` and ``password``
    log in (only over TLS); ``timeout_seconds`` bounds each exchange with the
    server.
    """

    host: str
    port: int = 587
    sender: str
    starttls: bool = True
    use_tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        """Check the settings.

        Raises:
            ValueError: an empty host, a port outside 1-65535, a sender that is
                not an address, both ``starttls`` and ``use_tls``, a username
                without a password (or the other way round), a password without
                TLS, or a timeout that is not positive.
        """
        if not self.host or not self.host.isprintable() or " " in self.host:
            raise ValueError(f"SMTP host {self.host!r} is not a host name")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ValueError(f"SMTP port must be a number, not {self.port!r}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"SMTP port {self.port} is outside 1-65535")
        if not _is_address(self.sender):
            raise ValueError(f"sender {self.sender!r} is not an e-mail address (name@domain)")
        if self.starttls and self.use_tls:
            raise ValueError(
                "choose one of starttls (upgrade a plain connection, port 587) and "
                "use_tls (TLS from the start, port 465)"
            )
        if (self.username is None) != (self.password is None):
            raise ValueError("give both username and password to log in, or neither")
        if self.password is not None and not (self.starttls or self.use_tls):
            raise ValueError("a password is only sent over TLS: set starttls or use_tls")
        if not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be positive, not {self.timeout_seconds}")


class EmailChannel:
    """The ``email`` channel: mails each notice to the address ``addresses`` holds
    for its person, through the server ``settings`` name. ``gateway_name`` is the
    name mail comes from."""

    def __init__(
        self, settings: SmtpSettings, addresses: Mapping[str, str], *, gateway_name: str = "hatp"
    ) -> None:
        """Make the channel.

        Raises:
            ValueError: an address is not an e-mail address, or ``gateway_name`` is
                not one printable line.
        """
        for human, address in addresses.items():
            if not _is_address(address):
                raise ValueError(f"the e-mail address for {human} is not an address")
        if not gateway_name.isprintable():
            raise ValueError("gateway_name must be one printable line")
        self._settings = settings
        self._addresses = dict(addresses)
        self._from = formataddr((gateway_name, settings.sender))

    @property
    def channel_type(self) -> str:
        return EMAIL

    def reaches(self, human: str) -> bool:
        """Whether this channel holds an e-mail address for ``human``."""
        return human in self._addresses

    async def send(self, message: OutboxMessage) -> None:
        """Mail ``message``'s notice (:func:`render_email`) to its person; return once
        the server accepted it.

        Raises:
            DeliveryFailed: ``NO_ADDRESS`` (no address for the person), ``CONNECT``,
                ``TIMEOUT`` or ``SERVER_ERROR`` (a 4xx reply; all retryable), or
                ``REJECTED`` (a 5xx reply, a refused recipient, a server without
                STARTTLS or AUTH; not retryable). ``data`` holds ``noticeId``,
                ``human``, ``channel``, ``status`` (the SMTP reply code, or
                ``None``) and ``reply`` (the server's words, or ``None``).
        """
        to = self._addresses.get(message.human)
        if to is None:
            raise _failed(
                "NO_ADDRESS", f"no e-mail address is configured for {message.human}", message
            )
        mail = render_email(message, sender=self._from, to=to)
        settings = self._settings
        try:
            await aiosmtplib.send(
                mail,
                sender=settings.sender,
                recipients=[to],
                hostname=settings.host,
                port=settings.port,
                username=settings.username,
                password=settings.password,
                use_tls=settings.use_tls,
                start_tls=settings.starttls,
                timeout=settings.timeout_seconds,
            )
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise _mapped(exc, message, settings) from exc
        _log.info("notice %s mailed to %s", message.notice_id, message.human)


def _mapped(exc: Exception, message: OutboxMessage, settings: SmtpSettings) -> DeliveryFailed:
    """The delivery failure an error of the SMTP exchange means."""
    server = f"the mail server {settings.host}:{settings.port}"
    if isinstance(exc, aiosmtplib.SMTPTimeoutError | TimeoutError):
        return _failed(
            "TIMEOUT",
            f"{server} did not answer within {settings.timeout_seconds} s; the outbox tries again",
            message,
        )
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused) and exc.recipients:
        exc = exc.recipients[0]
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        reply = escape_line(exc.message)[:_MAX_REPLY]
        if 500 <= exc.code < 600:
            return _failed(
                "REJECTED",
                f"{server} refused the message ({exc.code} {reply}); "
                f"fix the address or the server for {message.human}",
                message,
                status=exc.code,
                reply=reply,
            )
        return _failed(
            "SERVER_ERROR",
            f"{server} answered {exc.code} {reply}; the outbox tries again",
            message,
            status=exc.code,
            reply=reply,
        )
    if isinstance(exc, aiosmtplib.SMTPConnectError | aiosmtplib.SMTPServerDisconnected | OSError):
        return _failed(
            "CONNECT",
            f"{server} could not be reached ({type(exc).__name__}); the outbox tries again",
            message,
        )
    # What is left: the server lacks what the settings need (STARTTLS, AUTH, SMTPUTF8).
    return _failed(
        "REJECTED",
        f"{server} cannot take this mail as configured: {escape_line(str(exc))[:_MAX_REPLY]}",
        message,
    )


def _failed(
    reason: str,
    text: str,
    message: OutboxMessage,
    *,
    status: int | None = None,
    reply: str | None = None,
) -> DeliveryFailed:
    return delivery_failed(EMAIL, reason, text, message, _log, status=status, reply=reply)


def _is_address(text: str) -> bool:
    """Whether ``text`` is one bare address, ``local@domain``, with nothing else in it."""
    if not text.isprintable() or " " in text or text.count("@") != 1:
        return False
    local, _, domain = text.partition("@")
    return bool(local) and bool(domain) and parseaddr(text)[1] == text


# --- the mail ---------------------------------------------------------------------------


def render_email(message: OutboxMessage, *, sender: str, to: str) -> EmailMessage:
    """Return the mail for ``message``: ``multipart/alternative`` with a plain-text
    and an HTML part, from ``sender`` to ``to``. [GW-VIEW-ESCAPE] [EMAIL-NO-VOTE]

    The ``Message-ID`` (``<noticeId@gateway host>``) and ``Hatp-Notice-Id`` are the
    same for every attempt at one notice; ``Date`` is the notice's ``createdAt``.

    Raises:
        ValueError: ``sender`` or ``to`` holds a line break.
    """
    doc = message.document
    mail = EmailMessage()
    mail["Subject"] = _subject(message)
    mail["From"] = sender
    mail["To"] = to
    created = _time(doc.get("createdAt"))
    if created is not None:
        mail["Date"] = format_datetime(parse_time(created))
    mail["Message-ID"] = _message_id(message, sender)
    mail["Hatp-Notice-Id"] = escape_line(message.notice_id)
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies to it
    mail.set_content(_plain(message))
    mail.add_alternative(_html(message), subtype="html")
    return mail


def _subject(message: OutboxMessage) -> str:
    doc, event = message.document, message.event
    about = _about(message)
    asked = f"{_KIND_WORDS.get(str(doc.get('askKind')), 'Ask')} asked"
    subject = {
        "ask": f"{asked}: {about}",
        "reminder": f"Reminder: {asked}: {about}",
        "escalation": f"Escalated to you: {asked}: {about}",
        "withdrawal": f"Withdrawn: {about}",
        "deadline": f"Deadline moved: {about}",
        "outcome": f"Decided: {about}: {doc.get('outcome', 'closed')}",
    }.get(event, f"Notice: {about}")
    subject = escape_line(subject)
    return subject if len(subject) <= _MAX_SUBJECT else subject[: _MAX_SUBJECT - 1] + "…"


def _about(message: OutboxMessage) -> str:
    """What the notice is about, from structured members only (never the agent's words)."""
    view = None if message.notice is None else message.notice.view
    doc = message.document
    if isinstance(view, ApproverView):
        return f"{view.action} (txn {view.txn_id})"
    if isinstance(view, CallView):
        return f"{view.action}, tool {view.tool} on {view.server} (request {view.request_id})"
    if isinstance(view, QuestionView):
        return f"question {view.question_id} from {view.asker}"
    kind = str(doc.get("askKind", "ask"))
    return f"{kind} {doc.get('askId')} (txn {doc.get('txnId')})"


def _headline(message: OutboxMessage) -> str:
    doc, kind = message.document, str(message.document.get("askKind", "ask"))
    return {
        "ask": f"This {kind} is asked of you.",
        "reminder": f"Reminder: this {kind} still waits on you.",
        "escalation": f"This {kind} is escalated to you: it was not answered in time.",
        "withdrawal": f"This {kind} was withdrawn: it no longer needs you.",
        "deadline": f"The deadline of this {kind} moved.",
        "outcome": f"This {kind} is decided: {doc.get('outcome', 'closed')}.",
    }.get(message.event, f"A notice about this {kind}.")


def _time(value: Any) -> str | None:
    """A wire time of the notice, or ``None`` when it has none (or not a wire time)."""
    try:
        return format_time(parse_time(value)) if isinstance(value, str) else None
    except TimeInvalid:
        return None


def _link(message: OutboxMessage) -> str | None:
    """Where the person opens the ask: their single-use link, else the ask's page."""
    for candidate in (message.link, message.document.get("approverUrl")):
        if isinstance(candidate, str) and urlsplit(candidate).scheme in ("https", "http"):
            return candidate
    return None


def _closing(message: OutboxMessage) -> list[str]:
    """The lines both parts end with: when the ask closes, the link, the outcome."""
    doc = message.document
    lines = []
    decide_by, respond_by = _time(doc.get("decideBy")), _time(doc.get("respondBy"))
    if message.event == "deadline" and decide_by is not None:
        lines.append(f"This ask now closes at {decide_by} (UTC).")
    elif decide_by is not None and message.event != "outcome":
        lines.append(f"This ask closes at {decide_by} (UTC).")
    if message.event in _ASKING_EVENTS and respond_by is not None:
        lines.append(
            f"Please answer by {respond_by} (UTC); after that the gateway may ask someone else."
        )
    return lines


def _message_id(message: OutboxMessage, sender: str) -> str:
    notice_id = message.notice_id
    left = (
        notice_id
        if _MSG_ID_LEFT.fullmatch(notice_id) and ".." not in notice_id
        else "ntc-" + hashlib.sha256(notice_id.encode("utf-8")).hexdigest()[:32]
    )
    host = urlsplit(str(message.document.get("gateway", ""))).hostname
    if host is None or not _HOST.fullmatch(host):
        host = parseaddr(sender)[1].rpartition("@")[2]
    if not _HOST.fullmatch(host):
        host = "hatp.invalid"
    return f"<{left.strip('.')}@{host}>"


# --- the plain-text part ----------------------------------------------------------------


def _plain(message: OutboxMessage) -> str:
    doc = message.document
    lines = [_headline(message), ""]
    text = doc.get("text")
    if isinstance(text, str) and text:
        lines.extend(escape_line(line) for line in text.rstrip("\n").split("\n"))
        lines.append("")
    lines.extend(_closing(message))
    reason = doc.get("reason")
    if message.event in ("outcome", "withdrawal") and isinstance(reason, str) and reason:
        lines.extend(["", "Reason given (not checked by hatp):"])
        lines.extend("  | " + escape_line(line) for line in reason.split("\n"))
    if message.event in _ASKING_EVENTS:
        link = _link(message)
        lines.append("")
        if link is None:
            lines.append("Open this ask on the approver page of your gateway.")
        else:
            lines.append(f"Open this ask on the approver page: {link}")
            if message.link is not None and link == message.link:
                lines.append("The link is for you alone and works once.")
        lines.append(NO_VOTE_BY_MAIL)
    lines.extend(["", "-- ", _footer(message)])
    return "\n".join(lines) + "\n"


def _footer(message: OutboxMessage) -> str:
    doc = message.document
    return escape_line(
        f"Notice {message.notice_id} from {doc.get('gateway')} about ask {doc.get('askId')}"
    )


# --- the HTML part ----------------------------------------------------------------------

_PRE = 'style="white-space:pre-wrap;font-family:monospace;margin:0"'
_BOXES = {
    "agent-text": "border:2px dashed #b45309;background:#fffbeb;padding:8px 12px;margin:12px 0",
    "tool-text": "border:2px dashed #6b7280;background:#f9fafb;padding:8px 12px;margin:12px 0",
    "arguments": "border:1px solid #d1d5db;background:#f9fafb;padding:6px 10px;margin:6px 0",
    "preview": "border:1px solid #93c5fd;background:#eff6ff;padding:6px 10px;margin:6px 0",
    "terms": "border:1px solid #d1d5db;padding:6px 10px;margin:12px 0",
}


def _e(text: object) -> str:
    """One line of text, escaped for HTML: markup stays text, and control characters
    are written as escapes."""
    return html.escape(escape_line(str(text)), quote=True)


def _lines(text: str) -> str:
    return "\n".join(_e(line) for line in text.split("\n"))


def _box(kind: str, label: str, text: str, note: str | None = None) -> str:
    """``text`` in a box of its own, under ``label`` (whose words they are)."""
    extra = "" if note is None else f'<p style="margin:6px 0 0">{_e(note)}</p>'
    return (
        f'<div class="{kind}" style="{_BOXES[kind]}">'
        f'<p style="margin:0 0 6px"><strong>{_e(label)}</strong></p>'
        f"<pre {_PRE}>{_lines(text)}</pre>{extra}</div>"
    )


def _html(message: OutboxMessage) -> str:
    view = None if message.notice is None else message.notice.view
    doc = message.document
    parts = [f"<p><strong>{_e(_headline(message))}</strong></p>"]
    if isinstance(view, ApproverView):
        parts.append(_approval_html(view))
    elif isinstance(view, CallView):
        parts.append(_call_html(view))
    elif isinstance(view, QuestionView):
        parts.append(_question_html(view))
    elif isinstance(doc.get("text"), str) and doc["text"]:
        parts.append(f"<pre {_PRE}>{_lines(doc['text'].rstrip(chr(10)))}</pre>")
    parts.extend(f"<p>{_e(line)}</p>" for line in _closing(message))
    reason = doc.get("reason")
    if message.event in ("outcome", "withdrawal") and isinstance(reason, str) and reason:
        parts.append(_box("agent-text", "Reason given (not checked by hatp):", reason))
    if message.event in _ASKING_EVENTS:
        link = _link(message)
        if link is None:
            parts.append("<p>Open this ask on the approver page of your gateway.</p>")
        else:
            parts.append(
                f'<p><a href="{html.escape(link, quote=True)}">Open this ask on the approver '
                f"page</a><br><small>{_e(link)}</small></p>"
            )
            if message.link is not None and link == message.link:
                parts.append("<p>The link is for you alone and works once.</p>")
        parts.append(f"<p>{_e(NO_VOTE_BY_MAIL)}</p>")
    parts.append(f'<p style="color:#6b7280"><small>{_e(_footer(message))}</small></p>')
    title = _e(_subject(message))
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{title}</title></head>\n"
        '<body style="font-family:sans-serif;line-height:1.4">\n'
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def _approval_html(view: ApproverView) -> str:
    parts = [
        f"<h2>Approval asked: {_e(view.action)}</h2>",
        f"<p>Group {_e(view.group_id)} ({_e(view.address)})"
        + (", <strong>passkey required</strong>" if view.passkey else "")
        + "</p>",
        f"<p>Transaction {_e(view.txn_id)}, plan {_e(view.plan_digest)}<br>"
        f"Proposed by {_e(view.initiator)}, acting for {_e(view.on_behalf_of)}</p>",
        f"<h3>Steps ({len(view.steps)}, all or nothing)</h3>",
        '<ol class="steps">',
    ]
    for step in view.steps:
        settles = f", settles {', '.join(_e(s) for s in step.settles)}" if step.settles else ""
        parts.append(
            f'<li class="step"><strong>{_e(step.branch_id)}</strong>: {_e(step.operation)} '
            f"on {_e(step.participant)}, {_e(step.tier.value)} ({_e(TIER_WORDS[step.tier])}), "
            f"{_e(step.amount) if step.amount is not None else 'no amount'}{settles}"
        )
        if step.args:
            shown = step.shown_args
            parts.append(_box("arguments", STEP_ARGUMENTS_LABEL, shown.text, shown.note))
        else:
            parts.append("<p>no arguments</p>")
        if step.preview is not None:
            label, *rest = preview_lines(step.preview, "| ")
            parts.append(_box("preview", label, "\n".join(rest)))
        parts.append("</li>")
    parts.append("</ol>")
    if view.amounts:
        parts.append("<h3>You approve spending</h3>")
        parts.append(
            '<ul class="amounts">'
            + "".join(f"<li>{_e(a.text)}</li>" for a in view.amounts)
            + "</ul>"
        )
    else:
        parts.append("<h3>You approve spending: nothing (the plan spends no money)</h3>")
    parts.append(f"<p><strong>Decide by:</strong> {_e(format_time(view.decide_by))} (UTC)</p>")
    if view.terms is not None:
        parts.append(_box("terms", TERMS_LABEL, "\n".join(terms_lines(view.terms)[1:])))
    if view.agent_text is not None:
        parts.append(_box("agent-text", AGENT_TEXT_LABEL, view.agent_text))
    return "\n".join(parts)


def _call_html(view: CallView) -> str:
    shown = shown_json(view.arguments)
    tool_digest = (
        f"tool definition {_e(view.tool_digest)}"
        if view.tool_digest is not None
        else "no tool definition bound"
    )
    parts = [
        f"<h2>Tool call approval asked: {_e(view.action)}</h2>",
        f"<p>By {_e(view.address)}"
        + (", <strong>passkey required</strong>" if view.passkey else "")
        + "</p>",
        f"<p>Request {_e(view.request_id)}, terms {_e(view.terms_digest)}<br>"
        f"Asked by {_e(view.requester)}, acting for {_e(view.on_behalf_of)}</p>",
        f"<p>Call: tool <strong>{_e(view.tool)}</strong> on {_e(view.server)}<br>"
        f"call {_e(view.call_digest)}<br>{tool_digest}</p>",
        _box("arguments", ARGUMENTS_LABEL, shown.text, shown.note),
    ]
    if view.amount is not None:
        parts.append(
            f"<p><strong>You approve spending:</strong> {_e(view.amount)} (read by the gateway "
            f"from the arguments at {_e(repr(view.amount_pointer or ''))})</p>"
        )
    else:
        parts.append(
            "<p><strong>You approve spending:</strong> no amount is named in this call</p>"
        )
    if view.price is not None:
        parts.append(f"<p>Price: at most {_e(view.price)}, paid to {_e(view.pay_to or '')}</p>")
    parts.append(f"<p>Good for one call, within {view.valid_seconds:,} s of the decision</p>")
    parts.append(f"<p><strong>Decide by:</strong> {_e(format_time(view.decide_by))} (UTC)</p>")
    if view.tool_description is not None:
        parts.append(_box("tool-text", TOOL_TEXT_LABEL, view.tool_description))
    if view.agent_text is not None:
        parts.append(_box("agent-text", AGENT_TEXT_LABEL, view.agent_text))
    return "\n".join(parts)


def _question_html(view: QuestionView) -> str:
    kinds = {
        QuestionType.CHOOSE: f"choose one of {len(view.options)} options",
        QuestionType.FORM: "fill a form (a JSON value that fits the schema below)",
        QuestionType.TEXT: f"write a line of text, at most {view.max_length:,} characters",
    }
    parts = [
        f"<h2>Question {_e(view.question_id)} from {_e(view.asker)}, "
        f"acting for {_e(view.on_behalf_of)}</h2>",
        f"<p>Answer: {_e(kinds[view.type])}</p>",
        f"<p><strong>Answer by:</strong> {_e(format_time(view.decide_by))} (UTC)</p>",
        _box("agent-text", AGENT_TEXT_LABEL, view.agent_text),
    ]
    if view.options:
        options = "\n".join(
            f"{n}. {escape_line(option)}" for n, option in enumerate(view.options, 1)
        )
        parts.append(_box("agent-text", "Options (written by the agent):", options))
    if view.form_schema is not None:
        schema = shown_json(view.form_schema)
        parts.append(
            _box("agent-text", "Form schema (written by the agent):", schema.text, schema.note)
        )
    return "\n".join(parts)
