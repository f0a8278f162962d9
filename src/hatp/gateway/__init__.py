"""The Human Gateway: it works out what an approval must cover, routes it to people,
asks them over channels, checks what they say, and signs the outcome.

:func:`required_amounts` computes what an approval group must cover from
the plan itself; :func:`route` resolves the group's address against those
amounts and signs a routing record of everyone the address matched
(docs/spec.md §18). :class:`HumanGateway` asks the people, keeps every ask
durable in an :class:`~hatp.store.AskStore`, takes their signed votes
(:func:`sign_vote` is the person's side) and answers, escalates past SLAs,
withdraws at deadlines, and signs the final Approval or Answer (§19).
Channels reach people: :class:`MemoryChannel` (with scripted
:class:`Person` s for tests and demos) and :class:`TerminalChannel`.
"""

from hatp.gateway._amounts import RequiredAmount, required_amounts
from hatp.gateway._channels import Channel, MemoryChannel, Notice, Person, Responder
from hatp.gateway._gateway import HumanGateway
from hatp.gateway._people import sign_vote
from hatp.gateway._questions import check_answer, parse_question, question_digest, sign_answer
from hatp.gateway._routing import Routed, resolve_question, route
from hatp.gateway._terminal import TerminalChannel
from hatp.gateway._view import (
    ApproverView,
    QuestionView,
    approver_view,
    question_view,
    render_question_text,
    render_text,
)

__all__ = [
    "ApproverView",
    "Channel",
    "HumanGateway",
    "MemoryChannel",
    "Notice",
    "Person",
    "QuestionView",
    "RequiredAmount",
    "Responder",
    "Routed",
    "TerminalChannel",
    "approver_view",
    "check_answer",
    "parse_question",
    "question_digest",
    "question_view",
    "render_question_text",
    "render_text",
    "required_amounts",
    "resolve_question",
    "route",
    "sign_answer",
    "sign_vote",
]
