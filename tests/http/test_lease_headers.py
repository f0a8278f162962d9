"""The PTCL headers' encodings: base64url of canonical JSON, and the decimal fence token."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.errors import HeaderInvalid, InvalidJson
from hatp.evidence import canonicalize, parse_json
from hatp.http import FENCE_HEADER, decode_header, encode_header, parse_fence_token

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), _json, max_size=6))
def test_a_document_travels_as_unpadded_base64url_of_its_canonical_json(
    doc: dict[str, Any],
) -> None:
    """[HTTP-LEASE-HEADER] encode_header is base64url (RFC 4648 §5, no '=') of RFC 8785."""
    value = encode_header(doc)
    assert "=" not in value
    assert set(value) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_header(value) == canonicalize(doc)
    assert parse_json(decode_header(value)) == doc


@given(st.binary(max_size=200))
def test_decoding_never_raises_on_garbage_bytes(raw: bytes) -> None:
    """[HTTP-LEASE-HEADER] whatever arrives, the verifier gets bytes to refuse."""
    assert isinstance(decode_header(raw), bytes)


@given(st.text(max_size=200))
def test_decoding_never_raises_on_garbage_text(text: str) -> None:
    assert isinstance(decode_header(text), bytes)


@pytest.mark.parametrize(
    "value",
    [
        "e30=",  # padded
        "e31",  # unused low bits set: another spelling of b"{}"
        "e30",  # the canonical spelling, for contrast below
        "e3+0",  # base64, not base64url
        "e 30",
        "a",  # a length no base64 has
    ],
)
def test_only_the_canonical_spelling_is_decoded(value: str) -> None:
    """[HTTP-LEASE-HEADER] any other spelling is handed on as the bytes received."""
    expected = b"{}" if value == "e30" else value.encode()
    assert decode_header(value) == expected


def test_spaces_around_a_header_value_are_not_part_of_it() -> None:
    assert decode_header(" \te30 ") == b"{}"
    assert parse_fence_token(" 8\t") == 8


def test_a_document_with_no_canonical_form_is_not_encoded() -> None:
    with pytest.raises(InvalidJson):
        encode_header({"amount": float("nan")})


@pytest.mark.parametrize(("value", "epoch"), [("0", 0), ("8", 8), (str(2**63 - 1), 2**63 - 1)])
def test_a_fence_token_is_one_decimal_integer(value: str, epoch: int) -> None:
    """[HTTP-FENCE-TOKEN] one spelling per value."""
    assert parse_fence_token(value) == epoch
    assert parse_fence_token(value.encode()) == epoch


@pytest.mark.parametrize(
    "value", ["", "08", "-1", "+1", "1e3", "1.0", "0x10", "٣", str(2**63), "1,1", "1 1"]
)
def test_any_other_fence_token_is_header_invalid(value: str) -> None:
    """[HTTP-FENCE-TOKEN] no sign, no leading zero, no other digits than 0-9, below 2^63."""
    with pytest.raises(HeaderInvalid) as caught:
        parse_fence_token(value)
    assert caught.value.data == {"header": FENCE_HEADER}
    assert FENCE_HEADER in caught.value.message


def test_base64url_of_the_lease_is_what_the_standard_library_reads() -> None:
    value = encode_header({"kind": "compensation-lease", "tReqMs": 60000})
    assert base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)) == (
        b'{"kind":"compensation-lease","tReqMs":60000}'
    )
