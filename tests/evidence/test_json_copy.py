"""copy_json (the fast deep copy of JSON values) and json_number (whole numbers as ints)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.evidence import canonicalize, copy_json, json_number
from hatp.evidence._canonical import canonical_plain

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@given(_json)
def test_copy_is_equal_and_canonically_identical(value: Any) -> None:
    copied = copy_json(value)
    assert copied == value
    assert canonicalize(copied) == canonicalize(value)


def test_copy_shares_nothing_with_the_original() -> None:
    original: dict[str, Any] = {"events": [{"body": {"steps": [1, 2]}}], "head": None}
    copied = copy_json(original)
    copied["events"][0]["body"]["steps"].append(3)
    copied["events"].append({})
    assert original == {"events": [{"body": {"steps": [1, 2]}}], "head": None}


def test_copy_gives_tuples_back_as_lists_and_enums_as_their_values() -> None:
    class Colour(StrEnum):
        RED = "red"

    copied = copy_json({"pair": (1, 2), "colour": Colour.RED})
    assert copied == {"pair": [1, 2], "colour": "red"}
    assert type(copied["pair"]) is list
    assert type(copied["colour"]) is str


@pytest.mark.parametrize(
    "value",
    [
        {"at": datetime(2026, 12, 4, 9, 0, tzinfo=UTC)},  # orjson would write a string
        {"big": 2**70},  # past orjson's 64 bits
        {"count": type("Count", (int,), {})(3)},  # an int subclass
    ],
    ids=["datetime", "big-int", "int-subclass"],
)
def test_what_orjson_would_change_is_deep_copied_instead(value: dict[str, Any]) -> None:
    copied = copy_json(value)
    assert copied == value
    assert copied is not value
    [(key, item)] = value.items()
    assert type(copied[key]) is type(item)  # not turned into a str or refused


def test_copy_of_a_mutable_non_json_value_is_still_deep() -> None:
    inner = [datetime(2026, 12, 4, tzinfo=UTC)]
    value = {"times": inner}
    copied = copy_json(value)
    assert copied["times"] == inner
    assert copied["times"] is not inner
    assert copy.deepcopy(value) == copied


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [(1200.0, 1200, int), (0.0, 0, int), (-5.0, -5, int), (2.5, 2.5, float), (7, 7, int)],
)
def test_json_number_states_whole_numbers_as_ints(
    value: float, expected: float, kind: type
) -> None:
    number = json_number(value)
    assert number == expected
    assert type(number) is kind
    assert canonicalize({"n": number}) == canonicalize({"n": value})  # nothing signed changes


def test_json_number_keeps_a_document_on_the_fast_path() -> None:
    assert canonical_plain({"leaseSeconds": 1200.0}) is None
    assert canonical_plain({"leaseSeconds": json_number(1200.0)}) is not None
