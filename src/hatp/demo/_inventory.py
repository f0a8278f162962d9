"""The write demo's system of record: a stock table, two correction types, a policy.

``inventory`` (sku, on_hand, unit, version) is the user's own table an agent
corrects; :data:`INVENTORY` puts it on the allowlist as the record set
``inventory`` (records ``inventory/<sku>``). :class:`AdjustStock` adds
``delta`` to a row's ``on_hand`` (never below zero); :class:`SetUnit` changes
its ``unit``; both bump ``version``; each undoes itself (``inverse``: the
opposite delta, the unit before). :func:`registry` is the allowlist of
both; :data:`POLICY` lets small stock adjustments run without a person and
sends every other write to one.

:func:`stock`, :func:`live` and :func:`touch` are the table's plain SQL side:
seed rows, read them all, and change one behind a plan's back (drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from hatp.store import Store
from hatp.writes import Correction, Policy, RecordSet, Registry, TypeRule, Verdict

__all__ = [
    "INVENTORY",
    "POLICY",
    "AdjustParams",
    "AdjustStock",
    "SetUnit",
    "UnitParams",
    "inventory",
    "live",
    "metadata",
    "record",
    "registry",
    "stock",
    "touch",
]

metadata = sa.MetaData()
inventory = sa.Table(
    "inventory",
    metadata,
    sa.Column("sku", sa.String(64), primary_key=True),
    sa.Column("on_hand", sa.Integer, nullable=False),
    sa.Column("unit", sa.String(16), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
)
INVENTORY = RecordSet("inventory", inventory, "sku", ("on_hand", "unit", "version"))

_PARAMS = ConfigDict(strict=True, extra="forbid", frozen=True)
_SKU = r"^SKU-[0-9]{1,8}$"


class AdjustParams(BaseModel):
    """``adjust_stock``'s params: which row, by how much, and why (shown to the approver)."""

    model_config = _PARAMS

    sku: str = Field(pattern=_SKU)
    delta: int = Field(ge=-1_000_000, le=1_000_000)
    reason: str = Field(min_length=1, max_length=200)


class UnitParams(BaseModel):
    """``set_unit``'s params: which row, and the unit it counts in from now on."""

    model_config = _PARAMS

    sku: str = Field(pattern=_SKU)
    unit: Literal["each", "box", "case", "kg"]


def record(sku: str) -> str:
    """The record name of a row: ``inventory/<sku>``."""
    return INVENTORY.record(sku)


def _row(before: Mapping[str, dict[str, Any] | None], sku: str) -> dict[str, Any]:
    row = before[record(sku)]
    if row is None:
        raise ValueError(f"{sku} is not in the inventory")
    return row


class AdjustStock(Correction[AdjustParams]):
    """``adjust_stock(sku, delta, reason)``: on_hand += delta, never below zero."""

    name = "adjust_stock"
    params = AdjustParams

    def records(self, params: AdjustParams) -> list[str]:
        return [record(params.sku)]

    def expect(
        self, params: AdjustParams, before: Mapping[str, dict[str, Any] | None]
    ) -> dict[str, dict[str, Any] | None]:
        row = _row(before, params.sku)
        on_hand = row["on_hand"] + params.delta
        if on_hand < 0:
            raise ValueError(f"{params.sku} would have {on_hand} on hand")
        return {record(params.sku): {**row, "on_hand": on_hand, "version": row["version"] + 1}}

    def apply(
        self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: AdjustParams
    ) -> None:
        table = sets["inventory"].table
        conn.execute(
            table.update()
            .where(table.c.sku == params.sku)
            .values(on_hand=table.c.on_hand + params.delta, version=table.c.version + 1)
        )

    def size(self, params: AdjustParams) -> int:
        return abs(params.delta)

    def inverse(
        self, params: AdjustParams, before: Mapping[str, dict[str, Any] | None]
    ) -> list[tuple[str, dict[str, Any]]]:
        reason = f"undo: {params.reason}"[:200]
        return [("adjust_stock", {"sku": params.sku, "delta": -params.delta, "reason": reason})]


class SetUnit(Correction[UnitParams]):
    """``set_unit(sku, unit)``: the unit the row counts in."""

    name = "set_unit"
    params = UnitParams

    def records(self, params: UnitParams) -> list[str]:
        return [record(params.sku)]

    def expect(
        self, params: UnitParams, before: Mapping[str, dict[str, Any] | None]
    ) -> dict[str, dict[str, Any] | None]:
        row = _row(before, params.sku)
        return {record(params.sku): {**row, "unit": params.unit, "version": row["version"] + 1}}

    def apply(self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: UnitParams) -> None:
        table = sets["inventory"].table
        conn.execute(
            table.update()
            .where(table.c.sku == params.sku)
            .values(unit=params.unit, version=table.c.version + 1)
        )

    def inverse(
        self, params: UnitParams, before: Mapping[str, dict[str, Any] | None]
    ) -> list[tuple[str, dict[str, Any]]] | None:
        row = before[record(params.sku)]
        return None if row is None else [("set_unit", {"sku": params.sku, "unit": row["unit"]})]


#: Stock adjustments of 2 units or fewer run without a person; a bigger one,
#: and any change of unit, needs one; any other type is denied.
POLICY = Policy(
    {
        "adjust_stock": TypeRule(Verdict.ALLOW, allow_up_to=2),
        "set_unit": TypeRule(Verdict.REQUIRE_APPROVAL),
    },
    default=Verdict.DENY,
)


def registry() -> Registry:
    """The allowlist: the inventory record set and both corrections."""
    return Registry([INVENTORY], [AdjustStock(), SetUnit()])


def stock(store: Store, rows: Mapping[str, tuple[int, str]]) -> None:
    """Create the table if missing; insert ``{sku: (on_hand, unit)}`` rows at version 1."""
    with store.transaction() as conn:
        metadata.create_all(conn)
        if rows:
            conn.execute(
                inventory.insert(),
                [
                    {"sku": sku, "on_hand": on_hand, "unit": unit, "version": 1}
                    for sku, (on_hand, unit) in rows.items()
                ],
            )


def live(store: Store) -> dict[str, tuple[int, str, int]]:
    """Every row now: ``{sku: (on_hand, unit, version)}``."""
    with store.transaction() as conn:
        rows = conn.execute(sa.select(inventory).order_by(inventory.c.sku)).all()
    return {row.sku: (row.on_hand, row.unit, row.version) for row in rows}


def touch(store: Store, sku: str, **values: Any) -> None:
    """Change a row directly, as someone else's write would (a plan's records drift)."""
    with store.transaction() as conn:
        conn.execute(inventory.update().where(inventory.c.sku == sku).values(**values))
