"""The undo of a plan version: its corrections' inverses, as a checked plan (docs/spec.md §22).

A write that takes part in a hatp transaction as a compensate-tier branch
promises, when it votes yes, that it can be undone. The undo is derived
from the approved plan alone, never written by an agent: each correction's
:meth:`~hatp.writes.Correction.inverse`, last correction first, starting
from the plan's postcondition. It is a write plan like any other (same
plan id and version, its own digest), checked by the same rules
([WRITE-ALLOWLIST], [WRITE-PARAMS], [WRITE-SNAPSHOT], [WRITE-POSTCONDITION]),
and its snapshot is the plan's postcondition: the undo runs only while the
records are still what the plan left.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from hatp.writes._corrections import Correction, Registry
from hatp.writes._plan import CheckedPlan, check_plan, expected_state
from hatp.writes._records import RecordName

__all__ = ["undo_plan"]


def undo_plan(checked: CheckedPlan, registry: Registry) -> CheckedPlan:
    """The plan that undoes ``checked``: its inverses, on the state it leaves.

    Raises:
        ValueError: a correction has no inverse, or an inverse names a type
            not on the allowlist, or touches a record the plan does not.
        WritePlanInvalid: the undo breaks a plan rule (its params do not fit,
            or an inverse cannot be made to the state the plan leaves).
    """
    plan = checked.plan
    items: list[tuple[str, dict[str, Any]]] = []
    for correction, params, before in reversed(_befores(checked)):
        inverse = correction.inverse(params, before)
        if inverse is None:
            raise ValueError(f"correction {correction.name} cannot be undone: it has no inverse")
        items.extend(inverse)
    steps: list[tuple[Correction[Any], BaseModel]] = []
    touched: set[RecordName] = set()
    for kind, params_doc in items:
        inverse_type = registry.correction(kind)
        if inverse_type is None:
            raise ValueError(f"an inverse names correction type {kind!r}, not on the allowlist")
        parsed = inverse_type.params.model_validate_json(json.dumps(params_doc), strict=True)
        steps.append((inverse_type, parsed))
        touched.update(inverse_type.records(parsed))
    if stray := sorted(touched - set(plan.postcondition)):
        raise ValueError(f"an inverse touches records the plan does not: {', '.join(stray)}")
    snapshot = {name: plan.postcondition[name] for name in sorted(touched)}
    doc = {
        **plan.to_wire(),
        "corrections": [{"type": kind, "params": params} for kind, params in items],
        "snapshot": snapshot,
        "postcondition": expected_state(steps, snapshot),
        "note": f"the undo of plan {plan.plan_id} version {plan.version} ({checked.digest})",
    }
    return check_plan(doc, registry)


def _befores(
    checked: CheckedPlan,
) -> list[tuple[Correction[Any], BaseModel, dict[RecordName, dict[str, Any] | None]]]:
    """Each step with the state of its records just before it, from the snapshot on."""
    state: dict[RecordName, dict[str, Any] | None] = {
        name: None if columns is None else dict(columns)
        for name, columns in checked.plan.snapshot.items()
    }
    out = []
    for correction, params in checked.steps:
        before = {name: _copy(state.get(name)) for name in correction.records(params)}
        out.append((correction, params, before))
        for name, columns in correction.expect(
            params, {k: _copy(v) for k, v in before.items()}
        ).items():
            state[name] = _copy(columns)
    return out


def _copy(columns: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if columns is None else dict(columns)
