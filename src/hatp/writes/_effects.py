"""A write plan's effect, as an effect preview and an observed effect (§13, §22).

:func:`plan_preview` says what a plan version will change: each record it
touches, column by column, from its snapshot to its postcondition (an
``update``; a ``create`` or ``delete`` for a row that appears or goes). It
is ``exact``, since execution refuses any drift from the snapshot
[WRITE-DRIFT] and verifies the postcondition [WRITE-VERIFY]. The write
participant signs it in its yes vote, and :meth:`Writes.propose
<hatp.writes.Writes.propose>` hands the same to the approver
[WRITE-PREVIEW], from the same stored plan, so the two cannot differ.
:func:`observed_write` says what an execution changed, in the same
structure, from the snapshot it checked to the records it left.

A preview lists at most :data:`~hatp.model.effects.MAX_CHANGES` changes:
past that many columns, one change per record; past that many records (or
with a record name longer than a change's resource), none, and ``None`` is
returned: the caller says "cannot say", never a made-up preview.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from hatp.model import Certainty, Change, EffectPreview, ObservedEffect
from hatp.model.effects import MAX_CHANGES
from hatp.participant import change, observed, preview
from hatp.writes._plan import WritePlan
from hatp.writes._records import RecordName
from hatp.writes._steps import WriteOutcome

__all__ = ["observed_write", "plan_preview"]

_log = logging.getLogger(__name__)

#: A state as a plan holds it: each record's columns, or ``None`` for no row.
_State = Mapping[RecordName, Mapping[str, Any] | None]


def plan_preview(plan: WritePlan) -> EffectPreview | None:
    """What executing ``plan`` will change, ``exact``; ``None`` if it does not fit a
    preview (more records than one lists, or a record name too long for one).

    Pass the plan as stored (read back from the write tables): its snapshot's
    column order is the stored one, so every caller previews it alike.
    """
    changes = _changes(plan.snapshot, plan.postcondition)
    return None if changes is None else preview(Certainty.EXACT, changes)


def observed_write(snapshot: _State, outcome: WriteOutcome) -> ObservedEffect | None:
    """What an execution changed: from ``snapshot`` (the one it checked) to the records
    its key's result holds; ``None`` if they do not fit, or the result holds none."""
    after = outcome.result.get("records")
    if not isinstance(after, Mapping):
        _log.warning("write key %s holds no records after the write: nothing observed", outcome.key)
        return None
    changes = _changes(snapshot, after)
    return None if changes is None else observed(changes)


def _changes(before: _State, after: _State) -> list[Change] | None:
    """Each record's change, column by column (a change per record when there are more
    columns than a preview lists); ``None`` if even the records do not fit."""
    changed = [
        record
        for record in sorted(set(before) | set(after))
        if _typed(before.get(record)) != _typed(after.get(record))
    ]
    try:
        columns = [c for record in changed for c in _columns(record, before, after)]
        if len(columns) <= MAX_CHANGES:
            return columns
        if len(changed) <= MAX_CHANGES:
            return [_row(record, before.get(record), after.get(record)) for record in changed]
    except ValidationError:
        _log.warning("a write's changes do not fit a preview (a record name too long)")
        return None
    _log.info("a write changes %d records, more than a preview lists: none given", len(changed))
    return None


def _columns(record: RecordName, before: _State, after: _State) -> list[Change]:
    old_row, new_row = before.get(record), after.get(record)
    kind = _kind(old_row, new_row)
    # The snapshot's column order (one stored plan at propose, prepare and commit alike),
    # then a new row's columns by name: the records after are read back from stored JSON.
    names = list(old_row or {}) + sorted(c for c in new_row or {} if c not in (old_row or {}))
    changes = []
    for name in names:
        old = None if old_row is None else old_row.get(name)
        new = None if new_row is None else new_row.get(name)
        if kind != "update" or _typed(old) != _typed(new):
            changes.append(change(record, kind, field=name, before=old, after=new))
    return changes


def _row(
    record: RecordName, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
) -> Change:
    return change(
        record,
        _kind(old, new),
        before=None if old is None else dict(old),
        after=None if new is None else dict(new),
    )


def _kind(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str:
    return "create" if old is None else "delete" if new is None else "update"


def _typed(value: Any) -> Any:
    # Equal with their types: a plan's states tell 1 from True, as the records do.
    if isinstance(value, Mapping):
        return {name: _typed(v) for name, v in value.items()}
    return (type(value).__name__, value)
