"""The example system of record for the write tests: the demo's stock table and corrections.

The table, its record set, ``adjust_stock`` / ``set_unit`` and the plain
row helpers are the write demo's (:mod:`hatp.demo._inventory`): the tests
correct the same system of record the demo shows. Here are the test-only
parts. :func:`stock` creates the table in a store and seeds rows; :func:`make_plan`
drafts a plan from the live rows (snapshot read now, postcondition worked out
by the corrections' ``expect``), as an agent would; :func:`plan_doc` builds a
plan document from parts, for plans that are meant to be wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hatp.demo._inventory import (
    INVENTORY,
    AdjustParams,
    AdjustStock,
    SetUnit,
    UnitParams,
    inventory,
    live,
    metadata,
    record,
    registry,
    stock,
    touch,
)
from hatp.store import Store
from hatp.version import PROTOCOL_VERSION
from hatp.writes import draft_plan, expected_state, read_records

__all__ = [
    "AGENT",
    "INVENTORY",
    "OWNER",
    "AdjustParams",
    "AdjustStock",
    "SetUnit",
    "UnitParams",
    "inventory",
    "live",
    "make_plan",
    "metadata",
    "offline_plan",
    "plan_doc",
    "record",
    "registry",
    "snapshot_of",
    "stock",
    "touch",
]

#: The agent that proposes plans, and the person it acts for.
AGENT = "agent:stock-bot"
OWNER = "human:dana"


def snapshot_of(store: Store, skus: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """The live records of these skus, as a snapshot holds them."""
    with store.transaction() as conn:
        return read_records(conn, {"inventory": INVENTORY}, [record(s) for s in skus], lock=False)


def plan_doc(
    plan_id: str,
    version: int,
    corrections: Sequence[tuple[str, Mapping[str, Any]]],
    snapshot: Mapping[str, Any],
    postcondition: Mapping[str, Any],
    proposed_by: str = AGENT,
    on_behalf_of: str = OWNER,
    note: str | None = None,
) -> dict[str, Any]:
    """A WritePlan document from its parts, exactly as given (nothing is checked)."""
    return {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "write-plan",
        "planId": plan_id,
        "version": version,
        "proposedBy": proposed_by,
        "onBehalfOf": on_behalf_of,
        "corrections": [{"type": t, "params": dict(p)} for t, p in corrections],
        "snapshot": dict(snapshot),
        "postcondition": dict(postcondition),
        "note": note,
    }


def offline_plan(
    plan_id: str,
    version: int,
    corrections: Sequence[tuple[str, Mapping[str, Any]]],
    rows: Mapping[str, tuple[int, str]],
    proposed_by: str = AGENT,
    on_behalf_of: str = OWNER,
    note: str | None = None,
) -> dict[str, Any]:
    """A plan over rows given here, not read from a store (each at version 1).

    The snapshot holds the touched skus of ``rows`` (``None`` for a touched
    sku not in ``rows``); the postcondition is worked out with ``expect``.
    """
    reg = registry()
    steps = []
    for kind, params in corrections:
        correction = reg.correction(kind)
        assert correction is not None, kind
        steps.append((correction, correction.params.model_validate(dict(params))))
    touched = sorted({r for c, p in steps for r in c.records(p)})
    snapshot: dict[str, Any] = {}
    for name in touched:
        sku = name.partition("/")[2]
        row = rows.get(sku)
        snapshot[name] = None if row is None else {"on_hand": row[0], "unit": row[1], "version": 1}
    after = expected_state(steps, snapshot)
    return plan_doc(plan_id, version, corrections, snapshot, after, proposed_by, on_behalf_of, note)


def make_plan(
    store: Store,
    plan_id: str,
    version: int,
    corrections: Sequence[tuple[str, Mapping[str, Any]]],
    proposed_by: str = AGENT,
    on_behalf_of: str = OWNER,
    note: str | None = None,
) -> dict[str, Any]:
    """Draft a plan from the live rows: snapshot read now, postcondition from ``expect``."""
    with store.transaction() as conn:
        return draft_plan(
            conn,
            registry(),
            plan_id=plan_id,
            version=version,
            corrections=corrections,
            proposed_by=proposed_by,
            on_behalf_of=on_behalf_of,
            note=note,
        )
