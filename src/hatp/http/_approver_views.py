"""The approver page's HTML: Jinja2 templates filled from the gateway's structured views.

Everything a page shows comes from the :class:`~hatp.gateway.Notice` the
gateway builds from the plan, the call or the question, and from the ask's
progress; nothing comes from the agent's words except under their label
([WEB-VIEW]): the agent's summary, each plan step's arguments, a call's
arguments and tool description, a question's prompt, options and form each
stand in a box headed by the label that says whose words they are; so does
each step's effect preview, its participant's signed words (holds-first,
[GW-VIEW-PREVIEW]).
Templates escape every value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from hatp.clock import format_time
from hatp.gateway import (
    AGENT_TEXT_LABEL,
    ARGUMENTS_LABEL,
    STEP_ARGUMENTS_LABEL,
    STEP_PREVIEW_LABEL,
    TERMS_LABEL,
    TOOL_TEXT_LABEL,
    ApproverView,
    AskProgress,
    CallView,
    Notice,
    QuestionView,
)
from hatp.store import AskState

__all__ = [
    "FormField",
    "ask_page",
    "form_fields",
    "inbox_item",
    "is_asked",
    "render",
    "state_words",
]

_ENV = Environment(
    loader=PackageLoader("hatp.http", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["utc"] = lambda moment: format_time(moment)[:19].replace("T", " ")

_LABELS = {
    "agent": AGENT_TEXT_LABEL,
    "arguments": ARGUMENTS_LABEL,
    "step_arguments": STEP_ARGUMENTS_LABEL,
    "step_preview": STEP_PREVIEW_LABEL,
    "tool": TOOL_TEXT_LABEL,
    "terms": TERMS_LABEL,
}
_TIER_WORDS = {
    "hold": "held until commit",
    "compensate": "can be undone",
    "final": "cannot be undone",
}
_KIND_WORDS = {"approval": "Approval", "call": "Tool call", "question": "Question"}
_ANSWER_WORDS = {
    "choose": "choose one of the options",
    "form": "fill the form",
    "text": "write a few words",
}


def render(template: str, **context: Any) -> str:
    """Render one of the page's templates with ``context``."""
    return _ENV.get_template(template).render(labels=_LABELS, **context)


def title(notice: Notice) -> str:
    """What an ask is, from its structured members only (never the agent's words)."""
    view = notice.view
    if isinstance(view, ApproverView):
        return f"{view.action} for {view.on_behalf_of} ({len(view.steps)} steps)"
    if isinstance(view, CallView):
        return f"{view.action}: {view.tool} on {view.server}"
    return f"Question from {view.asker}"


def inbox_item(notice: Notice) -> dict[str, Any]:
    """One line of a person's inbox (also its JSON form for the page's script)."""
    view = notice.view
    amounts = ""
    if isinstance(view, ApproverView):
        amounts = "; ".join(amount.text for amount in view.amounts)
    elif isinstance(view, CallView):
        amounts = view.amount or ""
    return {
        "ask_id": notice.ask_id,
        "kind": notice.kind,
        "kind_words": _KIND_WORDS[notice.kind],
        "title": title(notice),
        "amounts": amounts,
        "passkey": notice.nonce is not None,
        "respond_by": _ENV.filters["utc"](notice.respond_by),
        "decide_by": _ENV.filters["utc"](notice.decide_by),
    }


@dataclass(frozen=True, slots=True)
class FormField:
    """One field of a form question, when its schema is a flat object of simple values."""

    name: str
    label: str
    kind: str  # string, number, integer, boolean
    required: bool
    choices: tuple[str, ...]
    description: str | None


def form_fields(schema: Mapping[str, Any] | None) -> list[FormField] | None:
    """The fields of a form question's schema when it is an object whose properties are
    strings, numbers, integers, booleans or string enums; ``None`` otherwise (the page
    then takes the answer as JSON). The server checks the answer against the schema
    whatever the page sends."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    required = schema.get("required") or []
    fields = []
    for name, spec in properties.items():
        if not isinstance(spec, Mapping):
            return None
        kind = spec.get("type")
        choices = spec.get("enum")
        if choices is not None:
            if kind not in (None, "string") or not all(isinstance(c, str) for c in choices):
                return None
            kind = "string"
        if kind not in ("string", "number", "integer", "boolean"):
            return None
        label = spec.get("title")
        description = spec.get("description")
        fields.append(
            FormField(
                name=str(name),
                label=label if isinstance(label, str) else str(name),
                kind=str(kind),
                required=name in required,
                choices=tuple(choices or ()),
                description=description if isinstance(description, str) else None,
            )
        )
    return fields


def ask_page(
    notice: Notice,
    progress: AskProgress,
    human: str,
    *,
    now: datetime,
) -> dict[str, Any]:
    """The context of the ask page for ``human``."""
    asked = is_asked(progress, human)
    view = notice.view
    context: dict[str, Any] = {
        "notice": notice,
        "progress": progress,
        "title": title(notice),
        "state_words": state_words(progress, human, late=now > notice.decide_by),
        "you_are_asked": asked,
        "passkey_vote": notice.nonce is not None,
        "tier_words": _TIER_WORDS,
        "routing": _routing(progress, human),
    }
    if isinstance(view, CallView):
        context["arguments"] = json.dumps(view.arguments, indent=2, sort_keys=True)
    if isinstance(view, QuestionView):
        context["answer_words"] = _ANSWER_WORDS[view.type.value]
        context["fields"] = form_fields(view.form_schema)
        context["schema"] = json.dumps(view.form_schema, indent=2, sort_keys=True)
    return context


def is_asked(progress: AskProgress, human: str) -> bool:
    """Whether the open ask waits on ``human``'s response."""
    mine = next((p for p in progress.people if p.id == human), None)
    return progress.state is AskState.OPEN and mine is not None and mine.status == "asked"


def state_words(progress: AskProgress, human: str, *, late: bool = False) -> str:
    """How the ask stands, in a line for ``human`` (``late``: open past its deadline)."""
    if progress.state is AskState.OPEN:
        if late:
            return "Open, past its deadline: the gateway is closing it"
        if is_asked(progress, human):
            return "Open: waiting for your response"
        return "Open: waiting for others"
    if progress.state is AskState.WITHDRAWN:
        return f"Closed without a decision: {progress.reason or 'withdrawn'}"
    if progress.answered_by is not None:
        return f"Answered by {progress.answered_by}"
    return f"Decided: {progress.decision}" + (f" ({progress.reason})" if progress.reason else "")


def _routing(progress: AskProgress, human: str) -> Sequence[dict[str, Any]]:
    people = []
    for person in progress.people:
        words = {
            "candidate": "eligible, not asked",
            "excluded": f"passed over ({person.rule}): {person.detail}",
            "asked": "asked, no response yet",
            "unreachable": "not reachable: no channel the gateway serves",
            "declined": "declined",
            "escalated": person.detail or "missed their SLA",
            "withdrawn": person.detail or "withdrawn",
            "decided": {"approve": "approved", "reject": "rejected"}.get(
                person.decision or "", "answered"
            ),
        }.get(person.status, person.status)
        if person.delegate_of and person.status != "excluded":
            words = f"delegate of {person.delegate_of}; {words}"
        people.append(
            {"id": person.id, "status": person.status, "words": words, "you": person.id == human}
        )
    return people
