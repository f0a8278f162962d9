"""Signed cards: a card with a bad or missing signature, or nobody's issuer, is never used."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from directory.people import DIRECTORY_KEY, ISSUER, OTHER_KEY, card, keyring, signed
from hatp.directory import sign_card, verify_card
from hatp.errors import CardInvalid, error_from_dict
from hatp.evidence import Keyring, SigningKey, sign


def _refused(doc: Any, ring: Keyring | None = None) -> CardInvalid:
    with pytest.raises(CardInvalid) as caught:
        verify_card(doc, ring or keyring())
    assert error_from_dict(caught.value.to_dict()).to_dict() == caught.value.to_dict()
    return caught.value


def test_a_card_the_directory_signed_verifies() -> None:
    """[CARD-SIGNED]"""
    doc = signed("bob")
    assert doc["signature"]["kid"] == "acme-directory-1"
    verified = verify_card(doc, keyring())
    assert verified.id == "human://acme.com/bob"
    assert verified.to_wire() == doc


def test_a_changed_card_is_refused_as_signature() -> None:
    """[CARD-SIGNED] Raising one's own limit breaks the directory's signature."""
    doc = signed("bob")
    doc["authority"][0]["maxAmount"]["value"] = "1000000"
    error = _refused(doc)
    assert error.reason == "SIGNATURE"
    assert error.data["card"] == "human://acme.com/bob"
    assert error.data["signatureReason"] == "BAD_SIGNATURE"


@pytest.mark.parametrize(
    ("edit", "signature_reason"),
    [
        (lambda d: d.pop("signature"), "MISSING"),
        (lambda d: d["signature"].update(alg="none"), "ALG_NONE"),
        (lambda d: d["signature"].update(sig=d["signature"]["sig"] + "="), "BAD_ENCODING"),
    ],
)  # fmt: skip
def test_a_missing_or_malformed_signature_is_refused_as_signature(
    edit: Any, signature_reason: str
) -> None:
    """[CARD-SIGNED]"""
    doc = signed("bob")
    edit(doc)
    error = _refused(doc)
    assert (error.reason, error.data["signatureReason"]) == ("SIGNATURE", signature_reason)


def test_a_card_signed_by_an_untrusted_issuer_is_refused_as_issuer() -> None:
    """[CARD-SIGNED] The forged card: a key the keyring knows but whose issuer nobody trusts."""
    forged = sign_card(card("mallory", "99999999", issuer="https://evil.example"), OTHER_KEY)
    error = _refused(forged)
    assert error.reason == "ISSUER" and error.data["signatureReason"] == "ISSUER_UNTRUSTED"


def test_a_card_signed_by_an_unknown_key_is_refused_as_issuer() -> None:
    """[CARD-SIGNED]"""
    stranger = SigningKey.from_seed(bytes([9]) * 32, "stranger-1")
    error = _refused(sign_card(card("bob"), stranger))
    assert error.reason == "ISSUER" and error.data["signatureReason"] == "KID_UNKNOWN"


def test_a_card_naming_another_issuer_than_its_signer_is_refused_as_issuer() -> None:
    """[CARD-SIGNED] A trusted directory cannot vouch for another directory's people."""
    other = "https://directory.partner.example"
    partner = SigningKey.from_seed(bytes([10]) * 32, "partner-1")
    ring = keyring()
    ring.add(partner.public, other)
    ring.trust(other)
    doc = sign_card(card("bob"), partner)  # the card says issuer acme, partner signed it
    error = _refused(doc, ring)
    assert error.reason == "ISSUER"
    assert "partner-1" in error.message


def test_a_signed_card_of_the_wrong_form_is_refused_as_shape() -> None:
    """[CARD-SHAPE] The signature is right, the content is not a card."""
    body = card("bob")
    body["channels"] = ["sms:+15551234567"]
    doc = sign(body, DIRECTORY_KEY)
    error = _refused(doc)
    assert error.reason == "SHAPE" and error.data["where"] == "/channels/0"


def test_sign_card_refuses_a_card_of_the_wrong_form_or_already_signed() -> None:
    """[CARD-SHAPE]"""
    with pytest.raises(CardInvalid, match="maxAmount"):
        sign_card(card("bob", "-5"), DIRECTORY_KEY)
    with pytest.raises(CardInvalid) as caught:
        sign_card(signed("bob"), DIRECTORY_KEY)
    assert caught.value.data["where"] == "/signature"


def test_refusals_of_non_objects_and_unknown_versions_are_shape() -> None:
    """[CARD-SHAPE]"""
    assert _refused(["not", "a", "card"]).reason == "SHAPE"
    doc = copy.deepcopy(signed("bob"))
    doc["hatpVersion"] = "9.9"
    assert _refused(doc).reason == "SHAPE"
    assert ISSUER in keyring().to_json()["trustedIssuers"]
