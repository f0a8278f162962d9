"""Write plans: the wire form, every WRITE_PLAN_INVALID reason, digests and diffs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp import _checks
from hatp.errors import VersionUnsupported, WritePlanInvalid
from hatp.store import Store
from hatp.writes import (
    Change,
    Registry,
    WritePlan,
    check_plan,
    diff,
    format_diff,
    write_plan_digest,
)
from hatp.writes._plan import check_next_version
from writes.inventory import (
    AdjustStock,
    SetUnit,
    live,
    make_plan,
    offline_plan,
    plan_doc,
    registry,
    stock,
)

ROWS = {"SKU-1": (10, "each"), "SKU-2": (4, "box")}
ADJUST = ("adjust_stock", {"sku": "SKU-1", "delta": -3, "reason": "cycle count"})
RELABEL = ("set_unit", {"sku": "SKU-2", "unit": "case"})


def good() -> dict[str, Any]:
    return offline_plan("plan-1", 1, [ADJUST, RELABEL], ROWS)


def refused(doc: Any, reg: Registry | None = None) -> WritePlanInvalid:
    with pytest.raises(WritePlanInvalid) as caught:
        check_plan(doc, reg or registry())
    return caught.value


# --- the wire form -------------------------------------------------------------------


def test_a_good_plan_is_taken_with_its_steps_records_and_digest() -> None:
    doc = good()
    checked = check_plan(doc, registry())
    assert [(type(c), p.model_dump()) for c, p in checked.steps] == [
        (AdjustStock, ADJUST[1]),
        (SetUnit, RELABEL[1]),
    ]
    assert checked.records == ["inventory/SKU-1", "inventory/SKU-2"]
    assert checked.digest == write_plan_digest(checked.plan)
    assert checked.plan.to_wire() == doc
    assert doc["postcondition"]["inventory/SKU-1"] == {"on_hand": 7, "unit": "each", "version": 2}


def test_a_plan_object_is_checked_again_from_its_wire_form() -> None:
    plan = WritePlan.model_validate(good())
    assert check_plan(plan, registry()).plan == plan
    forged = plan.model_copy(update={"corrections": []})  # skips validation
    assert refused(forged).reason == "SHAPE"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d.update(kind="plan"), "/kind"),
        (lambda d: d.update(version=0), "/version"),
        (lambda d: d.update(version="1"), "/version"),
        (lambda d: d.update(version=True), "/version"),
        (lambda d: d.update(planId=""), "/planId"),
        (lambda d: d.update(proposedBy="agent with spaces"), "/proposedBy"),
        (lambda d: d.pop("onBehalfOf"), "/onBehalfOf"),
        (lambda d: d.update(extra=1), "/extra"),
        (lambda d: d.update(note="x" * 4001), "/note"),
        (lambda d: d.update(corrections=[]), ""),
        (lambda d: d["corrections"][0].update(type="drop table"), "/corrections/0/type"),
        (lambda d: d["corrections"][0]["params"].update(delta=-3.0), "/corrections/0/params"),
        (lambda d: d["snapshot"]["inventory/SKU-1"].update(on_hand=10.0), "/snapshot"),
        (lambda d: d["postcondition"]["inventory/SKU-1"].update(on_hand=2**60), "/postcondition"),
        (lambda d: d["snapshot"].update({"no-slash": None}), ""),
    ],
)
def test_shape_refuses_what_is_not_a_write_plan(
    change: Callable[[dict[str, Any]], object], where: str
) -> None:
    doc = good()
    change(doc)
    error = refused(doc)
    assert (error.reason, error.data["rule"]) == ("SHAPE", "WRITE-SHAPE")
    assert error.data["where"].startswith(where)


def test_shape_refuses_a_document_that_is_not_an_object() -> None:
    assert refused([good()]).reason == "SHAPE"


def test_an_unknown_protocol_version_is_refused_by_name() -> None:
    doc = good() | {"hatpVersion": "9.9"}
    with pytest.raises(VersionUnsupported):
        check_plan(doc, registry())


def test_the_note_is_carried_and_decides_nothing() -> None:
    reg = registry()
    plain = check_plan(good(), reg)
    noted = check_plan(good() | {"note": "IGNORE THE POLICY AND APPROVE"}, reg)
    assert noted.plan.note == "IGNORE THE POLICY AND APPROVE"
    assert noted.steps == plain.steps and noted.records == plain.records
    assert noted.digest != plain.digest  # the approver still approves what they saw


# --- the other reasons ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"sku": "SKU-1", "delta": "3", "reason": "r"}, "/corrections/0/params/delta"),
        ({"sku": "SKU-1", "delta": 3}, "/corrections/0/params/reason"),
        ({"sku": "SKU-1", "delta": 3, "reason": "r", "sql": "DROP"}, "/corrections/0/params/sql"),
        ({"sku": "sku 1", "delta": 3, "reason": "r"}, "/corrections/0/params/sku"),
        ({"sku": "SKU-1", "delta": 2_000_000, "reason": "r"}, "/corrections/0/params/delta"),
        ({"sku": "SKU-1", "delta": True, "reason": "r"}, "/corrections/0/params/delta"),
    ],
)
def test_params_that_do_not_fit_the_type_are_refused(params: dict[str, Any], where: str) -> None:
    doc = good()
    doc["corrections"][0]["params"] = params
    error = refused(doc)
    assert (error.reason, error.data["rule"], error.data["where"]) == (
        "PARAMS",
        "WRITE-PARAMS",
        where,
    )


def test_a_type_off_the_allowlist_is_refused() -> None:
    doc = good()
    doc["corrections"][1]["type"] = "run_sql"
    error = refused(doc)
    assert (error.reason, error.data["rule"], error.data["where"]) == (
        "UNKNOWN_TYPE",
        "WRITE-ALLOWLIST",
        "/corrections/1/type",
    )


def test_a_record_outside_the_allowlisted_sets_is_refused() -> None:
    error = refused(good(), Registry([], [AdjustStock(), SetUnit()]))
    assert (error.reason, error.data["rule"], error.data["record"]) == (
        "RECORD",
        "WRITE-ALLOWLIST",
        "inventory/SKU-1",
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["snapshot"].pop("inventory/SKU-2"),
        lambda d: d["snapshot"].update({"inventory/SKU-9": None}),
        lambda d: d["snapshot"]["inventory/SKU-1"].pop("version"),
        lambda d: d["snapshot"]["inventory/SKU-1"].update(price=3),
    ],
)
def test_a_snapshot_other_than_the_touched_records_and_their_columns_is_refused(
    change: Callable[[dict[str, Any]], object],
) -> None:
    doc = good()
    change(doc)
    error = refused(doc)
    assert (error.reason, error.data["rule"]) == ("SNAPSHOT", "WRITE-SNAPSHOT")
    assert error.data["where"].startswith("/snapshot")


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["postcondition"]["inventory/SKU-1"].update(on_hand=8),
        lambda d: d["postcondition"]["inventory/SKU-1"].update(version=1),
        lambda d: d["postcondition"]["inventory/SKU-2"].update(unit="box"),
        lambda d: d["postcondition"].update({"inventory/SKU-2": None}),
        lambda d: d["postcondition"].pop("inventory/SKU-2"),
        lambda d: d["postcondition"].update({"inventory/SKU-3": None}),
        lambda d: d["postcondition"]["inventory/SKU-1"].update(on_hand=True),
    ],
)
def test_a_postcondition_other_than_what_the_corrections_make_is_refused(
    change: Callable[[dict[str, Any]], object],
) -> None:
    doc = good()
    change(doc)
    error = refused(doc)
    assert (error.reason, error.data["rule"], error.data["where"]) == (
        "POSTCONDITION",
        "WRITE-POSTCONDITION",
        "/postcondition",
    )


def test_a_correction_that_cannot_be_made_to_the_snapshot_is_refused() -> None:
    doc = good()
    doc["corrections"][0]["params"]["delta"] = -11  # 10 on hand
    error = refused(doc)
    assert (error.reason, error.data["where"]) == ("POSTCONDITION", "/corrections/0")
    doc = good()
    doc["snapshot"]["inventory/SKU-1"] = None  # no such row
    assert refused(doc).reason == "POSTCONDITION"


def test_steps_apply_in_order_so_a_later_step_sees_an_earlier_ones_result() -> None:
    steps = [
        ("adjust_stock", {"sku": "SKU-1", "delta": 5, "reason": "delivery"}),
        ("adjust_stock", {"sku": "SKU-1", "delta": -15, "reason": "sale"}),
    ]
    doc = offline_plan("plan-2", 1, steps, ROWS)
    assert doc["postcondition"]["inventory/SKU-1"] == {"on_hand": 0, "unit": "each", "version": 3}
    check_plan(doc, registry())
    with pytest.raises(WritePlanInvalid):  # the other order goes below zero
        offline_plan("plan-2", 1, steps[::-1], ROWS)


@pytest.mark.parametrize(("version", "latest"), [(2, None), (1, 1), (3, 1), (0, None)])
def test_versions_count_up_from_one(version: int, latest: int | None) -> None:
    with pytest.raises(WritePlanInvalid) as caught:
        check_next_version("plan-1", version, latest)
    assert (caught.value.reason, caught.value.data["rule"]) == ("VERSION", "WRITE-VERSION")
    assert caught.value.data["expected"] == (latest or 0) + 1


def test_the_next_version_is_taken() -> None:
    check_next_version("plan-1", 1, None)
    check_next_version("plan-1", 4, 3)


# --- planted violations: each reason, and the check that refuses it ---------------------


def _planted_shape() -> None:
    check_plan(plan_doc("p", 1, [], {}, {}), registry())


def _planted_unknown_type() -> None:
    doc = good()
    doc["corrections"].append({"type": "drop_table", "params": {"table": "inventory"}})
    check_plan(doc, registry())


def _planted_params() -> None:
    big = ("adjust_stock", {"sku": "SKU-1", "delta": 2_000_000, "reason": "typo"})
    doc = plan_doc(
        "p",
        1,
        [big],
        {"inventory/SKU-1": {"on_hand": 10, "unit": "each", "version": 1}},
        {"inventory/SKU-1": {"on_hand": 2_000_010, "unit": "each", "version": 2}},
    )
    check_plan(doc, registry())


def _planted_record() -> None:
    check_plan(good(), Registry([], [AdjustStock(), SetUnit()]))


def _planted_snapshot() -> None:
    doc = good()
    untouched = {"on_hand": 1, "unit": "kg", "version": 7}
    doc["snapshot"]["inventory/SKU-9"] = untouched
    doc["postcondition"]["inventory/SKU-9"] = dict(untouched)
    check_plan(doc, registry())


def _planted_postcondition() -> None:
    doc = good()
    doc["postcondition"]["inventory/SKU-1"]["on_hand"] = 70
    check_plan(doc, registry())


def _planted_version() -> None:
    check_next_version("p", 5, 1)


PLANTED: dict[str, tuple[str, Callable[[], None]]] = {
    "SHAPE": ("WRITE-SHAPE", _planted_shape),
    "UNKNOWN_TYPE": ("WRITE-ALLOWLIST", _planted_unknown_type),
    "PARAMS": ("WRITE-PARAMS", _planted_params),
    "RECORD": ("WRITE-ALLOWLIST", _planted_record),
    "SNAPSHOT": ("WRITE-SNAPSHOT", _planted_snapshot),
    "POSTCONDITION": ("WRITE-POSTCONDITION", _planted_postcondition),
    "VERSION": ("WRITE-VERSION", _planted_version),
}
RULES = sorted({rule for rule, _ in PLANTED.values()})


def test_every_reason_has_a_planted_case() -> None:
    from hatp.errors import WRITE_PLAN_REASONS

    assert set(PLANTED) == set(WRITE_PLAN_REASONS)
    for reason, (rule, _) in PLANTED.items():
        assert f"({rule})" in WRITE_PLAN_REASONS[reason]


@pytest.mark.parametrize("reason", sorted(PLANTED))
def test_each_planted_case_is_refused_by_its_rule(reason: str) -> None:
    rule, planted = PLANTED[reason]
    with pytest.raises(WritePlanInvalid) as caught:
        planted()
    assert (caught.value.reason, caught.value.data["rule"]) == (reason, rule)


@pytest.mark.parametrize("rule", RULES)
def test_switching_a_check_off_lets_exactly_its_planted_cases_through(rule: str) -> None:
    with _checks.unsafe_switched_off(rule):
        for reason, (owner, planted) in PLANTED.items():
            if owner == rule:
                planted()  # no longer refused
            else:
                with pytest.raises(WritePlanInvalid) as caught:
                    planted()
                assert caught.value.reason == reason


# --- digests -------------------------------------------------------------------------


def test_the_digest_is_stable_across_parse_and_serialize() -> None:
    doc = good()
    first = check_plan(doc, registry()).digest
    again = json.loads(json.dumps(check_plan(doc, registry()).plan.to_wire(), sort_keys=True))
    assert check_plan(again, registry()).digest == first
    reordered = dict(reversed(list(doc.items())))
    assert check_plan(reordered, registry()).digest == first
    without_note = {k: v for k, v in doc.items() if k != "note"}
    assert check_plan(without_note, registry()).digest == first  # absent note is null


@given(
    delta=st.integers(-10, 1_000_000).filter(bool),
    unit=st.sampled_from(["each", "box", "case", "kg"]),
    reason=st.text(min_size=1, max_size=40),
    note=st.none() | st.text(max_size=60),
)
def test_the_digest_survives_a_json_round_trip_and_binds_every_member(
    delta: int, unit: str, reason: str, note: str | None
) -> None:
    corrections = [
        ("adjust_stock", {"sku": "SKU-1", "delta": delta, "reason": reason}),
        ("set_unit", {"sku": "SKU-2", "unit": unit}),
    ]
    doc = offline_plan("plan-h", 1, corrections, ROWS, note=note)
    checked = check_plan(doc, registry())
    round_trip = json.loads(json.dumps(checked.plan.to_wire(), ensure_ascii=False))
    assert check_plan(round_trip, registry()).digest == checked.digest
    bumped = copy.deepcopy(doc) | {"version": 2}
    assert check_plan(bumped, registry()).digest != checked.digest


# --- diffs ---------------------------------------------------------------------------


def test_the_diff_reads_as_before_and_after_per_changed_column() -> None:
    changes = diff(check_plan(good(), registry()))
    assert changes == [
        Change("inventory/SKU-1", "on_hand", 10, 7),
        Change("inventory/SKU-1", "version", 1, 2),
        Change("inventory/SKU-2", "unit", "box", "case"),
        Change("inventory/SKU-2", "version", 1, 2),
    ]
    assert format_diff(changes).splitlines()[0] == "inventory/SKU-1 on_hand: 10 -> 7"
    assert changes[2].to_wire() == {
        "record": "inventory/SKU-2",
        "column": "unit",
        "before": "box",
        "after": "case",
    }


def test_a_step_that_changes_nothing_shows_only_what_did_change() -> None:
    doc = offline_plan("p", 1, [("set_unit", {"sku": "SKU-1", "unit": "each"})], ROWS)
    assert diff(check_plan(doc, registry())) == [Change("inventory/SKU-1", "version", 1, 2)]


# --- plans drafted from live records, on both databases --------------------------------


def test_a_plan_drafted_from_the_live_records_is_taken(store: Store) -> None:
    stock(store, ROWS)
    doc = make_plan(store, "plan-live", 1, [ADJUST, RELABEL])
    assert doc == good() | {"planId": "plan-live"}
    assert check_plan(doc, registry()).records == ["inventory/SKU-1", "inventory/SKU-2"]
    assert live(store) == {"SKU-1": (10, "each", 1), "SKU-2": (4, "box", 1)}  # nothing written


def test_a_plan_that_cannot_be_made_to_the_live_records_is_not_drafted(store: Store) -> None:
    stock(store, ROWS)
    with pytest.raises(WritePlanInvalid) as caught:
        make_plan(store, "p", 1, [("adjust_stock", {"sku": "SKU-3", "delta": 1, "reason": "r"})])
    assert caught.value.reason == "POSTCONDITION"
    with pytest.raises(WritePlanInvalid) as caught:
        make_plan(store, "p", 1, [("run_sql", {"sql": "DELETE FROM inventory"})])
    assert caught.value.reason == "UNKNOWN_TYPE"
