"""Free-form JSON as a person is shown it: escaped, bounded, and never refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.gateway import ShownJson, shown_json
from hatp.gateway._shown_json import MAX_DEPTH, MAX_MEMBERS, MAX_STRING, MAX_TEXT

#: Parsed JSON (no NaN: it is not JSON, and is not equal to itself).
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=30,
)


def nested(levels: int) -> dict[str, Any]:
    """``{"a": {"a": … {"a": 1}}}``, ``levels`` objects deep, built without recursion."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return dict(value)


def test_a_short_value_is_one_line_with_sorted_keys() -> None:
    """[GW-VIEW-ARGS]"""
    assert shown_json({"seat": "14C", "flight": "LH400"}) == ShownJson(
        '{"flight": "LH400", "seat": "14C"}'
    )


def test_a_longer_value_is_indented_one_member_a_line() -> None:
    """[GW-VIEW-ARGS]"""
    shown = shown_json(
        {"card": "corp-4242", "payee": "Acme", "amount": {"value": "730.00", "currency": "USD"}}
    )
    assert shown.lines == (
        "{",
        '  "amount": {',
        '    "currency": "USD",',
        '    "value": "730.00"',
        "  },",
        '  "card": "corp-4242",',
        '  "payee": "Acme"',
        "}",
    )
    assert shown.whole and shown.note is None


@pytest.mark.parametrize(
    ("hostile", "written"),
    [
        ("LH400\x1b[2J\x1b[H", "LH400\\u001b[2J\\u001b[H"),  # an ANSI escape clearing the screen
        ("LH400\x9b31m", "LH400\\u009b31m"),  # the one-byte CSI
        ("LH400\nYou approve spending: 1 USD", "LH400\\nYou approve spending: 1 USD"),
        ("LH400\u2028line", "LH400\\u2028line"),
        ("\u202eDSU 1", "\\u202eDSU 1"),  # right-to-left override
        ("tag\U000e0041", "tag\\udb40\\udc41"),  # past the BMP: a surrogate pair, as JSON
        ("lone\ud800", "lone\\ud800"),
        ("bell\x07del\x7f", "bell\\u0007del\\u007f"),
    ],
)
def test_every_character_that_is_not_printable_is_a_json_escape(hostile: str, written: str) -> None:
    """[GW-VIEW-ESCAPE] In values and keys alike; the text still reads back as the value."""
    for value in ({"flight": hostile}, {hostile: "x"}):
        shown = shown_json(value)
        assert written in shown.text
        assert all(line.isprintable() for line in shown.lines)
        assert json.loads(shown.text) == value


def test_markup_stays_text_for_the_page_to_escape() -> None:
    """[GW-VIEW-ESCAPE] Printable characters are shown as they are: the page escapes them."""
    shown = shown_json({"payee": '<script>alert("x")</script>'})
    assert shown.text == '{"payee": "<script>alert(\\"x\\")</script>"}'


@given(JSON)
def test_any_value_shown_whole_reads_back_as_itself_on_printable_lines(value: Any) -> None:
    """[GW-VIEW-ESCAPE] [GW-VIEW-BOUNDED] Escaping loses nothing and adds no line."""
    shown = shown_json(value)
    assert all(line.isprintable() for line in shown.lines)
    assert shown.whole
    assert json.loads(shown.text) == value


def test_a_long_string_is_cut_and_the_note_says_so() -> None:
    """[GW-VIEW-BOUNDED]"""
    shown = shown_json({"title": "x" * 100_000})
    assert f'"{"x" * MAX_STRING}… (99,700 more characters)"' in shown.text
    assert shown.note == f"Shown in part: 1 string cut after {MAX_STRING} characters."
    assert len(shown.text) < 2 * MAX_STRING


def test_a_long_key_is_cut_like_a_string() -> None:
    """[GW-VIEW-BOUNDED]"""
    shown = shown_json({"k" * 1000: 1, "k" * 1001: 2})
    assert "more characters" in shown.text
    assert shown.note == f"Shown in part: 2 strings cut after {MAX_STRING} characters."


def test_nesting_past_the_depth_shown_stands_as_an_ellipsis() -> None:
    """[GW-VIEW-BOUNDED] Deep nesting is shown to a depth, never a crash."""
    shown = shown_json(nested(60))
    assert shown.text.count('"a"') == MAX_DEPTH
    assert '"{…}"' in shown.text
    assert shown.note == (
        f"Shown in part: 1 object or array nested deeper than {MAX_DEPTH} levels "
        "shown as {…} or […]."
    )


def test_nesting_deeper_than_any_parser_takes_is_still_shown() -> None:
    """[GW-VIEW-BOUNDED] Far past Python's recursion limit: shown to the depth, no error."""
    value: Any = []
    for _ in range(100_000):
        value = [value]
    shown = shown_json(value)
    assert shown.text.count("[") == MAX_DEPTH + 1 and '"[…]"' in shown.text
    assert not shown.whole


def test_members_past_the_count_shown_are_left_out_and_counted() -> None:
    """[GW-VIEW-BOUNDED]"""
    shown = shown_json({"seats": list(range(1000)), **{f"t{n:04}": n for n in range(100)}})
    parsed = json.loads(shown.text)
    assert parsed["seats"][:MAX_MEMBERS] == list(range(MAX_MEMBERS))
    assert parsed["seats"][MAX_MEMBERS] == "… 960 more items not shown"
    assert len(parsed) == MAX_MEMBERS + 1 and parsed["…"] == "61 more members not shown"
    assert shown.note == (
        f"Shown in part: 1,021 members left out (at most {MAX_MEMBERS} of one object or "
        "array are shown)."
    )


def test_a_huge_value_is_cut_to_the_size_shown() -> None:
    """[GW-VIEW-BOUNDED] Every string at its longest and every character escaped."""
    shown = shown_json({f"k{n}": "\x1b" * MAX_STRING for n in range(MAX_MEMBERS)})
    assert len(shown.text) <= MAX_TEXT + 1 and shown.text.endswith("…")
    assert all(line.isprintable() for line in shown.lines)
    assert shown.note == f"Shown in part: the text cut after {MAX_TEXT:,} characters."


def test_what_is_not_json_is_shown_as_text() -> None:
    """[GW-VIEW-BOUNDED] The wire models keep it out; shown anyway, never a crash."""
    shown = shown_json({"when": object, "odd": float("nan")})
    assert "class 'object'" in shown.text and "NaN" in shown.text
