"""The e-mail channel over real SMTP: an aiosmtpd server on 127.0.0.1 in process.

The server keeps every envelope it accepts, or answers what it is told to
(451, 550, nothing at all); a port nobody listens on stands for a server that
is down. What the server got is read back with the ``email`` package.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from email.message import EmailMessage
from html import escape
from typing import Any

import aiosmtplib
import pytest

from gateway.people import DECIDE_BY, question_doc
from gateway.routes import GATEWAY_ID, branch, plan_doc
from gateway.servers import BOUND, Keeper, free_port
from hatp.clock import format_time
from hatp.errors import DELIVERY_REASONS, DeliveryFailed
from hatp.evidence import digest
from hatp.gateway import (
    AGENT_TEXT_LABEL,
    ARGUMENTS_LABEL,
    STEP_ARGUMENTS_LABEL,
    STEP_PREVIEW_LABEL,
    TERMS_LABEL,
    TOOL_TEXT_LABEL,
    EmailChannel,
    Notice,
    OutboxMessage,
    PushChannel,
    SmtpSettings,
    approver_view,
    call_view,
    question_view,
    render_call_text,
    render_email,
    render_question_text,
    render_text,
)
from hatp.gateway._email import _mapped
from hatp.model import parse_plan

ALICE = "human://acme.com/alice"
BOB = "human://acme.com/bob"
ALICE_MAIL = "alice@acme.example"
SENDER = "gateway@acme.example"
LINK = "https://gateway.acme.com/approve/ask_0001?t=single-use-0001"
HOSTILE = '<script>alert("owned")</script>\nReply YES to approve. <b>CFO approved</b>'
#: Anything that would invite a person to vote by answering the mail.
REPLY_TO_VOTE = re.compile(
    r"reply\W+(with\W+)?\W*(yes|no|approve|reject|y\b|n\b)|reply to (approve|reject|vote)",
    re.IGNORECASE,
)


# --- notices ----------------------------------------------------------------------------


def plan() -> dict[str, Any]:
    seat = {**branch("seat", "420.00"), "args": {"flight": "LH400", "seat": "14C"}}
    room = {**branch("room", "580.00"), "operation": "book"}
    return {
        **plan_doc(seat, room, tolerance="0.02"),
        "agentText": {"summary": "Book the Berlin trip.\nSeat 14C, aisle."},
    }


def notice_doc(event: str = "ask", notice_id: str = "ntc_0001", **members: Any) -> dict[str, Any]:
    return {
        "hatpVersion": "0.1",
        "type": "hatp.notice",
        "noticeId": notice_id,
        "event": event,
        "gateway": GATEWAY_ID,
        "askId": "ask_0001",
        "txnId": "txn-gw-0001",
        "askKind": "approval",
        "human": ALICE,
        "createdAt": "2026-12-02T09:00:00.000Z",
        "decideBy": "2026-12-02T10:15:00.000Z",
        "respondBy": "2026-12-02T09:30:00.000Z",
        "approverUrl": "https://gateway.acme.com/approve/ask_0001",
        **members,
    }


def approval(
    plan_doc: dict[str, Any] | None = None, *, event: str = "ask", attempt: int = 1
) -> OutboxMessage:
    """An approval notice for alice, with the structured view and its text."""
    view = approver_view(plan_doc or plan(), "finance")
    notice = Notice(
        ask_id="ask_0001",
        human=ALICE,
        kind="approval",
        view=view,
        payload={"askId": "ask_0001", "txnId": view.txn_id},
        decide_by=view.decide_by,
        respond_by=view.decide_by - timedelta(minutes=45),
    )
    return OutboxMessage(notice_doc(event, text=render_text(view)), notice, LINK, attempt)


def settings(port: int, **changes: Any) -> SmtpSettings:
    members: dict[str, Any] = {"starttls": False, "timeout_seconds": 5.0, **changes}
    return SmtpSettings(host="127.0.0.1", port=port, sender=SENDER, **members)


def mailer(port: int, **changes: Any) -> EmailChannel:
    return EmailChannel(settings(port, **changes), {ALICE: ALICE_MAIL}, gateway_name="Acme hatp")


def send(channel: EmailChannel, message: OutboxMessage) -> None:
    asyncio.run(asyncio.wait_for(channel.send(message), BOUND))


def failure(channel: EmailChannel, message: OutboxMessage) -> DeliveryFailed:
    with pytest.raises(DeliveryFailed) as failed:
        send(channel, message)
    return failed.value


def parts(mail: EmailMessage) -> tuple[str, str]:
    """The plain-text and HTML parts of ``mail``."""
    assert mail.get_content_type() == "multipart/alternative"
    plain, html = mail.get_body(("plain",)), mail.get_body(("html",))
    assert plain is not None and html is not None
    return unix(plain.get_content()), unix(html.get_content())


def unix(text: str) -> str:
    return text.replace("\r\n", "\n")


def agent_box(html: str) -> str:
    """The content of the HTML box the agent's words stand in."""
    found = re.search(r'<div class="agent-text"[^>]*>(.*?)</div>', html, re.DOTALL)
    assert found is not None, "no box for the agent's words"
    return found.group(1)


# --- delivery ---------------------------------------------------------------------------


def test_an_approval_is_mailed_with_steps_amounts_link_and_the_agents_words_apart(
    smtp: tuple[Keeper, int],
) -> None:
    """[GW-VIEW] [GW-VIEW-AGENT-TEXT] [EMAIL-NO-VOTE]"""
    keeper, port = smtp
    send(mailer(port), approval())
    [(mail_from, rcpt_tos, _)] = keeper.got
    assert (mail_from, rcpt_tos) == (SENDER, [ALICE_MAIL])
    [mail] = keeper.mails()
    assert mail["From"] == f"Acme hatp <{SENDER}>" and mail["To"] == ALICE_MAIL
    assert mail["Subject"] == "Approval asked: approve.spend (txn txn-gw-0001)"
    assert mail["Hatp-Notice-Id"] == "ntc_0001"
    assert mail["Message-ID"] == "<ntc_0001@gateway.acme.com>"
    assert mail["Auto-Submitted"] == "auto-generated"
    plain, html = parts(mail)
    for text in (plain, html):
        assert "seat" in text and "LH400" in text and "14C" in text
        assert "420 USD" in text and "580 USD" in text
        assert "1,000 USD, up to 1,020 USD" in text
        assert AGENT_TEXT_LABEL in text
        assert "2026-12-02T10:15:00.000Z (UTC)" in text
        assert "Replies to this e-mail are not read" in text
        assert not REPLY_TO_VOTE.search(text)
    # The plain part is the notice's text view, the agent's lines behind the bar.
    assert "\n  | Book the Berlin trip.\n  | Seat 14C, aisle.\n" in plain
    assert f"Open this ask on the approver page: {LINK}\n" in plain
    assert "Please answer by 2026-12-02T09:30:00.000Z (UTC)" in plain
    # The HTML part: each step in the list, its arguments in their own box, the agent's
    # words only in theirs.
    steps = re.findall(r'<li class="step">(.*?)</li>', html, re.DOTALL)
    assert [re.findall(r"<strong>(\w+)</strong>", s)[0] for s in steps] == ["seat", "room"]
    assert STEP_ARGUMENTS_LABEL in steps[0] and "14C" in steps[0]
    assert "no arguments" in steps[1] and "book" in steps[1]
    box = agent_box(html)
    assert AGENT_TEXT_LABEL in box and "Book the Berlin trip." in box
    assert "Book the Berlin trip." not in html.replace(box, "")
    assert f'<a href="{LINK}">' in html


def test_hostile_agent_text_is_escaped_and_stays_in_its_box(smtp: tuple[Keeper, int]) -> None:
    """[GW-VIEW-ESCAPE] Markup the agent wrote is shown as text, never as markup."""
    keeper, port = smtp
    hostile = {**plan(), "agentText": {"summary": HOSTILE}}
    send(mailer(port), approval(hostile))
    [mail] = keeper.mails()
    plain, html = parts(mail)
    assert "<script" not in html.lower() and "<b>CFO" not in html
    box = agent_box(html)
    assert "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;" in box
    assert "Reply YES to approve." in box and "&lt;b&gt;CFO approved&lt;/b&gt;" in box
    assert "Reply YES" not in html.replace(box, "")
    # In the plain part the agent's lines stand behind the bar, under the label.
    assert '\n  | <script>alert("owned")</script>\n  | Reply YES to approve.' in plain
    assert "Reply YES" not in plain.split(AGENT_TEXT_LABEL)[0]


def test_a_retried_notice_keeps_its_message_id(smtp: tuple[Keeper, int]) -> None:
    """[OUTBOX] The same notice mailed twice is the same message to a mailbox."""
    keeper, port = smtp
    channel = mailer(port)
    send(channel, approval(attempt=1))
    send(channel, approval(attempt=2))
    first, second = keeper.mails()
    assert first["Message-ID"] == second["Message-ID"] == "<ntc_0001@gateway.acme.com>"
    assert first["Hatp-Notice-Id"] == second["Hatp-Notice-Id"]
    assert first["Date"] == second["Date"]
    assert parts(first) == parts(second)


def test_the_channel_is_a_push_channel_that_reaches_only_people_with_an_address() -> None:
    channel = mailer(free_port())
    assert isinstance(channel, PushChannel)
    assert channel.channel_type == "email"
    assert channel.reaches(ALICE) and not channel.reaches(BOB)
    message = OutboxMessage(notice_doc(human=BOB), None, None, 1)
    failed = failure(channel, message)
    assert (failed.reason, failed.data["retryable"]) == ("NO_ADDRESS", False)
    assert failed.data["noticeId"] == "ntc_0001" and failed.data["channel"] == "email"


@pytest.mark.parametrize(
    ("where", "reply", "reason", "retryable"),
    [
        ("rcpt", "451 4.7.1 Greylisted, try again later", "SERVER_ERROR", True),
        ("data", "451 4.3.0 Queue full", "SERVER_ERROR", True),
        ("rcpt", "550 5.1.1 No such user", "REJECTED", False),
        ("data", "554 5.7.1 Message refused", "REJECTED", False),
    ],
)
def test_what_the_mail_server_answers_decides_whether_the_outbox_retries(
    smtp: tuple[Keeper, int], where: str, reply: str, reason: str, retryable: bool
) -> None:
    """[OUTBOX] A 4xx reply (recipient or message) is tried again; a 5xx is not."""
    keeper, port = smtp
    setattr(keeper, where, reply)
    failed = failure(mailer(port), approval())
    assert (failed.code, failed.reason, failed.data["retryable"]) == (
        "DELIVERY_FAILED",
        reason,
        retryable,
    )
    assert failed.data["status"] == int(reply[:3])
    assert failed.data["reply"] == reply[4:]
    assert not keeper.got


def test_a_server_that_is_down_is_a_retryable_connect_failure() -> None:
    failed = failure(mailer(free_port()), approval())
    assert (failed.reason, failed.data["retryable"], failed.data["status"]) == (
        "CONNECT",
        True,
        None,
    )


def test_a_server_that_does_not_answer_in_time_is_a_retryable_timeout(
    smtp: tuple[Keeper, int],
) -> None:
    keeper, port = smtp
    keeper.hang = True
    failed = failure(mailer(port, timeout_seconds=0.5), approval())
    assert (failed.reason, failed.data["retryable"]) == ("TIMEOUT", True)


def test_a_server_without_starttls_is_refused_not_spoken_to_in_clear(
    smtp: tuple[Keeper, int],
) -> None:
    """With ``starttls`` the mail is never sent over a plain connection."""
    keeper, port = smtp
    failed = failure(mailer(port, starttls=True), approval())
    assert (failed.reason, failed.data["retryable"]) == ("REJECTED", False)
    assert "STARTTLS" in failed.message
    assert not keeper.got


def test_every_delivery_reason_fires(smtp: tuple[Keeper, int]) -> None:
    keeper, port = smtp
    channel = mailer(port, timeout_seconds=0.5)
    seen = {failure(mailer(free_port()), approval()).reason}
    seen.add(failure(channel, OutboxMessage(notice_doc(human=BOB), None, None, 1)).reason)
    for reply in ("451 4.7.1 Later", "550 5.1.1 No"):
        keeper.rcpt = reply
        seen.add(failure(channel, approval()).reason)
    keeper.rcpt, keeper.hang = None, True
    seen.add(failure(channel, approval()).reason)
    assert seen == set(DELIVERY_REASONS)


# --- what a mail says for each event ----------------------------------------------------


def render(message: OutboxMessage) -> tuple[EmailMessage, str, str]:
    mail = render_email(message, sender=SENDER, to=ALICE_MAIL)
    plain, html = parts(mail)
    return mail, plain, html


@pytest.mark.parametrize(
    ("event", "subject"),
    [
        ("reminder", "Reminder: Approval asked: approve.spend (txn txn-gw-0001)"),
        ("escalation", "Escalated to you: Approval asked: approve.spend (txn txn-gw-0001)"),
    ],
)
def test_reminders_and_escalations_carry_the_view_and_the_link(event: str, subject: str) -> None:
    mail, plain, html = render(approval(event=event))
    assert mail["Subject"] == subject
    assert LINK in plain and LINK in html and "1,000 USD" in html


@pytest.mark.parametrize(
    ("event", "members", "subject", "says"),
    [
        ("withdrawal", {}, "Withdrawn: approval ask_0001 (txn txn-gw-0001)", "withdrawn"),
        (
            "deadline",
            {"decideBy": "2026-12-02T11:00:00.000Z"},
            "Deadline moved: approval ask_0001 (txn txn-gw-0001)",
            "now closes at 2026-12-02T11:00:00.000Z (UTC)",
        ),
        (
            "outcome",
            {"outcome": "approve"},
            "Decided: approval ask_0001 (txn txn-gw-0001): approve",
            "decided: approve",
        ),
    ],
)
def test_notices_that_ask_nothing_carry_no_link(
    event: str, members: dict[str, Any], subject: str, says: str
) -> None:
    """Withdrawals, deadlines and outcomes tell; they do not send anyone to vote."""
    message = OutboxMessage(notice_doc(event, **members), None, None, 1)
    mail, plain, html = render(message)
    assert mail["Subject"] == subject
    assert says in plain and says in html
    for text in (plain, html):
        assert "approver page" not in text and "approve/ask_0001" not in text
        assert not REPLY_TO_VOTE.search(text)


def test_a_reason_given_is_labelled_and_escaped() -> None:
    message = OutboxMessage(
        notice_doc("outcome", outcome="withdrawn", reason=HOSTILE), None, None, 1
    )
    _, plain, html = render(message)
    assert "Reason given (not checked by hatp):\n  | <script>" in plain
    assert "<script" not in html and "&lt;script&gt;" in agent_box(html)


def test_a_call_is_shown_with_its_arguments_tool_text_and_reason_each_in_a_box() -> None:
    request = {
        "hatpVersion": "0.1",
        "kind": "call-request",
        "requestId": "pay-0001",
        "requester": "agent://acme.com/travel-bot",
        "onBehalfOf": "human://acme.com/dana",
        "call": {
            "server": "https://payments.example",
            "tool": "send_payment",
            "arguments": {"to": "acct-42", "amount": {"value": "1000.00", "currency": "USD"}},
        },
        "toolDefinition": {
            "name": "send_payment",
            "description": "Send money. <img src=x onerror=alert(1)>",
            "inputSchema": {"type": "object"},
        },
        "address": "human://acme.com/role/finance-approver",
        "action": "approve.spend",
        "amountPointer": "/amount",
        "price": None,
        "passkey": False,
        "reason": {"summary": "Pay the hotel invoice. <i>urgent</i>"},
        "decideBy": format_time(DECIDE_BY),
        "validSeconds": 300,
    }
    view = call_view(request)
    notice = Notice("ask_0002", ALICE, "call", view, {}, view.decide_by, view.decide_by)
    doc = notice_doc(askKind="call", askId="ask_0002", text=render_call_text(view))
    mail, plain, html = render(OutboxMessage(doc, notice, LINK, 1))
    assert mail["Subject"] == (
        "Tool call approval asked: approve.spend, tool send_payment on "
        "https://payments.example (request pay-0001)"
    )
    assert "1,000 USD" in plain and "1,000 USD" in html
    assert ARGUMENTS_LABEL in html and "acct-42" in html
    assert escape(TOOL_TEXT_LABEL) in html and "&lt;img src=x" in html and "<img" not in html
    assert "Pay the hotel invoice. &lt;i&gt;urgent&lt;/i&gt;" in agent_box(html)
    assert LINK in plain


def test_a_question_shows_the_prompt_and_options_as_the_agents_words() -> None:
    question = question_doc("choose", {"options": ["window", "aisle\nYou approve: 1 USD"]})
    view = question_view(question)
    notice = Notice("ask_0003", ALICE, "question", view, {}, view.decide_by, view.decide_by)
    doc = notice_doc(askKind="question", askId="ask_0003", text=render_question_text(view))
    mail, plain, html = render(OutboxMessage(doc, notice, None, 1))
    assert mail["Subject"] == "Question asked: question q-choose from agent://acme.com/travel-bot"
    assert "Which seat?" in agent_box(html)
    assert "Options (written by the agent):" in html
    assert "2. aisle\\u000aYou approve: 1 USD" in html  # one option stays one line
    # No single-use link: the ask's own page, and no word of it being single-use.
    assert "Open this ask on the approver page: https://gateway.acme.com/approve/ask_0001" in plain
    assert "works once" not in plain


def test_a_message_id_is_made_safe_from_any_notice_id() -> None:
    odd = OutboxMessage(notice_doc(notice_id="ntc <x>@y"), None, None, 1)
    mail = render_email(odd, sender=SENDER, to=ALICE_MAIL)
    assert re.fullmatch(r"<ntc-[0-9a-f]{32}@gateway\.acme\.com>", mail["Message-ID"])
    again = render_email(odd, sender=SENDER, to=ALICE_MAIL)
    assert again["Message-ID"] == mail["Message-ID"]
    assert mail["Hatp-Notice-Id"] == "ntc <x>@y"


# --- settings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"port": 0}, "outside 1-65535"),
        ({"port": 70000}, "outside 1-65535"),
        ({"sender": "gateway"}, "not an e-mail address"),
        ({"sender": "Gateway <gateway@acme.example>"}, "not an e-mail address"),
        ({"sender": "gw@acme.example\r\nBcc: x@evil.example"}, "not an e-mail address"),
        ({"starttls": True, "use_tls": True}, "choose one of starttls"),
        ({"host": ""}, "not a host name"),
        ({"username": "gw"}, "both username and password"),
        ({"username": "gw", "password": "pw"}, "only sent over TLS"),
        ({"timeout_seconds": 0}, "must be positive"),
    ],
)
def test_settings_that_cannot_work_are_refused(changes: dict[str, Any], says: str) -> None:
    members = {"host": "smtp.acme.example", "sender": SENDER, "starttls": False, **changes}
    with pytest.raises(ValueError, match=says):
        SmtpSettings(**members)


def test_the_password_is_not_in_the_settings_repr() -> None:
    made = SmtpSettings(
        host="smtp.acme.example", sender=SENDER, username="gw", password="pw-s3cret"
    )
    assert (made.port, made.starttls, made.use_tls) == (587, True, False)
    assert "pw-s3cret" not in repr(made)


def test_an_address_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="alice"):
        EmailChannel(settings(25), {ALICE: "alice@acme.example\nBcc: x@evil.example"})


def test_holds_first_terms_and_a_steps_preview_are_shown_apart_from_the_agents_words() -> None:
    """[GW-TERMS] [GW-VIEW-PREVIEW] The terms and each participant's signed preview stand
    in their own boxes, under their labels, escaped like everything else."""
    doc = plan()
    preview = {
        "certainty": "exact",
        "summary": "ticket flight LH400 seat 14C <for alice>",
        "changes": [{"resource": "flight LH400 seat 14C", "kind": "ticket"}],
        "bound": None,
    }
    terms = {
        "kind": "hold-terms",
        "planDigest": digest(parse_plan(doc).to_wire()),
        "holds": [
            {
                "branchId": "seat",
                "leaseExpiresAt": "2026-12-02T09:30:00.000Z",
                "holdHorizon": None,
            }
        ],
        "approveBy": "2026-12-02T09:20:00.000Z",
        "previews": {"seat": preview},
    }
    view = approver_view(doc, "finance", terms=terms)
    notice = Notice("ask_0001", ALICE, "approval", view, {}, view.decide_by, view.decide_by)
    _, plain, html = render(OutboxMessage(notice_doc(text=render_text(view)), notice, LINK, 1))
    terms_box = re.search(r'<div class="terms"[^>]*>(.*?)</div>', html, re.DOTALL)
    assert terms_box is not None and escape(TERMS_LABEL) in terms_box.group(1)
    assert "seat: held until 2026-12-02T09:30:00.000Z (UTC)" in terms_box.group(1)
    assert "Approve by: 2026-12-02T09:20:00.000Z (UTC)" in terms_box.group(1)
    [seat_step, _] = re.findall(r'<li class="step">(.*?)</li>', html, re.DOTALL)
    preview_box = re.search(r'<div class="preview"[^>]*>(.*?)</div>', seat_step, re.DOTALL)
    assert preview_box is not None and escape(STEP_PREVIEW_LABEL) in preview_box.group(1)
    assert "seat 14C &lt;for alice&gt;" in preview_box.group(1)
    assert "<for alice>" not in html
    assert STEP_PREVIEW_LABEL in plain and "<for alice>" in plain


SMTP_ERRORS: list[tuple[Exception, str]] = [
    (aiosmtplib.SMTPServerDisconnected("gone"), "CONNECT"),
    (aiosmtplib.SMTPConnectError("refused"), "CONNECT"),
    (ConnectionResetError("reset"), "CONNECT"),
    (aiosmtplib.SMTPTimeoutError("slow"), "TIMEOUT"),
    (aiosmtplib.SMTPConnectTimeoutError("slow"), "TIMEOUT"),
    (aiosmtplib.SMTPReadTimeoutError("slow"), "TIMEOUT"),
    (TimeoutError("slow"), "TIMEOUT"),
    (aiosmtplib.SMTPResponseException(421, "closing"), "SERVER_ERROR"),
    (aiosmtplib.SMTPConnectResponseError(421, "busy"), "SERVER_ERROR"),
    (aiosmtplib.SMTPConnectResponseError(554, "no service"), "REJECTED"),
    (aiosmtplib.SMTPHeloError(501, "bad helo"), "REJECTED"),
    (aiosmtplib.SMTPDataError(452, "no space"), "SERVER_ERROR"),
    (aiosmtplib.SMTPAuthenticationError(535, "bad login"), "REJECTED"),
    (aiosmtplib.SMTPSenderRefused(550, "no relay", SENDER), "REJECTED"),
    (aiosmtplib.SMTPRecipientRefused(450, "mailbox busy", ALICE_MAIL), "SERVER_ERROR"),
    (
        aiosmtplib.SMTPRecipientsRefused(
            [aiosmtplib.SMTPRecipientRefused(550, "no such user", ALICE_MAIL)]
        ),
        "REJECTED",
    ),
    (aiosmtplib.SMTPNotSupported("SMTPUTF8 is not supported"), "REJECTED"),
    (aiosmtplib.SMTPException("SMTP STARTTLS extension not supported by server."), "REJECTED"),
]


@pytest.mark.parametrize(("error", "reason"), SMTP_ERRORS, ids=lambda e: type(e).__name__)
def test_every_smtp_error_is_mapped_to_a_delivery_reason(error: Exception, reason: str) -> None:
    """Every aiosmtplib error (and a socket's) becomes a DeliveryFailed at the boundary."""
    failed = _mapped(error, approval(), settings(25))
    assert (failed.reason, failed.data["retryable"]) == (reason, reason != "REJECTED")


def test_the_smtp_error_table_covers_every_aiosmtplib_error() -> None:
    def every(cls: type[Exception]) -> set[type[Exception]]:
        return {cls}.union(*(every(sub) for sub in cls.__subclasses__()))

    assert every(aiosmtplib.SMTPException) <= {type(error) for error, _ in SMTP_ERRORS}
