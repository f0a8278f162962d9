"""Numbers and free-form JSON in the wire models: only what the strict reader reads back."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hatp.model import Quote, ToolCall, unreadable


@pytest.mark.parametrize("value", [1e20, -(2.0**60), float("inf")])
def test_tool_arguments_and_quote_seconds_refuse_unreadable_numbers(value: float) -> None:
    """[JCS-READBACK]"""
    with pytest.raises(ValidationError):
        ToolCall(server="mcp://airline.example", tool="book", arguments={"n": [value]})
    with pytest.raises(ValidationError) as caught:
        Quote.model_validate({"leaseSeconds": value})
    assert ("leaseSeconds",) in [e["loc"] for e in caught.value.errors()]


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"a": [1, {"b": 1e20}]}, ("JSON-INTEGER-RANGE", "/a/1/b")),
        ({"a": 2**53}, ("JSON-INTEGER-RANGE", "/a")),
        ({"a/b": float("nan")}, ("JSON-NON-FINITE", "/a~1b")),
        ({"ok": [1e21, 1e-300, 2**53 - 1, "1e20"]}, None),
    ],
)
def test_unreadable_names_the_rule_and_where(value: Any, found: tuple[str, str] | None) -> None:
    """[JCS-READBACK]"""
    problem = unreadable(value)
    assert (problem.rule, problem.where) == found if problem else found is None
