"""What a person is shown before they decide: built from the plan, never from the agent's words.

An :class:`ApproverView` holds only the plan's structured members (who
acts, for whom, each step's participant, operation, tier and amount, the
deadline, the group's action) and the amounts the gateway computed itself
with :func:`hatp.model.required_amounts` ([GW-VIEW]). Whatever the agent
wrote (``agentText``, a question's prompt and options) is kept in its own
fields and rendered under a label that says the agent wrote it
([GW-VIEW-AGENT-TEXT]), each line behind a bar so it cannot pose as the
gateway's own lines. Rendering escapes every character that is not
printable, so no string (a participant's name, a newline, a terminal
escape sequence) can forge or hide a line ([GW-VIEW-ESCAPE]).

Each step carries its ``args`` from the signed plan as they are, the
structure the participant runs it with ([GW-VIEW-ARGS]): shown as JSON
behind the bar under :data:`STEP_ARGUMENTS_LABEL`, since every value in
them is the agent's choice and only the participant checks them, escaped
and bounded by :func:`~hatp.gateway.shown_json`
([GW-VIEW-BOUNDED]).

In holds-first and approval-first mode the view also shows the terms
people approve with the plan ([GW-TERMS]): each hold's end (holds-first;
none is placed yet in approval-first) and the approval deadline, labelled
as what they are, the coordinator's statement of what the participants
signed (:class:`TermsView`); and under each step whose preview the terms
hold (from its yes vote, or its quote), that preview ([GW-VIEW-PREVIEW]):
what committing it will change and how surely, in its participant's signed
words under
:data:`~hatp.gateway._preview_view.STEP_PREVIEW_LABEL`
(:class:`~hatp.gateway._preview_view.PreviewView`). A step without one
shows nothing about previews.

A :class:`CallView` does the same for one tool call ([GW-CALL-VIEW]): the
server, the tool, the exact arguments (every value in them the agent's
choice, so shown behind the bar too), and the amount the gateway read from
them itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from hatp.clock import format_time, parse_time
from hatp.evidence import digest
from hatp.gateway._amounts import format_amount
from hatp.gateway._calls import call_terms, parse_call_request, terms_digest
from hatp.gateway._preview_view import PreviewView, preview_lines, preview_view
from hatp.gateway._questions import MAX_TEXT_LENGTH, parse_question
from hatp.gateway._shown_json import ShownJson, shown_json
from hatp.model import (
    CallRequest,
    HoldTerms,
    Plan,
    Question,
    QuestionType,
    Tier,
    recheck_plan,
    required_amounts,
)

__all__ = [
    "AGENT_TEXT_LABEL",
    "ARGUMENTS_LABEL",
    "STEP_ARGUMENTS_LABEL",
    "TERMS_LABEL",
    "TOOL_TEXT_LABEL",
    "AmountLine",
    "ApproverView",
    "CallView",
    "HoldLine",
    "QuestionView",
    "StepLine",
    "TermsView",
    "approver_view",
    "call_view",
    "format_amount",
    "question_view",
    "render_call_text",
    "render_question_text",
    "render_text",
    "terms_view",
]

#: The label above anything the agent wrote.
AGENT_TEXT_LABEL = "Written by the agent (not checked by hatp):"
#: The label above a call's arguments: exact, but every value in them is the agent's choice.
ARGUMENTS_LABEL = "Arguments (exactly what the tool runs with, as the agent chose them):"
#: The label above a plan step's arguments: what the participant runs, as the agent chose it.
STEP_ARGUMENTS_LABEL = (
    "Arguments (exactly what the participant runs, as the agent chose them; "
    "only the participant checks them):"
)
#: The label above a tool's description, from the definition whose digest the terms bind.
TOOL_TEXT_LABEL = "Tool description (the tool server's words, not checked by hatp):"
#: The label above the terms: the coordinator's word for what the participants signed.
TERMS_LABEL = (
    "Terms (the coordinator's statement of what the participants signed; "
    "you approve them with the plan):"
)
#: What each tier means to the person deciding.
TIER_WORDS = {
    Tier.HOLD: "held until commit",
    Tier.COMPENSATE: "can be undone",
    Tier.FINAL: "cannot be undone",
}
_BAR = "  | "
#: Where the lines under a step begin (under the step's name, past its number).
_STEP_INDENT = "     "


@dataclass(frozen=True, slots=True)
class StepLine:
    """One branch of the plan as the person sees it.

    ``args`` is the branch's ``args`` object from the signed plan, as it is:
    what the participant runs the step with, every value the agent's choice
    ([GW-VIEW-ARGS]). Channels show :attr:`shown_args`, never ``args`` raw.
    ``preview`` is the step's effect preview from the hold terms, as shown
    ([GW-VIEW-PREVIEW]); ``None`` when the terms hold none for it, or there
    are no terms.
    """

    branch_id: str
    participant: str
    operation: str
    tier: Tier
    amount: str | None
    settles: tuple[str, ...]
    args: dict[str, Any] = field(default_factory=dict)
    preview: PreviewView | None = None

    @property
    def shown_args(self) -> ShownJson:
        """The arguments as every channel shows them: escaped, bounded, with a note of
        what was left out. [GW-VIEW-ESCAPE] [GW-VIEW-BOUNDED]"""
        return shown_json(self.args)


@dataclass(frozen=True, slots=True)
class AmountLine:
    """What the group approves in one currency: the plan's total and, with the
    tolerance, the most it may cost (both computed by the gateway)."""

    currency: str
    total: Decimal
    with_tolerance: Decimal

    @property
    def text(self) -> str:
        """``"1,000 USD, up to 1,020 USD"``, or ``"1,000 USD"`` when there is no tolerance."""
        total = format_amount(self.total, self.currency)
        if self.with_tolerance == self.total:
            return total
        return f"{total}, up to {format_amount(self.with_tolerance, self.currency)}"


@dataclass(frozen=True, slots=True)
class HoldLine:
    """One hold as the terms state it: when its lease ends, and the latest it can last."""

    branch_id: str
    lease_expires_at: datetime | None
    hold_horizon: datetime | None


@dataclass(frozen=True, slots=True)
class TermsView:
    """The terms of a holds-first or approval-first ask: the holds' ends (none in
    approval-first), the approval deadline inside them, and the digest the person's
    vote names."""

    terms_digest: str
    holds: tuple[HoldLine, ...]
    approve_by: datetime


@dataclass(frozen=True, slots=True)
class ApproverView:
    """What an approver is shown for one approval group of one plan.

    Every field but ``agent_text`` comes from the plan's structured members
    or the gateway's own arithmetic; ``agent_text`` is the plan's
    ``agentText`` summary, shown labelled and never used for anything else.
    ``terms`` (holds-first, approval-first) are the terms approved with the plan.
    """

    txn_id: str
    plan_digest: str
    initiator: str
    on_behalf_of: str
    group_id: str
    address: str
    action: str
    passkey: bool
    steps: tuple[StepLine, ...]
    amounts: tuple[AmountLine, ...]
    decide_by: datetime
    agent_text: str | None
    terms: TermsView | None = None


def approver_view(
    plan: Mapping[str, Any] | Plan,
    group_id: str,
    *,
    terms: Mapping[str, Any] | HoldTerms | None = None,
) -> ApproverView:
    """Build the view of approval group ``group_id`` of ``plan``, with the terms
    ``terms`` approved with it (holds-first, approval-first) and, under each step, the
    effect preview the terms hold for it. [GW-VIEW] [GW-TERMS] [GW-VIEW-PREVIEW]

    Raises:
        pydantic.ValidationError: ``terms`` is not a HoldTerms (the gateway reads an
            ask's terms before it stores them).
        PlanInvalid: the plan is invalid (a negative amount or tolerance is
            refused by the gateway itself, [GW-NEGATIVE]).
        RequirementBelowTotal: the group declares less than the plan needs.
        AskInvalid: the plan has no approval group ``group_id`` (``UNKNOWN_GROUP``).
    """
    parsed = recheck_plan(plan)
    required = required_amounts(parsed, group_id)
    held = None if terms is None else _hold_terms(terms)
    previews = {} if held is None else held.previews
    group = next(g for g in parsed.approvals if g.group_id == group_id)
    return ApproverView(
        txn_id=parsed.txn_id,
        plan_digest=digest(parsed.to_wire()),
        initiator=parsed.initiator,
        on_behalf_of=parsed.on_behalf_of,
        group_id=group.group_id,
        address=group.address,
        action=group.requirement.action,
        passkey=group.requirement.passkey_needed(
            {currency: r.with_tolerance for currency, r in required.items()}
        ),
        steps=tuple(
            StepLine(
                branch_id=b.branch_id,
                participant=b.participant,
                operation=b.operation,
                tier=b.tier,
                amount=None
                if b.amount is None
                else format_amount(b.amount.decimal, b.amount.currency),
                settles=tuple(b.settles),
                args=b.args,
                preview=None
                if (signed := previews.get(b.branch_id)) is None
                else preview_view(signed),
            )
            for b in parsed.branches
        ),
        amounts=tuple(
            AmountLine(currency, r.total, r.with_tolerance) for currency, r in required.items()
        ),
        decide_by=parse_time(parsed.deadlines.decide_by),
        # The only place the agent's words go.
        agent_text=None if parsed.agent_text is None else parsed.agent_text.summary,
        terms=None if held is None else terms_view(held),
    )


def terms_view(terms: Mapping[str, Any] | HoldTerms) -> TermsView:
    """The view of hold terms: each hold's end and the approval deadline. [GW-TERMS]

    Raises:
        pydantic.ValidationError: ``terms`` is not a HoldTerms.
    """
    parsed = _hold_terms(terms)
    return TermsView(
        terms_digest=digest(parsed.to_wire()),
        holds=tuple(
            HoldLine(
                branch_id=h.branch_id,
                lease_expires_at=_time(h.lease_expires_at),
                hold_horizon=_time(h.hold_horizon),
            )
            for h in parsed.holds
        ),
        approve_by=parse_time(parsed.approve_by),
    )


def _hold_terms(terms: Mapping[str, Any] | HoldTerms) -> HoldTerms:
    return terms if isinstance(terms, HoldTerms) else HoldTerms.model_validate(terms)


def _time(wire: str | None) -> datetime | None:
    return None if wire is None else parse_time(wire)


def render_text(view: ApproverView) -> str:
    """Return the view as plain text for a terminal, a mail or a chat message. [GW-VIEW-ESCAPE]"""
    lines = [
        f"Approval asked: {_safe(view.action)}",
        f"  group {_safe(view.group_id)} ({_safe(view.address)})"
        + (", passkey required" if view.passkey else ""),
        f"Transaction {_safe(view.txn_id)}, plan {view.plan_digest}",
        f"Proposed by {_safe(view.initiator)}, acting for {_safe(view.on_behalf_of)}",
        "",
        f"Steps ({len(view.steps)}, all or nothing):",
    ]
    for number, step in enumerate(view.steps, 1):
        lines.append(
            f"  {number}. {_safe(step.branch_id)}: {_safe(step.operation)} "
            f"on {_safe(step.participant)}, {step.tier.value} ({TIER_WORDS[step.tier]})"
            + (f", {step.amount}" if step.amount is not None else ", no amount")
            + (f", settles {', '.join(_safe(s) for s in step.settles)}" if step.settles else "")
        )
        lines.extend(_step_arguments_lines(step))
        if step.preview is not None:
            lines.extend(_STEP_INDENT + line for line in preview_lines(step.preview, _BAR))
    lines.append("")
    if view.amounts:
        lines.append("You approve spending:")
        lines.extend(f"  {amount.text}" for amount in view.amounts)
    else:
        lines.append("You approve spending: nothing (the plan spends no money)")
    lines.append(f"Decide by: {format_time(view.decide_by)} (UTC)")
    if view.terms is not None:
        lines.extend(["", *terms_lines(view.terms)])
    if view.agent_text is not None:
        lines.extend(["", AGENT_TEXT_LABEL, *_barred(view.agent_text)])
    return "\n".join(lines) + "\n"


def _step_arguments_lines(step: StepLine) -> list[str]:
    """A step's arguments under their label, each line behind the bar; what was left
    out said after them, in the gateway's words. [GW-VIEW-ARGS]"""
    if not step.args:
        return [f"{_STEP_INDENT}no arguments"]
    shown = step.shown_args
    lines = [_STEP_INDENT + STEP_ARGUMENTS_LABEL]
    lines.extend(_STEP_INDENT + _BAR + line for line in shown.lines)
    if shown.note is not None:
        lines.append(_STEP_INDENT + shown.note)
    return lines


def terms_lines(terms: TermsView) -> list[str]:
    lines = [TERMS_LABEL]
    for hold in terms.holds:
        lease = (
            "no lease stated"
            if hold.lease_expires_at is None
            else f"held until {format_time(hold.lease_expires_at)} (UTC)"
        )
        horizon = (
            "" if hold.hold_horizon is None else f", at most until {format_time(hold.hold_horizon)}"
        )
        lines.append(f"  {_safe(hold.branch_id)}: {lease}{horizon}")
    if not terms.holds:
        lines.append("  no holds")
    lines.append(f"  Approve by: {format_time(terms.approve_by)} (UTC)")
    lines.append(f"  Terms {terms.terms_digest}")
    return lines


@dataclass(frozen=True, slots=True)
class QuestionView:
    """What a person is shown for a question.

    ``agent_text`` (the prompt), ``options`` and ``form_schema`` are the
    agent's words; the rest is the question's structured members.
    """

    question_id: str
    asker: str
    on_behalf_of: str
    type: QuestionType
    decide_by: datetime
    agent_text: str
    options: tuple[str, ...]
    form_schema: dict[str, Any] | None
    max_length: int


def question_view(question: Mapping[str, Any] | Question) -> QuestionView:
    """Build the view of a question. [GW-VIEW-AGENT-TEXT]

    Raises:
        QuestionInvalid: the document is not a valid question.
    """
    parsed = parse_question(question)
    return QuestionView(
        question_id=parsed.question_id,
        asker=parsed.asker,
        on_behalf_of=parsed.on_behalf_of,
        type=parsed.type,
        decide_by=parse_time(parsed.decide_by),
        agent_text=parsed.prompt.summary,
        options=tuple(parsed.options or ()),
        form_schema=parsed.form_schema,
        max_length=parsed.max_length or MAX_TEXT_LENGTH,
    )


def render_question_text(view: QuestionView) -> str:
    """Return the question as plain text; everything the agent wrote is under its label."""
    kinds = {
        QuestionType.CHOOSE: f"choose one of {len(view.options)} options",
        QuestionType.FORM: "fill a form (a JSON value that fits the schema below)",
        QuestionType.TEXT: f"write a line of text, at most {view.max_length:,} characters",
    }
    lines = [
        f"Question {_safe(view.question_id)} from {_safe(view.asker)}, "
        f"acting for {_safe(view.on_behalf_of)}",
        f"Answer: {kinds[view.type]}",
        f"Answer by: {format_time(view.decide_by)} (UTC)",
        "",
        AGENT_TEXT_LABEL,
        *_barred(view.agent_text),
    ]
    if view.options:
        lines.append("Options (written by the agent):")
        lines.extend(f"  {n}{_BAR[1:]}{_safe(o)}" for n, o in enumerate(view.options, 1))
    if view.form_schema is not None:
        lines.append("Form schema (written by the agent):")
        schema = json.dumps(view.form_schema, indent=2, sort_keys=True, ensure_ascii=True)
        lines.extend(_BAR + line for line in schema.splitlines())
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class CallView:
    """What an approver is shown for one tool call.

    Every field comes from the request's structured members or the terms the
    gateway computed ([GW-CALL-VIEW]): ``amount`` is what the gateway read
    from ``arguments`` at ``amount_pointer``, formatted. ``agent_text`` is the
    request's ``reason`` and ``tool_description`` the definition's
    ``description``: both shown labelled, never used for anything else.
    """

    request_id: str
    terms_digest: str
    server: str
    tool: str
    arguments: dict[str, Any]
    call_digest: str
    tool_digest: str | None
    tool_description: str | None
    requester: str
    on_behalf_of: str
    address: str
    action: str
    passkey: bool
    amount: str | None
    amount_pointer: str | None
    price: str | None
    pay_to: str | None
    valid_seconds: int
    decide_by: datetime
    agent_text: str | None


def call_view(request: Mapping[str, Any] | CallRequest) -> CallView:
    """Build the view of an agent's call request, with the terms the gateway computes
    from it (:func:`~hatp.gateway.call_terms`). [GW-CALL-VIEW]

    Raises:
        CallInvalid: the request cannot be read, or holds no amount at its pointer.
        VersionUnsupported: the request names a protocol version this build does not know.
    """
    parsed = parse_call_request(request)
    terms = call_terms(parsed)
    description = (parsed.tool_definition or {}).get("description")
    price = terms.price
    return CallView(
        request_id=terms.request_id,
        terms_digest=terms_digest(terms),
        server=terms.server,
        tool=terms.tool,
        arguments=parsed.call.arguments,
        call_digest=terms.call_digest,
        tool_digest=terms.tool_digest,
        tool_description=description if isinstance(description, str) else None,
        requester=terms.requester,
        on_behalf_of=terms.on_behalf_of,
        address=terms.address,
        action=terms.action,
        passkey=parsed.passkey,
        amount=None
        if terms.amount is None
        else format_amount(terms.amount.decimal, terms.amount.currency),
        amount_pointer=parsed.amount_pointer,
        price=None
        if price is None
        else format_amount(price.max_amount.decimal, price.max_amount.currency),
        pay_to=None if price is None else price.pay_to,
        valid_seconds=terms.valid_seconds,
        decide_by=parse_time(parsed.decide_by),
        # The only place the agent's words go.
        agent_text=None if parsed.reason is None else parsed.reason.summary,
    )


def render_call_text(view: CallView) -> str:
    """Return the call's view as plain text; the arguments, the tool's description and
    the agent's reason each stand under their own label, behind the bar. [GW-VIEW-ESCAPE]"""
    lines = [
        f"Tool call approval asked: {_safe(view.action)}",
        f"  by {_safe(view.address)}" + (", passkey required" if view.passkey else ""),
        f"Request {_safe(view.request_id)}, terms {view.terms_digest}",
        f"Asked by {_safe(view.requester)}, acting for {_safe(view.on_behalf_of)}",
        "",
        f"Call: tool {_safe(view.tool)} on {_safe(view.server)}",
        f"  call {view.call_digest}",
        f"  tool definition {view.tool_digest}"
        if view.tool_digest is not None
        else "  no tool definition bound",
        ARGUMENTS_LABEL,
        *_barred(json.dumps(view.arguments, indent=2, sort_keys=True, ensure_ascii=True)),
        "",
    ]
    if view.amount is not None:
        lines.append(
            f"You approve spending: {view.amount} "
            f"(read by the gateway from the arguments at {_safe(view.amount_pointer or '')!r})"
        )
    else:
        lines.append("You approve spending: no amount is named in this call")
    if view.price is not None:
        lines.append(f"Price: at most {view.price}, paid to {_safe(view.pay_to or '')}")
    lines.append(f"Good for one call, within {view.valid_seconds:,} s of the decision")
    lines.append(f"Decide by: {format_time(view.decide_by)} (UTC)")
    if view.tool_description is not None:
        lines.extend(["", TOOL_TEXT_LABEL, *_barred(view.tool_description)])
    if view.agent_text is not None:
        lines.extend(["", AGENT_TEXT_LABEL, *_barred(view.agent_text)])
    return "\n".join(lines) + "\n"


def _barred(text: str) -> list[str]:
    """Agent text, one line per line, each behind the bar so none can pass as the gateway's."""
    return [_BAR + _safe(line) for line in text.split("\n")]


def _safe(text: str) -> str:
    """``text`` with every character that is not printable written as an escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
