"""The one digest form (DIG-FORM): "sha256:" + unpadded base64url of SHA-256 of canonical bytes."""

from __future__ import annotations

import base64
import hashlib
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hatp.errors import InvalidJson
from hatp.evidence import canonicalize, digest, digest_bytes, is_digest

DIGEST_SHAPE = re.compile(r"sha256:[A-Za-z0-9_-]{43}")


def _expected(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256:" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def test_digest_of_value_is_sha256_of_canonical_bytes_in_unpadded_base64url() -> None:
    """DIG-FORM: digest(v) = "sha256:" + b64url(sha256(RFC 8785 bytes of v)), no padding."""
    value = {"b": 1, "a": [1, 2.5, "é", None, True]}
    canonical = '{"a":[1,2.5,"é",null,true],"b":1}'.encode()
    assert canonicalize(value) == canonical
    assert digest(value) == _expected(canonical)


def test_digest_known_answers() -> None:
    """DIG-FORM: fixed answers, independent of this build (SHA-256 of b"{}" and b"")."""
    assert digest({}) == "sha256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"
    assert digest_bytes(b"") == "sha256:47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
    assert digest({}) == _expected(b"{}")
    assert digest_bytes(b"") == _expected(b"")


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -1.5, "", "x", [], {}, {"a": {"b": [1, 2, 3]}}, "\U0001f600", [1e21]],
)
def test_digest_text_has_the_one_form(value: Any) -> None:
    """DIG-FORM: 7-character prefix + 43 base64url characters, nothing else (no '=', '+', '/')."""
    text = digest(value)
    assert len(text) == 50
    assert DIGEST_SHAPE.fullmatch(text)
    assert text.startswith("sha256:")
    assert not set("=+/") & set(text[7:])
    assert is_digest(text)
    assert text == digest_bytes(canonicalize(value))


def test_digest_ignores_key_order_but_not_content() -> None:
    """DIG-FORM: equal values with different member order digest the same; others differ."""
    first = {"amount": 120, "currency": "EUR", "legs": [{"from": "AMS", "to": "LIS"}]}
    second = {"legs": [{"to": "LIS", "from": "AMS"}], "currency": "EUR", "amount": 120}
    assert digest(first) == digest(second)
    assert digest(first) != digest({**first, "amount": 121})
    assert digest([1, 2]) != digest([2, 1])
    assert digest(1) == digest(1.0)  # one canonical number form: both are "1"
    assert digest("1") != digest(1)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=256))
def test_digest_bytes_hashes_the_bytes_as_given(data: bytes) -> None:
    """DIG-FORM: digest_bytes does not canonicalize; it hashes exactly the bytes it is given."""
    text = digest_bytes(data)
    assert text == _expected(data)
    assert is_digest(text)


def test_digest_bytes_differs_from_digest_of_non_canonical_spelling() -> None:
    """DIG-FORM: only canonical bytes give the value's digest; whitespace changes digest_bytes."""
    assert digest_bytes(b'{"a":1}') == digest({"a": 1})
    assert digest_bytes(b'{"a": 1}') != digest({"a": 1})


def test_digest_refuses_value_without_canonical_form() -> None:
    """DIG-FORM: there is no digest of a value with no canonical bytes (e.g. NaN)."""
    with pytest.raises(InvalidJson):
        digest({"x": math.nan})


@pytest.mark.parametrize(
    "text",
    [
        "sha256:" + "A" * 43,
        "sha256:" + "-" * 43,
        "sha256:" + "_" * 43,
        "sha256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o",
    ],
)
def test_is_digest_accepts_well_formed(text: str) -> None:
    """DIG-FORM: any "sha256:" + 43 base64url characters is a digest string."""
    assert is_digest(text)


GOOD = "sha256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="none"),
        pytest.param(GOOD.encode(), id="bytes"),
        pytest.param(["sha256:" + "A" * 43], id="list"),
        pytest.param("", id="empty"),
        pytest.param("sha256:", id="prefix-only"),
        pytest.param("sha256:" + "A" * 42, id="42-chars"),
        pytest.param("sha256:" + "A" * 44, id="44-chars"),
        pytest.param(GOOD + "=", id="padded"),
        pytest.param("sha256:" + "A" * 42 + "=", id="padding-in-place"),
        pytest.param("sha256:" + "+" * 43, id="plus"),
        pytest.param("sha256:" + "/" * 43, id="slash"),
        pytest.param("SHA256:" + GOOD[7:], id="upper-prefix"),
        pytest.param("sha512:" + GOOD[7:], id="other-algorithm"),
        pytest.param(GOOD[7:], id="no-prefix"),
        pytest.param(" " + GOOD, id="leading-space"),
        pytest.param(GOOD + " ", id="trailing-space"),
        pytest.param(GOOD + "\n", id="trailing-newline"),
        pytest.param(GOOD + "\r\n", id="trailing-crlf"),
        pytest.param("sha256:" + "A" * 42 + "é", id="non-ascii"),
        pytest.param("sha256:" + "A" * 42 + "\uff21", id="fullwidth-letter"),
    ],
)
def test_is_digest_rejects_malformed(text: object) -> None:
    """DIG-FORM: wrong type, length, alphabet, padding, prefix or surrounding text is no digest."""
    assert not is_digest(text)
