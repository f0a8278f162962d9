"""A step's effect preview as a person is shown it: the participant's signed words.

Every step's participant signs, in its yes vote and its quote, what
committing the step will change (an :class:`~hatp.model.EffectPreview`,
docs/spec.md §13), and in holds-first and approval-first mode the
coordinator puts each preview into the terms people approve with the plan
([COORD-PREVIEW]). :func:`preview_view` turns
one preview into what every channel shows under its step, under
:data:`STEP_PREVIEW_LABEL` ([GW-VIEW-PREVIEW]): words the participant
signed, set apart from the agent's summary and from the step's arguments
(both the agent's choice). A write plan's approver is shown its preview the
same way, under :data:`WRITE_PREVIEW_LABEL` (§22 [WRITE-PREVIEW]): hatp
computed it from the plan, and no participant has signed it yet.

A :class:`PreviewView` is rendered from the preview's structure, never
taken as one piece of text: the certainty in the gateway's words, each
reading differently (:data:`CERTAINTY_WORDS`; a ``predicted`` preview's
bound as "at most …"), the participant's one-line summary, and each change
as one line (resource, kind, field before → after, amount, when). Every
string in it is escaped as a step's arguments are (a character that is not
printable becomes a JSON escape, so nothing can add, hide or forge a line,
[GW-VIEW-ESCAPE]) and bounded ([GW-VIEW-BOUNDED]): texts past their wire
limits are cut, ``before`` and ``after`` are one-line JSON cut after
:data:`MAX_VALUE_TEXT` characters, and at most :data:`MAX_SHOWN_CHANGES`
changes (and :data:`~hatp.gateway._shown_json.MAX_TEXT` characters of them)
are shown; whatever was left out is said in :attr:`PreviewView.note`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hatp.clock import format_time, parse_time
from hatp.gateway._amounts import format_amount
from hatp.gateway._shown_json import MAX_TEXT, escape_line, shown_json
from hatp.model import Certainty, Change, EffectPreview

__all__ = [
    "CERTAINTY_WORDS",
    "MAX_SHOWN_CHANGES",
    "MAX_VALUE_TEXT",
    "NO_CHANGES",
    "STEP_PREVIEW_LABEL",
    "WRITE_PREVIEW_LABEL",
    "PreviewView",
    "preview_lines",
    "preview_view",
]

#: The label above a step's effect preview: what its participant signed, not the agent's words.
STEP_PREVIEW_LABEL = (
    "What it will change (the participant's signed preview, from its own dry run; "
    "you approve it with the plan):"
)
#: The label above a write plan's preview (§22 [WRITE-PREVIEW]): hatp's own computation from
#: the plan, which no participant has signed yet.
WRITE_PREVIEW_LABEL = (
    "What it will change (computed by hatp from the plan's snapshot of the live records; "
    "execution refuses any drift from it):"
)
#: What each certainty means to the person deciding: three readings that cannot be confused.
CERTAINTY_WORDS = {
    Certainty.EXACT: "will do exactly this",
    Certainty.PREDICTED: "expects, may differ",
    Certainty.NONE: "cannot say what it will change",
}
#: What a preview that is not ``none`` and lists no change is shown as, in the gateway's words.
NO_CHANGES = "no changes listed"
#: Changes of one preview shown; the rest are counted in the note.
MAX_SHOWN_CHANGES = 20
#: Characters of one ``before`` or ``after`` value shown (one-line JSON).
MAX_VALUE_TEXT = 160
#: Characters of the texts a preview carries (the wire's own limits, §13).
_MAX_SUMMARY = 500
_MAX_RESOURCE = 256
_MAX_NAME = 128


@dataclass(frozen=True, slots=True)
class PreviewView:
    """One step's effect preview as every channel shows it.

    ``summary`` and each of ``changes`` are one printable line each, escaped
    and bounded; ``bound`` is a ``predicted`` preview's bound, formatted
    (``None`` for any other certainty, where a bound means nothing);
    ``note`` says what was left out, or is ``None``.
    """

    certainty: Certainty
    summary: str
    changes: tuple[str, ...]
    bound: str | None = None
    note: str | None = None

    @property
    def words(self) -> str:
        """What the certainty means: ``"expects, may differ; at most 750 USD"``."""
        words = CERTAINTY_WORDS[self.certainty]
        return words if self.bound is None else f"{words}; at most {self.bound}"

    @property
    def certainty_text(self) -> str:
        """``"predicted (expects, may differ; at most 750 USD)"``."""
        return f"{self.certainty.value} ({self.words})"


@dataclass(slots=True)
class _Cuts:
    """What bounding left out, counted for the note."""

    texts: int = 0
    values: int = 0
    changes: int = 0

    def note(self) -> str | None:
        said = []
        if self.texts:
            said.append(f"{_count(self.texts, 'text')} cut at the preview's limits")
        if self.values:
            said.append(
                f"{_count(self.values, 'value')} shown in part (at most "
                f"{MAX_VALUE_TEXT:,} characters of each)"
            )
        if self.changes:
            said.append(
                f"{_count(self.changes, 'more change')} not shown (at most "
                f"{MAX_SHOWN_CHANGES} of one preview, {MAX_TEXT:,} characters of them)"
            )
        return "Shown in part: " + "; ".join(said) + "." if said else None


def preview_view(preview: EffectPreview) -> PreviewView:
    """Return ``preview`` as a person is shown it: its certainty, summary and changes,
    escaped and bounded. [GW-VIEW-PREVIEW] [GW-VIEW-ESCAPE] [GW-VIEW-BOUNDED]

    Never raises: whatever the participant signed is shown, in part if it is long.
    """
    cuts = _Cuts()
    lines: list[str] = []
    size = 0
    for number, change in enumerate(preview.changes):
        mine = _Cuts()  # counted only if the line is shown
        line = _change_line(change, mine)
        if number == MAX_SHOWN_CHANGES or (lines and size + len(line) > MAX_TEXT):
            cuts.changes = len(preview.changes) - number
            break
        lines.append(line)
        size += len(line)
        cuts.texts += mine.texts
        cuts.values += mine.values
    bound = preview.bound
    return PreviewView(
        certainty=preview.certainty,
        summary=_text(preview.summary, _MAX_SUMMARY, cuts),
        changes=tuple(lines),
        bound=None
        if bound is None or preview.certainty is not Certainty.PREDICTED
        else format_amount(bound.decimal, bound.currency),
        note=cuts.note(),
    )


def preview_lines(preview: PreviewView, bar: str, *, label: str = STEP_PREVIEW_LABEL) -> list[str]:
    """The preview as lines of text under ``label`` (whose words they are): the certainty
    in the gateway's words, then the summary and changes, each behind ``bar``, then the
    note. [GW-VIEW-PREVIEW]"""
    lines = [label, f"Certainty: {preview.certainty_text}"]
    if preview.summary:
        lines.append(bar + preview.summary)
    lines.extend(f"{bar}- {change}" for change in preview.changes)
    if not preview.changes and preview.certainty is not Certainty.NONE:
        lines.append(NO_CHANGES)
    if preview.note is not None:
        lines.append(preview.note)
    return lines


def _change_line(change: Change, cuts: _Cuts) -> str:
    """``flight LH400 seat 14C: ticket, traveller null → "human://…", 420 USD``."""
    parts = [
        f"{_text(change.resource, _MAX_RESOURCE, cuts)}: {_text(change.kind, _MAX_NAME, cuts)}"
    ]
    if change.field is not None or change.before is not None or change.after is not None:
        field = "" if change.field is None else _text(change.field, _MAX_NAME, cuts) + " "
        parts.append(f"{field}{_value(change.before, cuts)} → {_value(change.after, cuts)}")
    if change.amount is not None:
        parts.append(format_amount(change.amount.decimal, change.amount.currency))
    if change.at is not None:
        parts.append(f"at {format_time(parse_time(change.at))} (UTC)")
    return ", ".join(parts)


def _text(text: str, limit: int, cuts: _Cuts) -> str:
    """``text`` cut at ``limit`` characters, then escaped to one printable line."""
    if len(text) > limit:
        cuts.texts += 1
        text = f"{text[:limit]}… ({len(text) - limit:,} more characters)"
    return escape_line(text)


def _value(value: Any, cuts: _Cuts) -> str:
    """A ``before`` or ``after`` value as one line of JSON, escaped and bounded."""
    shown = shown_json(value, one_line=True, max_text=MAX_VALUE_TEXT)
    if not shown.whole:
        cuts.values += 1
    return shown.text


def _count(number: int, one: str) -> str:
    return f"{number:,} {one if number == 1 else one + 's'}"
