"""Record sets, correction types, the allowlist, and reading records on both databases."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from hatp.store import Store
from hatp.writes import (
    Change,
    Correction,
    RecordSet,
    Registry,
    check_plan,
    diff,
    read_records,
)
from hatp.writes._records import json_value, same_state, split_record
from writes.inventory import (
    INVENTORY,
    AdjustStock,
    SetUnit,
    inventory,
    make_plan,
    metadata,
    registry,
    stock,
)

# A second system of record: prices, keyed by an integer id, with a Decimal column.
prices_metadata = sa.MetaData()
prices = sa.Table(
    "prices",
    prices_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("amount", sa.Numeric(12, 2), nullable=False),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.Column("ratio", sa.Float, nullable=True),
)
PRICES = RecordSet("prices", prices, "id", ("amount", "active"))


class NewPrice(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    id: int
    amount: Decimal


class AddPrice(Correction[NewPrice]):
    """Insert a price row that is not there yet."""

    name = "add_price"
    params = NewPrice

    def records(self, params: NewPrice) -> list[str]:
        return [PRICES.record(params.id)]

    def expect(
        self, params: NewPrice, before: Mapping[str, dict[str, Any] | None]
    ) -> dict[str, dict[str, Any] | None]:
        name = PRICES.record(params.id)
        if before[name] is not None:
            raise ValueError(f"price {params.id} is there already")
        return {name: {"amount": str(params.amount), "active": True}}

    def apply(self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: NewPrice) -> None:
        conn.execute(
            sets["prices"].table.insert().values(id=params.id, amount=params.amount, active=True)
        )

    def size(self, params: NewPrice) -> Decimal:
        return params.amount


def make_prices(store: Store) -> None:
    with store.transaction() as conn:
        prices_metadata.create_all(conn)
        conn.execute(prices.insert().values(id=7, amount=Decimal("19.90"), active=False, ratio=0.5))


# --- record sets and the allowlist -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key", "columns", "why"),
    [
        ("Inventory", "sku", ("on_hand",), "name"),
        ("inventory", "nope", ("on_hand",), "no column nope"),
        ("inventory", "unit", ("on_hand",), "not unique"),
        ("inventory", "sku", (), "columns"),
        ("inventory", "sku", ("on_hand", "on_hand"), "columns"),
        ("inventory", "sku", ("price",), "no column price"),
    ],
)
def test_a_record_set_must_name_real_columns_and_a_unique_key(
    name: str, key: str, columns: tuple[str, ...], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        RecordSet(name, inventory, key, columns)


def test_a_record_is_named_by_its_set_and_key() -> None:
    assert INVENTORY.record("SKU-1") == "inventory/SKU-1"
    assert split_record("inventory/SKU-1") == ("inventory", "SKU-1")
    assert split_record("files/a/b") == ("files", "a/b")
    for bad in ("inventory", "/SKU-1", "inventory/", ""):
        with pytest.raises(ValueError):
            split_record(bad)
    assert PRICES.key_value("42") == 42
    for bad in ("4.2", "042", "x", ""):
        with pytest.raises(ValueError):
            PRICES.key_value(bad)


def test_the_registry_is_the_allowlist() -> None:
    reg = registry()
    assert reg.types == ("adjust_stock", "set_unit")
    assert isinstance(reg.correction("adjust_stock"), AdjustStock)
    assert reg.correction("run_sql") is None
    assert reg.sets == {"inventory": INVENTORY}


def test_the_registry_refuses_duplicates_and_incomplete_types() -> None:
    with pytest.raises(ValueError, match="two record sets"):
        Registry([INVENTORY, INVENTORY], [])
    with pytest.raises(ValueError, match="two correction types"):
        Registry([], [AdjustStock(), AdjustStock()])

    class Nameless(AdjustStock):
        name = ""

    with pytest.raises(ValueError, match="no name"):
        Registry([], [Nameless()])

    class Paramless(SetUnit):
        params = dict  # type: ignore[assignment]

    with pytest.raises(ValueError, match="no params"):
        Registry([], [Paramless()])


def test_record_values_are_json_and_never_floats() -> None:
    assert [json_value(v) for v in (None, True, 3, "x", Decimal("1.50"))] == [
        None,
        True,
        3,
        "x",
        "1.50",
    ]
    with pytest.raises(TypeError, match="float"):
        json_value(0.5)
    assert not same_state({"r": {"a": 1}}, {"r": {"a": True}})
    assert not same_state({"r": {"a": 1}}, {"r": {"a": 1.0}})
    assert same_state({"r": {"a": 1}, "s": None}, {"s": None, "r": {"a": 1}})


# --- reading records, on both databases ------------------------------------------------


@pytest.mark.parametrize("lock", [False, True])
def test_read_records_returns_live_columns_and_none_for_missing_rows(
    store: Store, lock: bool
) -> None:
    stock(store, {"SKU-1": (10, "each"), "SKU-2": (0, "box")})
    with store.transaction() as conn:
        found = read_records(
            conn,
            registry().sets,
            ["inventory/SKU-2", "inventory/SKU-9", "inventory/SKU-1", "inventory/SKU-2"],
            lock=lock,
        )
    assert list(found) == ["inventory/SKU-1", "inventory/SKU-2", "inventory/SKU-9"]
    assert found == {
        "inventory/SKU-1": {"on_hand": 10, "unit": "each", "version": 1},
        "inventory/SKU-2": {"on_hand": 0, "unit": "box", "version": 1},
        "inventory/SKU-9": None,
    }


def test_read_records_gives_integer_keys_decimals_as_text_and_booleans(store: Store) -> None:
    make_prices(store)
    sets = {"prices": PRICES}
    with store.transaction() as conn:
        found = read_records(conn, sets, ["prices/7", "prices/8"], lock=True)
    assert found == {"prices/7": {"amount": "19.90", "active": False}, "prices/8": None}
    assert found["prices/7"] is not None and found["prices/7"]["active"] is False


def test_read_records_refuses_a_float_column(store: Store) -> None:
    make_prices(store)
    sets = {"prices": RecordSet("prices", prices, "id", ("ratio",))}
    with store.transaction() as conn, pytest.raises(TypeError, match="float"):
        read_records(conn, sets, ["prices/7"], lock=False)


@pytest.mark.parametrize("name", ["inventory", "orders/1", "inventory/"])
def test_read_records_refuses_records_off_the_allowlist(store: Store, name: str) -> None:
    stock(store, {})
    with store.transaction() as conn, pytest.raises(ValueError):
        read_records(conn, registry().sets, [name], lock=False)


def test_a_locked_read_holds_the_rows_until_commit(store: Store) -> None:
    stock(store, {"SKU-1": (10, "each")})
    with store.transaction() as conn:
        read_records(conn, registry().sets, ["inventory/SKU-1"], lock=True)
        # The lock does not stop this transaction's own write.
        conn.execute(inventory.update().values(on_hand=11))
    with store.transaction() as conn:
        assert read_records(conn, registry().sets, ["inventory/SKU-1"], lock=True) == {
            "inventory/SKU-1": {"on_hand": 11, "unit": "each", "version": 1}
        }


# --- applying corrections makes the postcondition, on both databases ---------------------


def test_applying_the_steps_makes_exactly_the_postcondition(store: Store) -> None:
    stock(store, {"SKU-1": (10, "each"), "SKU-2": (4, "box")})
    doc = make_plan(
        store,
        "plan-apply",
        1,
        [
            ("adjust_stock", {"sku": "SKU-1", "delta": 5, "reason": "delivery"}),
            ("set_unit", {"sku": "SKU-2", "unit": "kg"}),
            ("adjust_stock", {"sku": "SKU-1", "delta": -15, "reason": "sale"}),
        ],
    )
    reg = registry()
    checked = check_plan(doc, reg)
    with store.transaction() as conn:
        assert same_state(read_records(conn, reg.sets, checked.records, lock=True), doc["snapshot"])
        for correction, params in checked.steps:
            correction.apply(conn, reg.sets, params)
        after = read_records(conn, reg.sets, checked.records, lock=False)
    assert same_state(after, doc["postcondition"])
    assert after["inventory/SKU-1"] == {"on_hand": 0, "unit": "each", "version": 3}


def test_a_correction_that_inserts_a_row_reads_and_diffs_from_nothing(store: Store) -> None:
    make_prices(store)
    reg = Registry([PRICES], [AddPrice()])
    doc = {
        "hatpVersion": "0.1",
        "kind": "write-plan",
        "planId": "price-8",
        "version": 1,
        "proposedBy": "agent:pricing",
        "onBehalfOf": "human:erin",
        "corrections": [{"type": "add_price", "params": {"id": 8, "amount": "4.50"}}],
        "snapshot": {"prices/8": None},
        "postcondition": {"prices/8": {"amount": "4.50", "active": True}},
    }
    checked = check_plan(doc, reg)
    assert diff(checked) == [
        Change("prices/8", "amount", None, "4.50"),
        Change("prices/8", "active", None, True),
    ]
    with store.transaction() as conn:
        for correction, params in checked.steps:
            correction.apply(conn, reg.sets, params)
        assert same_state(
            read_records(conn, reg.sets, ["prices/8"], lock=False), doc["postcondition"]
        )


def test_the_inventory_tables_are_created_once(store: Store) -> None:
    stock(store, {"SKU-1": (1, "each")})
    stock(store, {"SKU-2": (2, "each")})
    with store.transaction() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(inventory)).scalar() == 2
        assert set(metadata.tables) == {"inventory"}
