"""The strict JSON reader: everything parsers disagree on is refused, and located.

Each refusal is an ``InvalidJson`` (code ``INVALID_JSON``) whose ``data.rule``
names the requirement and ``data.where`` says where: a JSON Pointer for a value
(duplicates, non-finite numbers, lone surrogates, big integers, depth),
``line L column C`` for a syntax error, ``byte N`` for bytes that are not UTF-8.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hatp.errors import HatpError, InvalidJson
from hatp.evidence import MAX_DEPTH, parse_json

MAX_SAFE = 2**53 - 1


def _refusal(document: str | bytes, **kwargs: Any) -> InvalidJson:
    with pytest.raises(InvalidJson) as caught:
        parse_json(document, **kwargs)
    error = caught.value
    assert error.code == "INVALID_JSON"
    assert isinstance(error, HatpError)
    assert error.to_dict()["data"] == error.data
    return error


# An array opening, then a string full of brackets and an escaped quote, then a comma.
_STRING_PREFIX = '["[[[\\"[[[", '


def _nested_arrays(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


def _nested_objects(depth: int, inner: str = "1") -> str:
    return '{"a":' * depth + inner + "}" * depth


# --------------------------------------------------------------------------- #
# What the reader accepts
# --------------------------------------------------------------------------- #


def test_reader_returns_plain_python_types() -> None:
    """JSON-SYNTAX: objects are plain dicts, arrays lists, numbers int or float."""
    value = parse_json('{"o": {"k": [1, -2.5, "s", true, false, null]}, "e": {}}')
    assert value == {"o": {"k": [1, -2.5, "s", True, False, None]}, "e": {}}
    assert type(value) is dict
    assert type(value["o"]) is dict
    assert type(value["o"]["k"]) is list
    assert [type(x) for x in value["o"]["k"][:2]] == [int, float]


def test_reader_gives_same_value_for_str_and_utf8_bytes() -> None:
    """JSON-SYNTAX: a str document and its UTF-8 bytes parse to the same value."""
    text = '{"é": ["€", "\\u00e9", 1e2]}'
    assert parse_json(text) == parse_json(text.encode("utf-8")) == {"é": ["€", "é", 100.0]}


# --------------------------------------------------------------------------- #
# JSON-SYNTAX
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param("", "line 1 column 1", id="empty"),
        pytest.param("   ", "line 1 column 4", id="only-whitespace"),
        pytest.param('{"a":1} x', "line 1 column 9", id="trailing-garbage"),
        pytest.param('{"a":1}\n\n[', "line 3 column 1", id="trailing-second-document"),
        pytest.param('{\n  "a": 1,\n  "b": }', "line 3 column 8", id="missing-value"),
        pytest.param("[1,\n2,\n\n  ]", "line 4 column 3", id="trailing-comma-multiline"),
        pytest.param('{"a":1,}', "line 1 column 8", id="trailing-comma-object"),
        pytest.param("{'a':1}", "line 1 column 2", id="single-quotes"),
        pytest.param('{"a":"x\ny"}', "line 1 column 8", id="raw-control-char"),
        pytest.param("01", "line 1 column 2", id="leading-zero"),
        pytest.param("[+1]", "line 1 column 2", id="plus-sign"),
        pytest.param("[.5]", "line 1 column 2", id="bare-fraction"),
        pytest.param('"\\x41"', "line 1 column 2", id="bad-escape"),
        pytest.param('"abc', "line 1 column 1", id="unterminated-string"),
        pytest.param("\ufeff{}", "line 1 column 1", id="bom-in-str"),
    ],
)
def test_syntax_errors_are_refused_with_line_and_column(document: str, where: str) -> None:
    """JSON-SYNTAX: a document that is not JSON is refused at 'line L column C'."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-SYNTAX"
    assert error.data["where"] == where


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param(b'{"a":"\xff"}', "byte 6", id="invalid-byte"),
        pytest.param(b'["\xe2\x82"]', "byte 2", id="truncated-sequence"),
        pytest.param(b'[1,\n"\xc3\x28"]', "byte 5", id="bad-continuation"),
        pytest.param(b'"\xed\xa0\x80"', "byte 1", id="utf8-encoded-surrogate"),
        pytest.param(b'"\xc0\xaf"', "byte 1", id="overlong-encoding"),
        pytest.param(b"\xef\xbb\xbf{}", "byte 0", id="bom"),
    ],
)
def test_non_utf8_bytes_and_bom_are_refused_at_byte_offset(document: bytes, where: str) -> None:
    """JSON-SYNTAX: bytes that are not BOM-less UTF-8 are refused at 'byte N'."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-SYNTAX"
    assert error.data["where"] == where


# --------------------------------------------------------------------------- #
# JSON-DUPLICATE-KEY
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param('{"a":1,"a":2}', "", id="root"),
        pytest.param('{"a":1,"a":1}', "", id="same-value"),
        pytest.param('{"a":[1,{"b":1,"b":2}]}', "/a/1", id="nested"),
        pytest.param('{"a":1,"\\u0061":2}', "", id="escaped-spelling"),
        pytest.param('[{"x":{"k":1,"j":2,"k":3}}]', "/0/x", id="not-adjacent"),
    ],
)
def test_duplicate_keys_are_refused_at_the_object(document: str, where: str) -> None:
    """JSON-DUPLICATE-KEY: an object repeating a name is refused; where points at that object."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-DUPLICATE-KEY"
    assert error.data["where"] == where


@pytest.mark.parametrize(
    "document",
    [
        '{"a":1,"A":2}',
        '{"é":1,"e\\u0301":2}',
        '{"a":{"a":1},"b":{"a":2}}',
        '[{"a":1},{"a":2}]',
    ],
)
def test_distinct_keys_are_not_duplicates(document: str) -> None:
    """JSON-DUPLICATE-KEY: case, Unicode normalization and sibling objects are not duplicates."""
    assert parse_json(document) == json.loads(document)


# --------------------------------------------------------------------------- #
# JSON-NON-FINITE
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param("NaN", "", id="nan-root"),
        pytest.param('{"a":[1,NaN]}', "/a/1", id="nan"),
        pytest.param('{"a":Infinity}', "/a", id="infinity"),
        pytest.param("[0,-Infinity]", "/1", id="-infinity"),
        pytest.param('{"x":1e400}', "/x", id="1e400"),
        pytest.param('{"x":[-1e400]}', "/x/0", id="-1e400"),
        pytest.param("[1.5e999999]", "/0", id="huge-exponent"),
    ],
)
def test_non_finite_numbers_are_refused_at_pointer(document: str, where: str) -> None:
    """JSON-NON-FINITE: NaN, ±Infinity and numbers that overflow a double are refused."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-NON-FINITE"
    assert error.data["where"] == where


def test_largest_double_and_underflow_are_accepted() -> None:
    """JSON-NON-FINITE: 1.7976931348623157e308 is finite; 1e-400 underflows to 0, not refused."""
    assert parse_json("[1.7976931348623157e308, 1e-400]") == [1.7976931348623157e308, 0.0]


# --------------------------------------------------------------------------- #
# JSON-INTEGER-RANGE
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param("9007199254740992", "", id="2**53"),
        pytest.param("[-9007199254740992]", "/0", id="-(2**53)"),
        pytest.param('{"n":{"m":18446744073709551616}}', "/n/m", id="2**64"),
        pytest.param("[1," + "9" * 300 + "]", "/1", id="300-digits"),
    ],
)
def test_integers_beyond_safe_range_are_refused_at_pointer(document: str, where: str) -> None:
    """JSON-INTEGER-RANGE: integers outside ±(2**53-1) are refused, not rounded."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-INTEGER-RANGE"
    assert error.data["where"] == where


def test_integers_at_safe_range_edge_are_accepted_exactly() -> None:
    """JSON-INTEGER-RANGE: ±(2**53-1) are accepted as exact Python ints."""
    value = parse_json("[9007199254740991, -9007199254740991, -0]")
    assert value == [MAX_SAFE, -MAX_SAFE, 0]
    assert all(type(x) is int for x in value)


@pytest.mark.parametrize(
    ("document", "where"), [("1" * 5000, ""), ('{"n":[-' + "9" * 4301 + "]}", "/n/0")]
)
def test_integer_too_long_for_python_is_refused_as_invalid_json(document: str, where: str) -> None:
    """JSON-INTEGER-RANGE: a 5000-digit integer is an InvalidJson, not a stray ValueError."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-INTEGER-RANGE"
    assert error.data["where"] == where


# --------------------------------------------------------------------------- #
# JSON-LONE-SURROGATE
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param('"\\ud800"', "", id="root-high"),
        pytest.param('["ok","\\ud800"]', "/1", id="high-in-array"),
        pytest.param('{"a":{"b":"x\\udfffy"}}', "/a/b", id="low-in-value"),
        pytest.param('["\\ude00\\ud83d"]', "/0", id="reversed-pair"),
        pytest.param('["\\ud83dA"]', "/0", id="high-then-letter"),
        pytest.param('["\\ud83d\\ud83d"]', "/0", id="two-highs"),
        pytest.param('["ok","\ud800"]', "/1", id="raw-surrogate-in-str-document"),
    ],
)
def test_lone_surrogates_in_values_are_refused_at_pointer(document: str, where: str) -> None:
    """JSON-LONE-SURROGATE: a string holding an unpaired UTF-16 surrogate is refused."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-LONE-SURROGATE"
    assert error.data["where"] == where


@pytest.mark.parametrize(
    ("document", "parent"),
    [('{"\\ud800":1}', "/"), ('{"a":{"\\udc00":1}}', "/a/"), ('[{"x\\ud800":1}]', "/0/")],
)
def test_lone_surrogates_in_keys_are_refused_under_parent(document: str, parent: str) -> None:
    """JSON-LONE-SURROGATE: a member name holding a lone surrogate is refused at that member."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-LONE-SURROGATE"
    where = error.data["where"]
    assert where.startswith(parent)
    assert "/" not in where[len(parent) :], f"{where!r} is not one member below {parent!r}"
    assert where != parent


def test_lone_surrogate_key_refusal_can_be_reported_as_utf8() -> None:
    """JSON-LONE-SURROGATE: the refusal itself (where, message) is printable/sendable UTF-8."""
    error = _refusal('{"a":{"\\ud800":1}}')
    assert error.data["where"] == "/a/\\ud800"  # the escape, as text
    error.data["where"].encode("utf-8")
    str(error).encode("utf-8")


def test_valid_surrogate_pair_is_accepted() -> None:
    """JSON-LONE-SURROGATE: an escaped pair is one astral character, in values and keys."""
    assert parse_json('["\\ud83d\\ude00"]') == ["\U0001f600"]
    assert parse_json('{"\\ud83d\\ude00":"\\uD83D\\uDE00"}') == {"\U0001f600": "\U0001f600"}
    assert parse_json('"\U0001f600"'.encode()) == "\U0001f600"


# --------------------------------------------------------------------------- #
# JSON-DEPTH
# --------------------------------------------------------------------------- #


def test_max_depth_is_64() -> None:
    """JSON-DEPTH: the limit is 64 nesting levels of objects/arrays."""
    assert MAX_DEPTH == 64


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(_nested_arrays(64), id="arrays"),
        pytest.param(_nested_arrays(64, "1"), id="arrays-with-scalar"),
        pytest.param(_nested_objects(64), id="objects"),
        pytest.param(_nested_objects(63, "[]"), id="mixed"),
    ],
)
def test_depth_64_is_accepted(document: str) -> None:
    """JSON-DEPTH: exactly 64 levels of containers parse."""
    assert parse_json(document) == json.loads(document)


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param(_nested_arrays(65), "/0" * 64, id="arrays"),
        pytest.param(_nested_objects(65), "/a" * 64, id="objects"),
        pytest.param(_nested_objects(64, "[]"), "/a" * 64, id="mixed"),
        pytest.param(_nested_arrays(500), "/0" * 64, id="500-deep"),
        pytest.param('[1,{"b":' + _nested_arrays(63) + "}]", "/1/b" + "/0" * 62, id="inside"),
    ],
)
def test_depth_65_is_refused_at_pointer(document: str, where: str) -> None:
    """JSON-DEPTH: the 65th level is refused; where points at the container that is too deep."""
    error = _refusal(document)
    assert error.data["rule"] == "JSON-DEPTH"
    assert error.data["where"] == where


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param(_nested_arrays(100_000), "char 64", id="arrays"),
        pytest.param(_nested_objects(100_000), "char 320", id="objects"),
        pytest.param("[" * 100_000, "char 64", id="unclosed"),
        pytest.param(
            _STRING_PREFIX + _nested_arrays(100_000) + "]",
            f"char {len(_STRING_PREFIX) + 63}",
            id="brackets-in-strings-are-not-nesting",
        ),
    ],
)
def test_document_100000_deep_is_refused_not_crashing(document: str, where: str) -> None:
    """JSON-DEPTH: nesting that exhausts a recursive parser is a JSON-DEPTH refusal.

    No RecursionError escapes; the place is the offset of the 65th opening bracket.
    """
    error = _refusal(document)
    assert error.data["rule"] == "JSON-DEPTH"
    assert error.data["where"] == where


def test_max_depth_argument_sets_the_limit() -> None:
    """JSON-DEPTH: parse_json(max_depth=N) accepts N levels and refuses N+1."""
    assert parse_json("[[1]]", max_depth=2) == [[1]]
    error = _refusal("[[1]]", max_depth=1)
    assert error.data["rule"] == "JSON-DEPTH"
    assert error.data["where"] == "/0"


# --------------------------------------------------------------------------- #
# JSON Pointer escaping of locations
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("document", "where"),
    [
        pytest.param('{"a/b":{"m~n":[NaN]}}', "/a~1b/m~0n/0", id="slash-and-tilde"),
        pytest.param('{"~1":[NaN]}', "/~01/0", id="tilde-escaped-before-slash"),
        pytest.param('{"/~":NaN}', "/~1~0", id="both-in-one-key"),
        pytest.param('{"":NaN}', "/", id="empty-key"),
        pytest.param('{"x":{"":{"y":NaN}}}', "/x//y", id="empty-key-inside"),
        pytest.param('{"é €":{"k":1,"k":2}}', "/é €", id="non-ascii-key-verbatim"),
    ],
)
def test_where_is_rfc6901_json_pointer_with_escaping(document: str, where: str) -> None:
    """JSON-NON-FINITE / JSON-DUPLICATE-KEY: '~' becomes '~0' and '/' becomes '~1' (RFC 6901)."""
    error = _refusal(document)
    assert error.data["where"] == where


# --------------------------------------------------------------------------- #
# Properties
# --------------------------------------------------------------------------- #

_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE, MAX_SAFE)
    # Doubles in (2**53-1, 1e21) canonicalize to unsafe integers: refused, tested apart.
    | st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda x: not MAX_SAFE < abs(x) < 1e21
    )
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
)
_values = st.recursive(
    _scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_keys, c, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_values, st.booleans())
def test_reader_reads_back_any_valid_json_exactly(value: Any, ensure_ascii: bool) -> None:
    """JSON-SYNTAX: every document within the rules parses to the value it was written from."""
    document = json.dumps(value, ensure_ascii=ensure_ascii)
    parsed = parse_json(document.encode("utf-8"))
    assert parsed == value
    assert json.dumps(parsed, ensure_ascii=ensure_ascii) == document


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(st.sampled_from(list('[]{}",:0123456789.eE+- \n\\utrfalsNIinfy')), max_size=40),
        st.binary(max_size=40),
    )
)
def test_reader_fails_only_with_invalid_json(document: str | bytes) -> None:
    """JSON-SYNTAX: on arbitrary input the reader returns a value or raises InvalidJson only."""
    try:
        value = parse_json(document)
    except InvalidJson as error:
        assert error.data["rule"].startswith("JSON-")
        assert isinstance(error.data["where"], str)
    else:
        # Whatever it accepts is finite, safe-ranged, surrogate-free standard JSON.
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        for leaf in _leaves(value):
            if isinstance(leaf, float):
                assert math.isfinite(leaf)
            elif isinstance(leaf, int):
                assert abs(leaf) <= MAX_SAFE


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value.keys(), *(x for v in value.values() for x in _leaves(v))]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


@pytest.mark.parametrize("text", ["9007199254740992.0", "1e20", "-1.5e17", "9.99e20"])
def test_doubles_that_canonicalize_to_unsafe_integers_are_refused(text: str) -> None:
    """JSON-INTEGER-RANGE: a double RFC 8785 writes as an unsafe integer cannot be read back."""
    with pytest.raises(InvalidJson) as caught:
        parse_json(f"[{text}]")
    assert caught.value.data["rule"] == "JSON-INTEGER-RANGE"
    assert caught.value.data["where"] == "/0"
    assert parse_json("[1e21]") == [1e21]
