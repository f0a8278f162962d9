"""The Human Gateway: it works out what an approval must cover, routes it to people,
asks them over channels, checks what they say, and signs the outcome.

:func:`required_amounts` computes what an approval group must cover from
the plan itself; :func:`route` resolves the group's address against those
amounts and signs a routing record of everyone the address matched
(docs/spec.md §18). :class:`HumanGateway` asks the people, keeps every ask
durable in an :class:`~hatp.store.AskStore`, takes their signed votes
(:func:`sign_vote` is the person's side) and answers, escalates past SLAs,
withdraws at deadlines, and signs the final Approval or Answer (§19).
An agent has one exact tool call approved the same way (§20):
:func:`parse_call_request` reads its request, :func:`call_terms` computes
what people approve (the amount read from the call's own arguments),
:func:`route_call` routes it, and the gateway signs a CallApproval.
Channels reach people: :class:`MemoryChannel` (with scripted
:class:`Person` s for tests and demos), :class:`TerminalChannel`, and
:class:`WebChannel`, the approver page's: people sign in with their passkey
(:class:`ApproverSessions`) and answer there (:class:`WebApprovals`).
Push channels send the notices of the gateway's outbox (:class:`OutboxMessage`,
:class:`PushChannel`, one per event of :data:`NOTICE_EVENTS`) and never take a vote:
:class:`WebhookChannel` POSTs each signed (a receiver checks it with
:func:`verify_webhook`), and :class:`EmailChannel` mails it (:class:`SmtpSettings`,
:func:`render_email`) with a link to the approver page. The gateway sends them through
its outbox, at least once, retried as a :class:`SendPolicy` says.
"""

from hatp.gateway._amounts import RequiredAmount, required_amounts
from hatp.gateway._authenticator import SoftwareAuthenticator
from hatp.gateway._calls import call_terms, parse_call_request, terms_digest
from hatp.gateway._channels import Channel, MemoryChannel, Notice, Person, Responder
from hatp.gateway._email import EmailChannel, SmtpSettings, render_email
from hatp.gateway._gateway import HumanGateway
from hatp.gateway._inbox import AskProgress, PersonProgress
from hatp.gateway._outbox import SendPolicy
from hatp.gateway._people import passkey_vote, sign_passkey_vote, sign_vote, vote_challenge
from hatp.gateway._preview_view import (
    STEP_PREVIEW_LABEL,
    WRITE_PREVIEW_LABEL,
    PreviewView,
    preview_lines,
    preview_view,
)
from hatp.gateway._push import NOTICE_EVENTS, OutboxMessage, PushChannel
from hatp.gateway._questions import check_answer, parse_question, question_digest, sign_answer
from hatp.gateway._routing import Routed, resolve_question, route, route_call
from hatp.gateway._sessions import ApproverSessions, SignedIn
from hatp.gateway._shown_json import ShownJson, shown_json
from hatp.gateway._terminal import TerminalChannel
from hatp.gateway._view import (
    AGENT_TEXT_LABEL,
    ARGUMENTS_LABEL,
    STEP_ARGUMENTS_LABEL,
    TERMS_LABEL,
    TOOL_TEXT_LABEL,
    ApproverView,
    CallView,
    HoldLine,
    QuestionView,
    TermsView,
    approver_view,
    call_view,
    question_view,
    render_call_text,
    render_question_text,
    render_text,
)
from hatp.gateway._web import WEB, WebApprovals, WebChannel
from hatp.gateway._webhook import WebhookChannel, verify_webhook, webhook_signature_base
from hatp.gateway._write_view import write_preview_lines

__all__ = [
    "AGENT_TEXT_LABEL",
    "ARGUMENTS_LABEL",
    "NOTICE_EVENTS",
    "STEP_ARGUMENTS_LABEL",
    "STEP_PREVIEW_LABEL",
    "TERMS_LABEL",
    "TOOL_TEXT_LABEL",
    "WEB",
    "WRITE_PREVIEW_LABEL",
    "ApproverSessions",
    "ApproverView",
    "AskProgress",
    "CallView",
    "Channel",
    "EmailChannel",
    "HoldLine",
    "HumanGateway",
    "MemoryChannel",
    "Notice",
    "OutboxMessage",
    "Person",
    "PersonProgress",
    "PreviewView",
    "PushChannel",
    "QuestionView",
    "RequiredAmount",
    "Responder",
    "Routed",
    "SendPolicy",
    "ShownJson",
    "SignedIn",
    "SmtpSettings",
    "SoftwareAuthenticator",
    "TerminalChannel",
    "TermsView",
    "WebApprovals",
    "WebChannel",
    "WebhookChannel",
    "approver_view",
    "call_terms",
    "call_view",
    "check_answer",
    "parse_call_request",
    "parse_question",
    "passkey_vote",
    "preview_lines",
    "preview_view",
    "question_digest",
    "question_view",
    "render_call_text",
    "render_email",
    "render_question_text",
    "render_text",
    "required_amounts",
    "resolve_question",
    "route",
    "route_call",
    "shown_json",
    "sign_answer",
    "sign_passkey_vote",
    "sign_vote",
    "terms_digest",
    "verify_webhook",
    "vote_challenge",
    "webhook_signature_base",
    "write_preview_lines",
]
