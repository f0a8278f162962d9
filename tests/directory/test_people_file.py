"""``people.toml``: read whole, every refusal naming its key and line, cards signed from
it that keep the passkeys people registered."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hatp.directory import (
    Directory,
    add_passkey,
    build_directory,
    parse_people,
    read_people,
    verify_card,
    write_directory,
)
from hatp.errors import ConfigInvalid
from hatp.evidence import Keyring, SigningKey
from hatp.gateway import SoftwareAuthenticator
from hatp.model import Channel, Status

ISSUER = "https://directory.acme.example"
KEY = SigningKey.from_seed(bytes([7]) * 32, f"{ISSUER}#key-1")
OTHER = SigningKey.from_seed(bytes([8]) * 32, f"{ISSUER}#key-2")
KEYRING = Keyring([(KEY.public, ISSUER)], trusted_issuers=[ISSUER])

GOOD = """\
org = "acme.example"
timezone = "Europe/London"

[roles]
finance-approver = "approves spending"

[people.alice]
name = "Alice Martin"
roles = ["finance-approver"]
limits = { "approve.spend" = { USD = "10000", EUR = "9000.50" } }
delegates = ["bob"]
channels = ["web", "email"]

[people.bob]
name = "Bob Chen"
roles = ["finance-approver"]
limits = { "approve.spend" = { USD = 2000 } }
channels = ["terminal"]
passkey = false
status = "busy"
decide_seconds = 1800
max_open = 5
timezone = "America/New_York"
"""


def test_a_good_file_gives_each_member_or_its_default() -> None:
    """[PEOPLE-FILE] every member read; defaults: passkey true, status available,
    decide_seconds 900, max_open 10, the file's timezone."""
    people = parse_people(GOOD)
    alice, bob = people.people
    assert people.org == "acme.example"
    assert people.roles == {"finance-approver": "approves spending"}
    assert alice.limits == {"approve.spend": {"USD": Decimal("10000"), "EUR": Decimal("9000.50")}}
    assert alice.delegates == ("bob",)
    assert alice.channels == (Channel.WEB, Channel.EMAIL)
    assert (alice.passkey, alice.status, alice.decide_seconds, alice.max_open) == (
        True,
        Status.AVAILABLE,
        900,
        10,
    )
    assert alice.timezone == "Europe/London"
    assert (bob.passkey, bob.status, bob.decide_seconds, bob.max_open, bob.timezone) == (
        False,
        Status.BUSY,
        1800,
        5,
        "America/New_York",
    )
    assert bob.limits == {"approve.spend": {"USD": Decimal("2000")}}


def test_the_cards_built_verify_and_say_what_the_file_says() -> None:
    """[PEOPLE-BUILD] each person's card signed by the directory key, verified by the
    keyring; authority one entry per action and currency; delegates as addresses."""
    directory = build_directory(parse_people(GOOD), ISSUER, KEY)
    alice = verify_card(directory.signed("human://acme.example/alice"), KEYRING)
    assert alice.display_name == "Alice Martin"
    assert alice.limits("approve.spend") == {"USD": Decimal("10000"), "EUR": Decimal("9000.50")}
    assert alice.delegates == ["human://acme.example/bob"]
    assert alice.keys == []
    bob = directory.card("human://acme.example/bob")
    assert (bob.sla.decide_seconds, bob.capacity.max_open, bob.capacity.open) == (1800, 5, 0)


def _line(text: str, needle: str) -> int:
    return next(i for i, row in enumerate(text.splitlines(), 1) if needle in row)


#: (what is changed, into what, the key refused, the text on the line at fault)
BAD = [
    ('roles = ["finance-approver"]\nlimits = { "approve.spend" = { USD = 2000',
     'roles = ["auditor"]\nlimits = { "approve.spend" = { USD = 2000',
     "people.bob.roles", 'roles = ["auditor"]'),
    ('delegates = ["bob"]', 'delegates = ["dave"]', "people.alice.delegates", '"dave"'),
    ('delegates = ["bob"]', 'delegates = ["alice"]', "people.alice.delegates", '["alice"]'),
    ('USD = 2000', 'USD = -5', "people.bob.limits.approve.spend.USD", "USD = -5"),
    ('USD = 2000', 'USD = "-5.00"', "people.bob.limits.approve.spend.USD", '"-5.00"'),
    ('USD = 2000', 'USD = "2,000"', "people.bob.limits.approve.spend.USD", '"2,000"'),
    ('USD = 2000', 'USD = 2000.5', "people.bob.limits.approve.spend.USD", "2000.5"),
    ('USD = 2000', 'usd = 2000', "people.bob.limits.approve.spend.usd", "usd = 2000"),
    ('USD = 2000', 'DOLLARS = 2000', "people.bob.limits.approve.spend.DOLLARS", "DOLLARS"),
    ('channels = ["terminal"]', 'channels = ["pager"]', "people.bob.channels", '"pager"'),
    ('channels = ["web", "email"]', 'channels = ["email"]', "people.alice.passkey",
     "[people.alice]"),
    ("[people.bob]", "[people.Bob]", "people.Bob", "[people.Bob]"),
    ('org = "acme.example"', 'org = "Acme Example"', "org", "Acme Example"),
    ('status = "busy"', 'status = "asleep"', "people.bob.status", "asleep"),
    ("max_open = 5", "max_open = -1", "people.bob.max_open", "max_open = -1"),
    ("max_open = 5", "max_opn = 5", "people.bob.max_opn", "max_opn"),
    ('timezone = "America/New_York"', 'timezone = "Mars/Olympus"', "people.bob.timezone",
     "Mars/Olympus"),
    ('name = "Bob Chen"', 'name = ""', "people.bob.name", 'name = ""'),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "key", "at"), BAD, ids=[b[2] + ":" + b[1] for b in BAD])
def test_each_refusal_names_its_key_and_line(old: str, new: str, key: str, at: str) -> None:
    """[PEOPLE-LINE] an unknown role, a delegate who is not a person (or oneself), a negative,
    non-decimal or float limit, a currency that is not ISO 4217, an unknown channel, a
    passkey without the web channel, a bad address or org, an unknown key: CONFIG_INVALID,
    ``data.key`` the key, ``data.line`` its line, the message ``people.toml:LINE: KEY:``."""
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    with pytest.raises(ConfigInvalid) as refused:
        parse_people(text)
    line = _line(text, at)
    assert refused.value.data == {"key": key, "line": line, "file": "people.toml"}
    assert refused.value.message.startswith(f"people.toml:{line}: {key}: ")


def test_a_person_twice_is_refused_at_the_second_table() -> None:
    """[PEOPLE-LINE] a duplicate person: TOML's own refusal, with its line."""
    text = GOOD + '\n[people.alice]\nname = "Alice Again"\n'
    with pytest.raises(ConfigInvalid) as refused:
        parse_people(text)
    assert refused.value.data["line"] == len(GOOD.splitlines()) + 2
    assert "not TOML" in refused.value.message


def test_text_that_is_not_toml_names_the_line() -> None:
    text = GOOD.replace('name = "Bob Chen"', "name = Bob Chen")
    with pytest.raises(ConfigInvalid) as refused:
        parse_people(text, source="org/people.toml")
    line = _line(text, "name = Bob Chen")
    assert refused.value.message.startswith(f"org/people.toml:{line}: not TOML")
    assert refused.value.data["line"] == line


def test_a_file_without_people_or_org_is_refused() -> None:
    with pytest.raises(ConfigInvalid) as no_people:
        parse_people('org = "acme.example"\n')
    assert no_people.value.data["key"] == "people"
    with pytest.raises(ConfigInvalid) as no_org:
        parse_people('[people.bob]\nname = "Bob"\n')
    assert no_org.value.data["key"] == "org"


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="cannot read"):
        read_people(tmp_path / "people.toml")


@given(st.text(max_size=200))
def test_any_text_is_read_or_refused_typed(text: str) -> None:
    """[PEOPLE-FILE] whatever the text, a People or CONFIG_INVALID with a line in the text."""
    try:
        parse_people(text)
    except ConfigInvalid as refused:
        assert 1 <= refused.data["line"] <= max(1, text.count("\n") + 1)


def test_building_again_keeps_registered_passkeys(tmp_path: Path) -> None:
    """[PEOPLE-BUILD] a passkey registered onto alice's card stays on her card when the file
    is built again after an edit; a person removed from the file loses their card."""
    path = tmp_path / "directory.json"
    write_directory(parse_people(GOOD), ISSUER, KEY, path)
    passkey = SoftwareAuthenticator("localhost", "human://acme.example/alice#passkey-1")
    directory = Directory.load(path, KEYRING)
    with directory.editing():
        signed = add_passkey(
            directory.signed("human://acme.example/alice"), passkey.key_entry(), KEY
        )
        directory.replace_card(signed, KEYRING)
    edited = GOOD.replace('USD = "10000"', 'USD = "12000"').split("[people.bob]")[0]
    edited = edited.replace('delegates = ["bob"]', "delegates = []")
    rebuilt = write_directory(parse_people(edited), ISSUER, KEY, path)
    alice = Directory.load(path, KEYRING).card("human://acme.example/alice")
    assert alice.has_passkey and alice.limits("approve.spend")["USD"] == Decimal("12000")
    assert [c.id for c in rebuilt.cards()] == ["human://acme.example/alice"]


def test_replacing_a_file_another_key_signed_is_refused(tmp_path: Path) -> None:
    """[PEOPLE-BUILD] the passkeys of a file this key cannot vouch for would be lost."""
    path = tmp_path / "directory.json"
    write_directory(parse_people(GOOD), ISSUER, OTHER, path)
    before = path.read_bytes()
    with pytest.raises(ConfigInvalid) as refused:
        write_directory(parse_people(GOOD), ISSUER, KEY, path)
    assert refused.value.data["key"] == "out"
    assert path.read_bytes() == before
