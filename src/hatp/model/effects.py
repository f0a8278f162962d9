"""Effect previews and observed effects: what a step will change, and what it changed (§13).

At prepare (and at quote) a participant's own dry run says what committing
the step will change: an :class:`EffectPreview`, a list of :class:`Change` s
with a one-line summary rendered from them and a :class:`Certainty`:
``exact`` (commit does exactly this, guarded by preconditions or a hold),
``predicted`` (a best estimate; commit may differ, within ``bound`` where
the participant can state one) or ``none`` (it cannot say). The commit
receipt carries the :class:`ObservedEffect` in the same structure, and
:func:`effect_verdict` compares the two the way the coordinator and the
offline verifier both do. Both are signed in the participant's receipts.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import Field

from hatp.model._base import JsonValue, WireModel, WireTime
from hatp.model.plan import Amount, Name, PreviewMinimum

__all__ = [
    "MAX_CHANGES",
    "Certainty",
    "Change",
    "EffectPreview",
    "EffectVerdict",
    "ObservedEffect",
    "effect_verdict",
    "meets",
]

#: The most changes one preview or observed effect lists.
MAX_CHANGES = 64


class Certainty(StrEnum):
    """How sure a participant is that commit will do what its preview says."""

    EXACT = "exact"
    PREDICTED = "predicted"
    NONE = "none"

    @property
    def rank(self) -> int:
        """``none`` 0 < ``predicted`` 1 < ``exact`` 2: compare against a policy's minimum."""
        return {Certainty.NONE: 0, Certainty.PREDICTED: 1, Certainty.EXACT: 2}[self]


class Change(WireModel):
    """One change a step makes to the participant's own data.

    ``resource`` names what changes in the participant's own words
    (``flight LH400 2026-12-10 seat 14C``); ``kind`` what happens to it
    (``create``, ``update``, ``delete``, ``charge``, ``hold``, ``send``, …);
    ``field`` the field that changes, with ``before`` and ``after`` where they
    apply; ``amount`` the money moved, if any; ``at`` when it takes effect,
    if that is part of the change.
    """

    resource: str = Field(min_length=1, max_length=256)
    kind: Name
    field: str | None = Field(default=None, max_length=128)
    before: JsonValue = None
    after: JsonValue = None
    amount: Amount | None = None
    at: WireTime | None = None


class EffectPreview(WireModel):
    """What committing one step will change, as the participant's dry run saw it."""

    certainty: Certainty = Field(strict=False)
    summary: str = Field(max_length=500, description="one line, rendered from the changes")
    changes: list[Change] = Field(default_factory=list, max_length=MAX_CHANGES)
    bound: Amount | None = Field(
        default=None,
        description="predicted only: the most the step may move in total, in this currency",
    )


class ObservedEffect(WireModel):
    """What a commit changed, in the structure of its preview."""

    summary: str = Field(max_length=500)
    changes: list[Change] = Field(default_factory=list, max_length=MAX_CHANGES)


class EffectVerdict(StrEnum):
    """How a committed step's observed effect compares with its preview."""

    AS_PREVIEWED = "as-previewed"  # the same changes
    WITHIN_BOUNDS = "within-bounds"  # predicted: other amounts, none above the bound
    DIFFERS = "differs"  # anything else: flagged in the record, never fixed automatically
    UNCHECKED = "unchecked"  # the preview said nothing (certainty none, or no preview)


def meets(preview: EffectPreview | None, minimum: PreviewMinimum) -> bool:
    """Whether ``preview`` says at least what ``minimum`` asks [PLAN-PREVIEWS]: ``none``
    always; ``predicted`` a predicted or exact one; ``bounded`` an exact one, or a
    predicted one with a bound; ``exact`` an exact one."""
    if minimum == "none":
        return True
    if preview is None:
        return False
    certainty, bounded = preview.certainty, preview.bound is not None
    if minimum == "predicted":
        return certainty in (Certainty.PREDICTED, Certainty.EXACT)
    if minimum == "bounded":
        return certainty is Certainty.EXACT or (certainty is Certainty.PREDICTED and bounded)
    return certainty is Certainty.EXACT


def effect_verdict(preview: EffectPreview | None, observed: ObservedEffect | None) -> EffectVerdict:
    """Compare what a step committed with what its preview said [TXN-EFFECT].

    - no preview, or certainty ``none``: ``unchecked``;
    - the same changes (member for member): ``as-previewed``;
    - ``predicted`` with a ``bound``, and the changes the same but for their
      amounts, every amount in the bound's currency and their total no more
      than it: ``within-bounds``;
    - anything else, a commit that observed nothing included: ``differs``.
    """
    if preview is None or preview.certainty is Certainty.NONE:
        return EffectVerdict.UNCHECKED
    if observed is None:
        return EffectVerdict.DIFFERS
    # Equal models have equal wire forms: the dumps are needed only when they differ.
    if preview.changes == observed.changes or _wire(preview.changes) == _wire(observed.changes):
        return EffectVerdict.AS_PREVIEWED
    bound = preview.bound
    if preview.certainty is not Certainty.PREDICTED or bound is None:
        return EffectVerdict.DIFFERS
    if _wire(preview.changes, amounts=False) != _wire(observed.changes, amounts=False):
        return EffectVerdict.DIFFERS
    amounts = [c.amount for c in observed.changes if c.amount is not None]
    if any(a.currency != bound.currency for a in amounts):
        return EffectVerdict.DIFFERS
    if sum((a.decimal for a in amounts), Decimal(0)) > bound.decimal:
        return EffectVerdict.DIFFERS
    return EffectVerdict.WITHIN_BOUNDS


def _wire(changes: Sequence[Change], *, amounts: bool = True) -> list[dict[str, Any]]:
    exclude = None if amounts else {"amount"}
    return [c.model_dump(mode="json", by_alias=True, exclude=exclude) for c in changes]
