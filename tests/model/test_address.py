"""Addresses: the four forms parse to typed values; everything else is ADDRESS_INVALID."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.errors import ADDRESS_REASONS, AddressInvalid, error_from_dict
from hatp.model import MAX_QUORUM, Address, AddressKind, parse_address

GOOD = [
    ("human://acme.com/bob", AddressKind.PERSON, "acme.com", "bob", (1, 1), None),
    (
        "human://acme.com/role/finance-approver?quorum=2-of-3",
        AddressKind.ROLE,
        "acme.com",
        "finance-approver",
        (2, 3),
        None,
    ),
    (
        "human://acme.com/pool/security-leads?skill=sox",
        AddressKind.POOL,
        "acme.com",
        "security-leads",
        (1, 1),
        "sox",
    ),
    ("agent://acme.com/travel-bot", AddressKind.AGENT, "acme.com", "travel-bot", (1, 1), None),
    ("human://eu.acme.com/role/r", AddressKind.ROLE, "eu.acme.com", "r", (1, 1), None),
    (
        "human://acme.com/pool/p?skill=s.1&quorum=32-of-32",
        AddressKind.POOL,
        "acme.com",
        "p",
        (32, 32),
        "s.1",
    ),
]


@pytest.mark.parametrize(("text", "kind", "org", "name", "quorum", "skill"), GOOD)
def test_the_four_forms_parse_to_typed_values(
    text: str,
    kind: AddressKind,
    org: str,
    name: str,
    quorum: tuple[int, int],
    skill: str | None,
) -> None:
    """[ADDR-FORM]"""
    address = parse_address(text)
    assert (address.kind, address.org, address.name) == (kind, org, name)
    assert (address.quorum, address.skill) == (quorum, skill)
    assert str(address) == text
    assert address.is_human is (kind is not AddressKind.AGENT)


def test_query_order_and_an_explicit_one_of_one_parse_to_the_canonical_form() -> None:
    """[ADDR-FORM] Only these two spellings are normalized; str() is the canonical one."""
    pool = parse_address("human://acme.com/pool/p?quorum=2-of-3&skill=sox")
    assert str(pool) == "human://acme.com/pool/p?skill=sox&quorum=2-of-3"
    role = parse_address("human://acme.com/role/r?quorum=1-of-1")
    assert str(role) == "human://acme.com/role/r"
    assert role == parse_address("human://acme.com/role/r")


BAD = [
    ("NOT_TEXT", 42),
    ("NOT_TEXT", ""),
    ("NOT_TEXT", "human://acme.com/" + "b" * 600),
    ("WHITESPACE", "human://acme.com/bob "),
    ("WHITESPACE", " human://acme.com/bob"),
    ("WHITESPACE", "human://acme.com/b\tob"),
    ("WHITESPACE", "human://acme.com/bob\n"),
    ("WHITESPACE", "human://acme.com/b\u00a0ob"),
    ("PERCENT_ENCODING", "human://acme.com/b%6Fb"),
    ("PERCENT_ENCODING", "human://acme.com/role/r?quorum=2%2Dof-3"),
    ("SCHEME", "HUMAN://acme.com/bob"),
    ("SCHEME", "Human://acme.com/bob"),
    ("SCHEME", "human:/acme.com/bob"),
    ("SCHEME", "mailto:bob@acme.com"),
    ("SCHEME", "humans://acme.com/bob"),
    ("ORG", "human://Acme.com/bob"),
    ("ORG", "human://acme.com:443/bob"),
    ("ORG", "human://bob@acme.com/bob"),
    ("ORG", "human://-acme.com/bob"),
    ("ORG", "human://acme..com/bob"),
    ("EMPTY_PART", "human:///bob"),
    ("EMPTY_PART", "human://acme.com//bob"),
    ("EMPTY_PART", "human://acme.com/role/r?"),
    ("EMPTY_PART", "human://acme.com/role/r?quorum="),
    ("EMPTY_PART", "human://acme.com/role/r?quorum=2-of-3&"),
    ("EMPTY_PART", "human://acme.com/pool/p?=sox"),
    ("TRAILING_SLASH", "human://acme.com/bob/"),
    ("TRAILING_SLASH", "human://acme.com/"),
    ("DOT_SEGMENT", "human://acme.com/../bob"),
    ("DOT_SEGMENT", "human://acme.com/role/.."),
    ("DOT_SEGMENT", "human://acme.com/b..ob"),
    ("DOT_SEGMENT", "human://acme.com/pool/p?skill=a..b"),
    ("PATH", "human://acme.com"),
    ("PATH", "human://acme.com/team/finance"),
    ("PATH", "human://acme.com/role/r/extra"),
    ("PATH", "agent://acme.com/role/bot"),
    ("NAME", "human://acme.com/Bob"),
    ("NAME", "human://acme.com/-bob"),
    ("NAME", "human://acme.com/b\u00f6b"),
    ("NAME", "human://acme.com/bob#frag"),
    ("NAME", "human://acme.com/" + "b" * 65),
    ("NAME", "human://acme.com/pool/p?skill=SOX"),
    ("RESERVED_NAME", "human://acme.com/role"),
    ("RESERVED_NAME", "human://acme.com/pool"),
    ("QUERY_KEY", "human://acme.com/bob?quorum=2-of-3"),
    ("QUERY_KEY", "agent://acme.com/bot?skill=x"),
    ("QUERY_KEY", "human://acme.com/role/r?skill=sox"),
    ("QUERY_KEY", "human://acme.com/role/r?Quorum=2-of-3"),
    ("QUERY_KEY", "human://acme.com/pool/p?skill=sox&level=9"),
    ("DUPLICATE_KEY", "human://acme.com/pool/p?skill=a&skill=b"),
    ("DUPLICATE_KEY", "human://acme.com/role/r?quorum=1-of-2&quorum=1-of-2"),
    ("QUORUM", "human://acme.com/role/r?quorum=3-of-2"),
    ("QUORUM", "human://acme.com/role/r?quorum=0-of-2"),
    ("QUORUM", "human://acme.com/role/r?quorum=02-of-3"),
    ("QUORUM", "human://acme.com/role/r?quorum=2-of-33"),
    ("QUORUM", "human://acme.com/role/r?quorum=2of3"),
    ("QUORUM", "human://acme.com/role/r?quorum=-1-of-3"),
    ("QUORUM", "human://acme.com/role/r?quorum=2-of-3?x"),
]


@pytest.mark.parametrize(("reason", "text"), BAD, ids=[f"{r}-{i}" for i, (r, _) in enumerate(BAD)])
def test_a_malformed_address_is_refused_with_its_reason(reason: str, text: object) -> None:
    """[ADDR-FORM]"""
    with pytest.raises(AddressInvalid) as caught:
        parse_address(text)
    error = caught.value
    assert error.code == "ADDRESS_INVALID"
    assert error.reason == reason, error.message
    assert error.data["address"] == (text if isinstance(text, str) else None)
    assert "invalid:" in error.message
    assert error_from_dict(error.to_dict()).to_dict() == error.to_dict()


def test_every_reason_but_resolving_an_agent_has_a_case_here() -> None:
    assert {reason for reason, _ in BAD} | {"NOT_HUMAN"} == set(ADDRESS_REASONS)


NAMES = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}(\.[a-z0-9_-]{1,5})?", fullmatch=True)
ORGS = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\.[a-z0-9]{1,6}){0,3}", fullmatch=True)


@st.composite
def addresses(draw: st.DrawFn) -> Address:
    kind = draw(st.sampled_from(AddressKind))
    org, name = draw(ORGS), draw(NAMES)
    if kind in (AddressKind.PERSON, AddressKind.AGENT):
        if kind is AddressKind.PERSON and name in ("role", "pool"):
            name = "x" + name
        return Address(kind, org, name)
    m = draw(st.integers(1, MAX_QUORUM))
    quorum = (draw(st.integers(1, m)), m)
    skill = draw(st.none() | NAMES) if kind is AddressKind.POOL else None
    return Address(kind, org, name, quorum, skill)


@given(addresses())
def test_every_address_round_trips_through_its_canonical_form(address: Address) -> None:
    """[ADDR-FORM]"""
    text = str(address)
    assert parse_address(text) == address
    assert str(parse_address(text)) == text


@given(st.text(max_size=80))
def test_any_text_parses_or_is_refused_as_address_invalid(text: str) -> None:
    """[ADDR-FORM] Never another exception; what parses is printed back the same way."""
    try:
        address = parse_address(text)
    except AddressInvalid as exc:
        assert exc.reason in ADDRESS_REASONS
    else:
        assert parse_address(str(address)) == address


@given(addresses(), st.sampled_from(["%41", " ", "/", "..", "?", "#", "&quorum=1-of-1", "A"]))
def test_appending_junk_to_an_address_is_refused_or_means_the_same(
    address: Address, junk: str
) -> None:
    """[ADDR-FORM] Only a default quorum spelled out can be added without a refusal."""
    try:
        again = parse_address(str(address) + junk)
    except AddressInvalid:
        return
    assert junk == "&quorum=1-of-1"
    assert again == address
