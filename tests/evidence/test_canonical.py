"""Canonical JSON: the bytes every signature and digest covers are RFC 8785 (JCS-CANON).

The reference is the ``rfc8785`` package and, for numbers, ECMAScript's own
``JSON.stringify`` (run in Node.js). ``canonicalize`` has a fast ``orjson``
path for float-free, ASCII-keyed values; the hypothesis properties here prove
the fast path and the reference path produce the same bytes.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from itertools import islice
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from hatp.errors import InvalidJson
from hatp.evidence import canonicalize, digest, parse_json
from hatp.evidence._canonical import canonical_plain
from hatp.model import unreadable

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "jcs"
NODE_HELPER = Path(__file__).resolve().parent / "_node_es6.js"
VECTOR_NAMES = sorted(p.name[len("in_") : -len(".json")] for p in VECTORS.glob("in_*.json"))
MAX_SAFE = 2**53 - 1


def _double(bits: int) -> float:
    return struct.unpack(">d", bits.to_bytes(8, "big"))[0]


def _bits(value: float) -> str:
    return struct.pack(">d", value).hex()


# --------------------------------------------------------------------------- #
# RFC 8785 test vectors (JCS-CANON)
# --------------------------------------------------------------------------- #


def test_jcs_vector_set_is_complete() -> None:
    """JCS-CANON: the copied RFC 8785 vectors are all present, each with its expected output."""
    assert VECTOR_NAMES == ["arrays", "french", "structures", "unicode", "values", "weird"]
    for name in VECTOR_NAMES:
        assert (VECTORS / f"out_{name}.json").is_file(), name


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_jcs_vector_canonicalizes_to_expected_bytes(name: str) -> None:
    """JCS-CANON: canonicalize(parse_json(in_NAME.json)) is out_NAME.json byte for byte."""
    document = (VECTORS / f"in_{name}.json").read_bytes()
    expected = (VECTORS / f"out_{name}.json").read_bytes()
    assert canonicalize(parse_json(document)) == expected


def _es6_lines() -> list[tuple[int, str, str]]:
    text = (VECTORS / "es6_1000.txt").read_text(encoding="ascii")
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        bits, expected = line.split(",")
        rows.append((number, bits, expected))
    return rows


def test_es6_number_vectors_serialize_like_ecmascript() -> None:
    """JCS-CANON: each double in es6_1000.txt canonicalizes to its JSON.stringify text."""
    rows = _es6_lines()
    assert len(rows) == 1000
    wrong = []
    for number, bits, expected in rows:
        value = _double(int(bits, 16))
        # The vector file itself must be sound: the expected text names this double.
        assert float(expected) == value, f"line {number}: {bits},{expected} is not that double"
        got = canonicalize(value).decode("ascii")
        if got != expected:
            wrong.append(f"line {number}: {bits},{expected} -> canonicalize gave {got}")
    assert not wrong, f"{len(wrong)} of 1000 ES6 numbers differ:\n" + "\n".join(wrong[:50])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, b"0"),
        (-0.0, b"0"),
        (1.0, b"1"),
        (-1.5, b"-1.5"),
        (0.1, b"0.1"),
        (1e20, b"100000000000000000000"),
        (1e21, b"1e+21"),
        (1e-6, b"0.000001"),
        (1e-7, b"1e-7"),
        (5e-324, b"5e-324"),
        (1.7976931348623157e308, b"1.7976931348623157e+308"),
        (333333333.33333329, b"333333333.3333333"),
    ],
)
def test_number_boundaries_serialize_like_ecmascript(value: float, expected: bytes) -> None:
    """JCS-CANON: -0 is 0, integral doubles have no fraction, exponents start at 1e21 and 1e-7."""
    assert canonicalize(value) == expected
    assert canonicalize([value]) == b"[" + expected + b"]"


# --------------------------------------------------------------------------- #
# Strings, keys and structure (JCS-CANON), on both the fast and reference paths
# --------------------------------------------------------------------------- #

_ESCAPES = [
    ("\x00", b'"\\u0000"'),
    ("\x08", b'"\\b"'),
    ("\t", b'"\\t"'),
    ("\n", b'"\\n"'),
    ("\x0b", b'"\\u000b"'),
    ("\x0c", b'"\\f"'),
    ("\r", b'"\\r"'),
    ("\x1f", b'"\\u001f"'),
    ('"', b'"\\""'),
    ("\\", b'"\\\\"'),
    ("/", b'"/"'),
    ("\x7f", b'"\x7f"'),
    ("\u2028", '"\u2028"'.encode()),
    ("é€", '"é€"'.encode()),
    ("\U0001f600", '"\U0001f600"'.encode()),
    ("</script>", b'"</script>"'),
]


@pytest.mark.parametrize(("text", "expected"), _ESCAPES)
def test_strings_use_rfc8785_escapes_on_fast_path(text: str, expected: bytes) -> None:
    """JCS-CANON: only '"', '\\' and C0 controls are escaped, short forms where JSON has them."""
    assert canonicalize(text) == expected
    assert canonicalize({"k": [text]}) == b'{"k":[' + expected + b"]}"


@pytest.mark.parametrize(("text", "expected"), _ESCAPES)
def test_strings_use_rfc8785_escapes_on_reference_path(text: str, expected: bytes) -> None:
    """JCS-CANON: a float and a non-ASCII key (reference path) do not change string escaping."""
    got = canonicalize({"é": 0.5, "k": [text]})
    assert got == b'{"k":[' + expected + '],"é":0.5}'.encode()


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    """JCS-CANON: U+1F600 (UTF-16 D83D DE00) sorts before U+E000, unlike code-point order."""
    value = {"\ue000": 1, "\U0001f600": 2, "z": 3}
    assert canonicalize(value) == '{"z":3,"\U0001f600":2,"\ue000":1}'.encode()


def test_ascii_keys_sort_by_byte_value() -> None:
    """JCS-CANON: ASCII keys sort by code unit: "" < "1" < "10" < "B" < "_" < "a" < "~"."""
    value = {"~": 1, "a": 2, "_": 3, "B": 4, "10": 5, "1": 6, "": 7}
    assert canonicalize(value) == b'{"":7,"1":6,"10":5,"B":4,"_":3,"a":2,"~":1}'


def test_output_is_compact_utf8_without_whitespace() -> None:
    """JCS-CANON: no insignificant whitespace; literals, nesting and empty containers per RFC."""
    value = {"b": [True, False, None, {}, []], "a": {"x": -0, "y": MAX_SAFE, "z": -MAX_SAFE}}
    expected = (
        b'{"a":{"x":0,"y":9007199254740991,"z":-9007199254740991},"b":[true,false,null,{},[]]}'
    )
    assert canonicalize(value) == expected


def test_booleans_are_literals_not_integers() -> None:
    """JCS-CANON: True is true (bool is an int subclass in Python; must not print 1)."""
    assert canonicalize([True, 1, False, 0]) == b"[true,1,false,0]"
    assert canonicalize({"t": True}) == b'{"t":true}'


# --------------------------------------------------------------------------- #
# Refusals (JCS-CANON): values with no canonical form raise InvalidJson
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(-math.inf, id="-inf"),
        pytest.param([1, {"a": math.nan}], id="nested-nan"),
        pytest.param({"é": math.inf}, id="inf-under-non-ascii-key"),
    ],
)
def test_canonicalize_refuses_non_finite_numbers(value: Any) -> None:
    """JCS-CANON / JSON-NON-FINITE: NaN and ±Infinity have no JSON form."""
    with pytest.raises(InvalidJson) as caught:
        canonicalize(value)
    assert caught.value.code == "INVALID_JSON"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(2**53, id="2**53"),
        pytest.param(-(2**53), id="-(2**53)"),
        pytest.param(2**64, id="2**64"),
        pytest.param({"n": 2**53}, id="nested-fast-path"),
        pytest.param({"é": [2**53]}, id="nested-reference-path"),
    ],
)
def test_canonicalize_refuses_integers_beyond_safe_range(value: Any) -> None:
    """JCS-CANON / JSON-INTEGER-RANGE: integers outside ±(2**53-1) are refused."""
    with pytest.raises(InvalidJson) as caught:
        canonicalize(value)
    assert caught.value.code == "INVALID_JSON"


def test_canonicalize_accepts_integers_at_safe_range_edge() -> None:
    """JCS-CANON / JSON-INTEGER-RANGE: ±(2**53-1) are still integers with a canonical form."""
    assert canonicalize([MAX_SAFE, -MAX_SAFE]) == b"[9007199254740991,-9007199254740991]"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("\ud800", id="high-alone"),
        pytest.param("a\udfffb", id="low-alone"),
        pytest.param("\ude00\ud83d", id="reversed-pair"),
        pytest.param(["ok", {"k": "\udc00"}], id="nested-fast-path"),
        pytest.param({"é": "\ud800"}, id="nested-reference-path"),
    ],
)
def test_canonicalize_refuses_lone_surrogate_strings(value: Any) -> None:
    """JCS-CANON / JSON-LONE-SURROGATE: a lone surrogate has no UTF-8 form."""
    with pytest.raises(InvalidJson) as caught:
        canonicalize(value)
    assert caught.value.code == "INVALID_JSON"


@pytest.mark.parametrize("value", [{"\ud800": 1}, {"a": {"\udc00": 1, "b": 2}}])
def test_canonicalize_refuses_lone_surrogate_key(value: Any) -> None:
    """JCS-CANON / JSON-LONE-SURROGATE: a key holding a lone surrogate is refused as InvalidJson."""
    with pytest.raises(InvalidJson) as caught:
        canonicalize(value)
    assert caught.value.code == "INVALID_JSON"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({1: "x"}, id="int-key"),
        pytest.param({None: "x"}, id="none-key"),
        pytest.param({True: "x"}, id="bool-key"),
        pytest.param({1.5: "x"}, id="float-key"),
        pytest.param({"a": {2: "x"}}, id="nested-int-key"),
    ],
)
def test_canonicalize_refuses_non_string_keys(value: Any) -> None:
    """JCS-CANON: object member names are strings; Python's other key types are refused."""
    with pytest.raises(InvalidJson) as caught:
        canonicalize(value)
    assert caught.value.code == "INVALID_JSON"


_MOMENT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(object(), id="object"),
        pytest.param(_MOMENT, id="datetime"),
        pytest.param(date(2026, 12, 2), id="date"),
        pytest.param({"at": _MOMENT}, id="datetime-in-ascii-dict"),
        pytest.param([1, "x", _MOMENT], id="datetime-in-list"),
        pytest.param({"a": [{"b": _MOMENT}]}, id="datetime-deep"),
        pytest.param({1, 2}, id="set"),
        pytest.param({"s": {1, 2}}, id="set-in-dict"),
        pytest.param(frozenset({1}), id="frozenset"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param(Decimal("1.5"), id="decimal"),
        pytest.param(1 + 2j, id="complex"),
    ],
)
def test_canonicalize_refuses_non_json_types(value: Any) -> None:
    """JCS-CANON: only dict/list/str/int/float/bool/None are JSON; nothing is coerced."""
    with pytest.raises(InvalidJson) as caught:
        canonicalize(value)
    assert caught.value.code == "INVALID_JSON"


def test_canonicalize_refuses_datetime_that_orjson_would_serialize() -> None:
    """JCS-CANON: the orjson fast path must not leak orjson's datetime support."""
    value = {"at": _MOMENT, "n": 1}
    # Precondition that makes this test meaningful: orjson alone would accept it.
    assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS).startswith(b'{"at":"2026-12-02T09')
    with pytest.raises(InvalidJson):
        canonicalize(value)


def test_canonicalize_refuses_absurdly_deep_value_without_crashing() -> None:
    """JCS-CANON: a value nested deeper than the interpreter can walk is an InvalidJson."""
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(InvalidJson):
        canonicalize(value)


@pytest.mark.parametrize(
    "document", ["[1e20]", "[9007199254740992.0]", "[1.8446744073709552e19]", "[-1e16]"]
)
def test_reader_accepts_canonical_form_of_every_document_it_accepts(document: str) -> None:
    """JCS-CANON / JSON-INTEGER-RANGE: parse -> canonicalize -> parse never turns into a refusal.

    Either the reader refuses the document up front, or its canonical bytes read
    back and canonicalize to themselves; a verifier must be able to re-read what
    was signed.
    """
    try:
        value = parse_json(document)
    except InvalidJson as refused:
        assert refused.data["rule"] == "JSON-INTEGER-RANGE"
        return
    canonical = canonicalize(value)
    assert canonicalize(parse_json(canonical)) == canonical


# --------------------------------------------------------------------------- #
# Property tests against the rfc8785 reference (JCS-CANON)
# --------------------------------------------------------------------------- #

_TRICKY = [
    "\x00", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\x1f", "\x7f", "\x80", "\u2028",
    "\u2029", '"', "\\", "/", "\ufeff", "\uffff", "\U0001f600", "\U0010ffff", "é", "€",
    "<", "&", "'", "A",
]  # fmt: skip

_texts = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.text(st.sampled_from(_TRICKY), max_size=8),
    st.text(st.characters(codec="ascii"), max_size=8),
)
_ascii_keys = st.text(st.characters(codec="ascii"), max_size=6)
# Keys where UTF-16 order and code-point order disagree (U+E000..U+FFFF vs astral).
_sort_order_keys = st.text(
    st.sampled_from(["\ue000", "\uffff", "\U00010000", "\U0001f600", "\ud7ff", "a", "é", "~"]),
    min_size=1,
    max_size=3,
)
_any_keys = st.one_of(_ascii_keys, _texts, _sort_order_keys)
_ints = st.one_of(
    st.integers(-MAX_SAFE, MAX_SAFE),
    st.sampled_from([0, -1, MAX_SAFE, -MAX_SAFE, 2**31, -(2**31), 2**32, 2**52 + 1]),
)
_finite_floats = st.floats(allow_nan=False, allow_infinity=False)
# Doubles in [2**53, 1e21) are refused by the reader (JSON-INTEGER-RANGE): no round trip.
_round_trip_floats = _finite_floats.filter(lambda x: not 2**53 <= abs(x) < 1e21)


def _json_values(keys: st.SearchStrategy[str], floats: st.SearchStrategy[float] | None) -> Any:
    scalars = st.none() | st.booleans() | _ints | _texts
    if floats is not None:
        scalars = scalars | floats
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5)
        ),
        max_leaves=25,
    )


json_values = _json_values(_any_keys, _finite_floats)
fast_path_values = _json_values(_ascii_keys, None)
round_trip_values = _json_values(_any_keys, _round_trip_floats)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_canonicalize_equals_rfc8785_reference(value: Any) -> None:
    """JCS-CANON: for any JSON value canonicalize is byte-identical to rfc8785.dumps."""
    assert canonicalize(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(fast_path_values)
def test_orjson_fast_path_equals_rfc8785_reference(value: Any) -> None:
    """JCS-CANON: float-free, ASCII-keyed values (orjson path) match rfc8785 byte for byte."""
    assert canonicalize(value) == rfc8785.dumps(value)


# Integers past the safe range, and nesting near the strict reader's 64 levels.
_wide_ints = st.one_of(_ints, st.sampled_from([MAX_SAFE + 1, -MAX_SAFE - 1, 2**64, -(2**70)]))
plain_candidates = st.recursive(
    st.none() | st.booleans() | _wide_ints | _texts | _finite_floats,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(_any_keys, children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(plain_candidates, st.integers(0, 64))
def test_canonical_plain_is_canonical_and_readable_or_declines(value: Any, depth: int) -> None:
    """JCS-CANON, [JCS-READBACK]: canonical_plain answers only for a value whose
    canonical bytes it gives exactly (rfc8785's) and that the strict reader reads back;
    every value it declines still has its problem named by the careful path."""
    plain = canonical_plain(value, depth)
    if plain is None:
        return
    assert plain == rfc8785.dumps(value)
    assert unreadable(value, depth) is None


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        ({"a": 1.5}, 0),
        ({"é": 1}, 0),
        ({"a": "é", "b": [{"c": {'x\\"\U0001f600': 1}}]}, 0),
        ({"a": 'ü":', "b": {"\ue000": True}}, 0),
        ({1: "a"}, 0),
        ([MAX_SAFE + 1], 0),
        ({"a": [1]}, 63),
        ([[]], 63),
        ({"a": datetime(2026, 1, 1, tzinfo=UTC)}, 0),
        ({"a": "\ud800"}, 0),
        (1.0, 0),
    ],
)
def test_canonical_plain_declines_what_is_not_plain(value: Any, depth: int) -> None:
    """Floats, non-ASCII or non-text keys, unsafe integers, nesting to 64 levels, types
    that are not JSON and lone surrogates all take the careful path."""
    assert canonical_plain(value, depth) is None


def test_canonical_plain_takes_non_ascii_text_under_ascii_keys() -> None:
    """Text beyond ASCII in values (names, currencies) keeps the fast path, even text that
    looks like a key from inside a string; the bytes are rfc8785's."""
    value = {"name": "Zoë Müller", "note": 'a "ü": b', "price": ["12.00", "€"]}
    plain = canonical_plain(value)
    assert plain is not None
    assert plain == rfc8785.dumps(value)


def test_canonical_plain_takes_the_deepest_readable_nesting() -> None:
    """63 levels below ``depth`` 0 is still readable ([JSON-DEPTH] refuses the 64th)."""
    deep: Any = []
    for _ in range(63):
        deep = [deep]
    assert canonical_plain(deep) == rfc8785.dumps(deep)
    assert canonical_plain([deep]) is None


@settings(max_examples=300, deadline=None)
@given(round_trip_values)
def test_canonical_bytes_are_a_fixed_point_of_parse_and_canonicalize(value: Any) -> None:
    """JCS-CANON: canonicalize(parse_json(canonicalize(v))) == canonicalize(v)."""
    canonical = canonicalize(value)
    assert canonicalize(parse_json(canonical)) == canonical


@settings(max_examples=300, deadline=None)
@given(
    round_trip_values,
    st.one_of(st.none(), st.integers(0, 8), st.sampled_from(["\t", " ", "\n"])),
    st.booleans(),
)
def test_any_serialization_of_a_value_canonicalizes_the_same(
    value: Any, indent: int | str | None, ensure_ascii: bool
) -> None:
    """JCS-CANON: whitespace and \\u escaping in the input never change the canonical bytes."""
    document = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)
    assert canonicalize(parse_json(document)) == canonicalize(value)
    assert canonicalize(parse_json(document.encode("utf-8"))) == canonicalize(value)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(json_values, st.randoms(use_true_random=False))
def test_key_order_of_input_never_changes_output(value: Any, rnd: random.Random) -> None:
    """JCS-CANON: permuting the members of every object gives the same canonical bytes."""
    reordered = _shuffled(value, rnd)
    assert reordered == value
    assert canonicalize(reordered) == canonicalize(value)
    assert digest(reordered) == digest(value)


def test_key_order_example_with_reversed_insertion() -> None:
    """JCS-CANON: a concrete reversal, on the fast path and the reference path."""
    forward = {"a": 1, "b": [{"x": 1, "y": 2}], "c": "z"}
    backward = {"c": "z", "b": [{"y": 2, "x": 1}], "a": 1}
    assert canonicalize(forward) == canonicalize(backward) == b'{"a":1,"b":[{"x":1,"y":2}],"c":"z"}'
    assert canonicalize({"é": 1.5, **forward}) == canonicalize({**backward, "é": 1.5})


# --------------------------------------------------------------------------- #
# 1,000,000 doubles against Node's JSON.stringify (JCS-CANON)
# --------------------------------------------------------------------------- #

_SEED = 20261202
_RANDOM_COUNT = 1_000_000
_BATCHES = 4


def _special_doubles() -> Iterator[float]:
    """Boundary doubles: powers of ten and neighbours, subnormals, 2**k, -0.0, extremes."""
    yield from (0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308)
    yield from (float(MAX_SAFE), float(2**53), float(2**53 + 2), 0.1, 0.2, 0.3, 1 / 3, 2 / 3)
    for exponent in range(-325, 310):
        power = float(f"1e{exponent}")
        for value in (power, math.nextafter(power, 0.0), math.nextafter(power, math.inf)):
            yield value
            yield -value
    for exponent in (-7, -6, 20, 21):  # the exponent/decimal switch points of ES6
        for mantissa in range(1, 100):
            value = float(f"{mantissa / 10}e{exponent}")
            yield from (value, math.nextafter(value, 0.0), math.nextafter(value, math.inf))
    for exponent in range(-1074, 1024):
        yield math.ldexp(1.0, exponent)
    yield math.nextafter(2.2250738585072014e-308, 0.0)  # largest subnormal


def _random_doubles(rnd: random.Random, count: int) -> Iterator[float]:
    """``count`` finite doubles from uniformly random 64-bit patterns (NaN/Inf skipped)."""
    made = 0
    while made < count:
        bits = rnd.getrandbits(64)
        if (bits >> 52) & 0x7FF == 0x7FF:
            continue
        made += 1
        yield _double(bits)


def _extra_doubles(rnd: random.Random) -> Iterator[float]:
    """Random subnormals and short decimals, which random bit patterns rarely hit."""
    for _ in range(5_000):
        yield _double(rnd.getrandbits(52) | (rnd.getrandbits(1) << 63))
    for _ in range(20_000):
        yield float(f"{rnd.randrange(1, 10 ** rnd.randint(1, 17))}e{rnd.randint(-330, 310)}")


def _node_or_skip() -> str:
    node = shutil.which("node")
    if node is not None:
        return node
    message = "Node.js (`node`) is not on PATH; install Node.js to run the ES6 oracle test"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (required under CI)")
    pytest.skip(message)


@pytest.mark.slow
def test_million_random_doubles_match_node_json_stringify() -> None:
    """JCS-CANON: 1,000,000 seeded random doubles and boundaries match node's JSON.stringify."""
    node = _node_or_skip()
    rnd = random.Random(_SEED)
    values = list(_special_doubles())
    values.extend(_extra_doubles(rnd))
    values.extend(_random_doubles(rnd, _RANDOM_COUNT))
    values = [v for v in values if math.isfinite(v)]
    assert len(values) > _RANDOM_COUNT
    started = time.perf_counter()
    size = -(-len(values) // _BATCHES)
    wrong: list[str] = []
    compared = 0
    with subprocess.Popen(
        [node, str(NODE_HELPER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        for start in range(0, len(values), size):
            batch = values[start : start + size]
            hexes = [_bits(v) for v in batch]
            # The helper answers only after the empty line, so writing first cannot deadlock.
            proc.stdin.write("\n".join(hexes) + "\n\n")
            proc.stdin.flush()
            answers = [line.rstrip("\n") for line in islice(proc.stdout, len(batch))]
            assert len(answers) == len(batch), f"node stopped early: {proc.stderr.read()}"
            for bits, value, expected in zip(hexes, batch, answers, strict=True):
                got = canonicalize(value).decode("ascii")
                if got != expected:
                    wrong.append(f"{bits} ({value!r}): canonicalize {got} != node {expected}")
            compared += len(batch)
        proc.stdin.close()
        errors = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, errors
    elapsed = time.perf_counter() - started
    print(f"compared {compared} doubles with node in {elapsed:.1f}s", file=sys.stderr)
    assert compared == len(values)
    assert not wrong, f"{len(wrong)} doubles differ from JSON.stringify:\n" + "\n".join(wrong[:50])


def test_node_helper_script_is_present() -> None:
    """JCS-CANON: the Node oracle helper used by the slow test ships with the tests."""
    assert "JSON.stringify" in NODE_HELPER.read_text(encoding="utf-8")
