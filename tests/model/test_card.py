"""Human Cards: the form is checked strictly; anything else is CARD_INVALID reason SHAPE."""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from directory.people import card, passkey
from hatp.errors import CardInvalid, error_from_dict
from hatp.model import HumanCard, Status, WebAuthnKey, parse_card, parse_card_body

SIGNATURE = {"alg": "Ed25519", "kid": "acme-directory-1", "sig": "x"}
GOOD = {**card("bob"), "signature": SIGNATURE}
ED25519 = {"kty": "OKP", "crv": "Ed25519", "x": "A" * 43, "kid": "human://acme.com/bob#key-1"}


def test_a_good_card_parses_and_reads_back_as_it_was_written() -> None:
    """[CARD-SHAPE]"""
    doc = copy.deepcopy(GOOD)
    doc["keys"].append(ED25519)
    doc["authority"].append(
        {"action": "approve.spend", "maxAmount": {"value": "9000", "currency": "EUR"}}
    )
    parsed = parse_card(doc)
    assert isinstance(parsed, HumanCard)
    assert parsed.to_wire() == doc
    assert parsed.address.name == "bob"
    assert parsed.availability.status is Status.AVAILABLE
    assert parsed.has_passkey and isinstance(parsed.keys[0], WebAuthnKey)
    assert parsed.limits("approve.spend") == {"USD": Decimal(10000), "EUR": Decimal(9000)}
    assert parsed.limits("approve.wire") == {}
    assert parse_card(parsed) is parsed


def test_defaults_are_written_out_in_the_normal_form() -> None:
    doc = card("bob")
    for member in ("roles", "pools", "skills", "authority", "channels", "delegates", "keys"):
        del doc[member]
    body = parse_card_body(doc)
    assert body.to_wire()["pools"] == [] and not body.has_passkey


def _point_off_the_curve(d: dict[str, Any]) -> None:
    d["keys"][0]["y"] = d["keys"][0]["x"]


CASES: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    (
        "negative maxAmount",
        lambda d: d["authority"][0]["maxAmount"].update(value="-10000"),
        "/authority/0/maxAmount/value",
    ),
    (
        "maxAmount as a number",
        lambda d: d["authority"][0]["maxAmount"].update(value=10000),
        "/authority/0/maxAmount/value",
    ),
    (
        "two limits for one action and currency",
        lambda d: d["authority"].append(copy.deepcopy(d["authority"][0])),
        "/",
    ),
    ("bad timezone", lambda d: d["availability"].update(timezone="Mars/Olympus"), "/availability"),
    ("not a place", lambda d: d["availability"].update(timezone="localtime"), "/availability"),
    ("path timezone", lambda d: d["availability"].update(timezone="../etc/x"), "/availability"),
    ("unknown status", lambda d: d["availability"].update(status="asleep"), "/availability"),
    ("contact detail in channels", lambda d: d.update(channels=["sms:+15551234567"]), "/channels"),
    ("slack id in channels", lambda d: d.update(channels=["slack:U024BE7LH"]), "/channels"),
    (
        "channel as an object",
        lambda d: d.update(channels=[{"type": "email", "to": "bob@acme.com"}]),
        "/channels",
    ),
    ("unknown channel", lambda d: d.update(channels=["fax"]), "/channels"),
    ("channel twice", lambda d: d.update(channels=["sms", "sms"]), "/"),
    ("zero sla", lambda d: d["sla"].update(decideSeconds=0), "/sla/decideSeconds"),
    ("negative open", lambda d: d["capacity"].update(open=-1), "/capacity/open"),
    ("negative maxOpen", lambda d: d["capacity"].update(maxOpen=-1), "/capacity/maxOpen"),
    ("string capacity", lambda d: d["capacity"].update(open="2"), "/capacity/open"),
    ("id is an agent", lambda d: d.update(id="agent://acme.com/bob"), "/id"),
    ("id is a role", lambda d: d.update(id="human://acme.com/role/finance"), "/id"),
    ("id malformed", lambda d: d.update(id="human://acme.com/Bob"), "/id"),
    ("delegate is a role", lambda d: d.update(delegates=["human://acme.com/role/x"]), "/delegates"),
    ("self delegate", lambda d: d.update(delegates=["human://acme.com/bob"]), "/"),
    ("role twice", lambda d: d.update(roles=["a", "a"]), "/"),
    ("uppercase role", lambda d: d.update(roles=["Finance"]), "/roles"),
    ("unknown member", lambda d: d.update(phone="+15551234567"), "/phone"),
    ("no availability", lambda d: d.pop("availability"), "/availability"),
    ("webauthn off the curve", _point_off_the_curve, "/keys"),
    ("webauthn without rpId", lambda d: d["keys"][0].pop("rpId"), "/keys"),
    ("ed25519 key with use", lambda d: d.update(keys=[{**ED25519, "use": "sig"}]), "/keys"),
    ("unknown key type", lambda d: d.update(keys=[{**ED25519, "kty": "RSA"}]), "/keys"),
    ("kid twice", lambda d: d.update(keys=[passkey("bob"), passkey("bob")]), "/"),
    ("no signature", lambda d: d.pop("signature"), "/signature"),
]


@pytest.mark.parametrize(("why", "edit", "where"), CASES, ids=[c[0] for c in CASES])
def test_a_card_of_the_wrong_form_is_refused_as_shape(
    why: str, edit: Callable[[dict[str, Any]], object], where: str
) -> None:
    """[CARD-SHAPE]"""
    doc = copy.deepcopy(GOOD)
    edit(doc)
    with pytest.raises(CardInvalid) as caught:
        parse_card(doc)
    error = caught.value
    assert error.code == "CARD_INVALID" and error.reason == "SHAPE"
    assert error.data["where"].startswith(where), error.message
    assert error.data["card"] == doc.get("id")
    assert error_from_dict(error.to_dict()).to_dict() == error.to_dict()


def test_a_card_of_an_unknown_version_or_not_an_object_is_refused_as_shape() -> None:
    """[CARD-SHAPE]"""
    with pytest.raises(CardInvalid, match="version"):
        parse_card({**GOOD, "hatpVersion": "9.9"})
    with pytest.raises(CardInvalid, match="JSON object"):
        parse_card([GOOD])  # type: ignore[arg-type]
