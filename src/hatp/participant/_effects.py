"""Writing effect previews and observed effects: a small typed builder (§13 [PART-PREVIEW]).

An operation says what its commit will change from its own data, in its dry
run, and what it changed, at commit::

    seat = f"flight {flight} seat {number}"
    Prepared(
        preview=preview(
            Certainty.EXACT,
            [change(seat, "hold", field="holder", before=None, after=traveller)],
        ),
        ...
    )
    Committed(observed=observed([change(seat, "book", field="holder", after=traveller)]))

The one-line summary is rendered from the changes unless the operation
words it itself. An operation that gives no preview is signed as certainty
``none`` (:func:`no_preview`), never a made-up one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hatp.clock import format_time
from hatp.model import Amount, Certainty, Change, EffectPreview, ObservedEffect

__all__ = ["change", "no_preview", "observed", "preview", "render"]

#: The longest summary a preview carries (the model's limit).
_SUMMARY_LENGTH = 500


def change(
    resource: str,
    kind: str,
    *,
    field: str | None = None,
    before: Any = None,
    after: Any = None,
    amount: Amount | None = None,
    at: datetime | None = None,
) -> Change:
    """One change to ``resource``: ``kind`` (``create``, ``update``, ``charge``…), the
    ``field`` that changes from ``before`` to ``after``, the ``amount`` moved, and
    when (``at``, aware).

    Raises:
        ValidationError: a member does not fit (an empty resource, a kind that is
            not a name, a value that is not JSON).
        ValueError: ``at`` is naive.
    """
    return Change.model_validate(
        {
            "resource": resource,
            "kind": kind,
            "field": field,
            "before": before,
            "after": after,
            "amount": None if amount is None else amount.to_wire(),
            "at": None if at is None else format_time(at),
        }
    )


def preview(
    certainty: Certainty,
    changes: Sequence[Change],
    *,
    summary: str | None = None,
    bound: Amount | None = None,
) -> EffectPreview:
    """What commit will change: ``changes``, how surely, and for a ``predicted`` preview
    the most it may move in total (``bound``, where the participant can say).

    Raises:
        ValueError: a ``bound`` on a preview that is not ``predicted`` (an exact one
            has no room; one that cannot say has nothing to bound).
    """
    if bound is not None and certainty is not Certainty.PREDICTED:
        raise ValueError(f"only a predicted preview has a bound, not a {certainty.value} one")
    return EffectPreview(
        certainty=certainty,
        summary=_short(summary if summary is not None else render(changes)),
        changes=list(changes),
        bound=bound,
    )


def observed(changes: Sequence[Change], *, summary: str | None = None) -> ObservedEffect:
    """What a commit changed, in the structure of its preview."""
    return ObservedEffect(
        summary=_short(summary if summary is not None else render(changes)),
        changes=list(changes),
    )


def no_preview(operation: object) -> EffectPreview:
    """The preview of an operation that gives none: certainty ``none``, no changes."""
    name = getattr(operation, "name", type(operation).__name__)
    return EffectPreview(
        certainty=Certainty.NONE,
        summary=f"{name} gives no preview of what it will change",
        changes=[],
    )


def render(changes: Sequence[Change]) -> str:
    """One line from the changes, e.g. ``hold seat 14C: holder (none) → alice``."""
    return "; ".join(_line(c) for c in changes) or "no change"


def _line(c: Change) -> str:
    words = f"{c.kind} {c.resource}"
    if c.field is not None:
        words += f": {c.field} {_value(c.before)} → {_value(c.after)}"
    elif c.after is not None:
        words += f": {_value(c.after)}"
    if c.amount is not None:
        words += f" {c.amount}"
    if c.at is not None:
        words += f" at {c.at}"
    return words


def _value(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _short(text: str) -> str:
    return text if len(text) <= _SUMMARY_LENGTH else text[: _SUMMARY_LENGTH - 1] + "…"
