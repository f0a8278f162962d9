"""The directory file: loaded with the strict reader, refused whole if one card is bad."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from directory.people import DIRECTORY_KEY, ISSUER, OTHER_KEY, card, directory, keyring, signed
from hatp.directory import Directory, sign_card, well_known
from hatp.errors import CardInvalid
from hatp.model import WELL_KNOWN_PATH, WellKnown


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_a_directory_saves_and_loads_back_the_same_signed_cards(tmp_path: Path) -> None:
    """[CARD-SIGNED]"""
    found = directory(signed("carol"), signed("bob"))
    found.save(tmp_path / "directory.json")
    loaded = Directory.load(tmp_path / "directory.json", keyring())
    assert [c.id for c in loaded.cards()] == ["human://acme.com/bob", "human://acme.com/carol"]
    assert loaded.to_json() == found.to_json()
    assert loaded.card("human://acme.com/bob").display_name == "Bob"
    assert len(loaded) == 2 and loaded.issuer == ISSUER
    with pytest.raises(KeyError):
        loaded.card("human://acme.com/nobody")


def test_one_bad_card_refuses_the_whole_file_and_names_the_card(tmp_path: Path) -> None:
    """[CARD-SIGNED] Fail closed: no directory is built from the cards that did verify."""
    tampered = signed("erin", "500")
    tampered["authority"][0]["maxAmount"]["value"] = "500000"
    doc = {"hatpVersion": "0.1", "issuer": ISSUER, "cards": [signed("bob"), tampered]}
    with pytest.raises(CardInvalid) as caught:
        Directory.load(_write(tmp_path / "d.json", doc), keyring())
    error = caught.value
    assert (error.reason, error.data["card"], error.data["index"]) == (
        "SIGNATURE",
        "human://acme.com/erin",
        1,
    )
    assert error.message.startswith("card 1: card human://acme.com/erin is not used")


def test_a_forged_card_from_an_untrusted_directory_refuses_the_file(tmp_path: Path) -> None:
    """[CARD-SIGNED]"""
    forged = sign_card(card("mallory", issuer="https://evil.example"), OTHER_KEY)
    doc = {"hatpVersion": "0.1", "issuer": ISSUER, "cards": [forged]}
    with pytest.raises(CardInvalid) as caught:
        Directory.load(_write(tmp_path / "d.json", doc), keyring())
    assert caught.value.reason == "ISSUER"


def test_a_card_of_another_trusted_issuer_or_a_second_card_for_one_id_is_refused() -> None:
    """[CARD-SIGNED] [CARD-SHAPE]"""
    ring = keyring()
    ring.trust("https://evil.example")
    other = sign_card(card("mallory", issuer="https://evil.example"), OTHER_KEY)
    with pytest.raises(CardInvalid) as caught:
        Directory(ISSUER, [other], ring)
    assert caught.value.reason == "ISSUER" and caught.value.data["index"] == 0
    with pytest.raises(CardInvalid) as caught:
        directory(signed("bob"), signed("bob", "5"))
    assert caught.value.reason == "SHAPE" and caught.value.data["card"] == "human://acme.com/bob"


@pytest.mark.parametrize(
    "text",
    [
        b"not json",
        b'{"hatpVersion": "0.1", "issuer": "a", "issuer": "b", "cards": []}',
        b'{"hatpVersion": "0.1", "issuer": "a"}',
        b'{"hatpVersion": "9", "issuer": "a", "cards": []}',
        b'[{"hatpVersion": "0.1"}]',
    ],
)
def test_a_file_that_is_not_a_directory_file_is_refused_as_shape(
    tmp_path: Path, text: bytes
) -> None:
    """[CARD-SHAPE] Read with the strict JSON reader: duplicate keys are refused too."""
    (tmp_path / "d.json").write_bytes(text)
    with pytest.raises(CardInvalid) as caught:
        Directory.load(tmp_path / "d.json", keyring())
    assert caught.value.reason == "SHAPE" and caught.value.data["card"] is None


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CardInvalid, match="cannot read"):
        Directory.load(tmp_path / "missing.json", keyring())


def test_the_well_known_document_publishes_directory_gateway_and_card_keys() -> None:
    """[DIR-WELLKNOWN]"""
    doc = well_known(ISSUER, "https://gateway.acme.com", [DIRECTORY_KEY.public])
    assert WELL_KNOWN_PATH == "/.well-known/human-card.json"
    assert doc == {
        "hatpVersion": "0.1",
        "directory": ISSUER,
        "gateway": "https://gateway.acme.com",
        "cardSigningKeys": [DIRECTORY_KEY.public.to_jwk()],
    }
    assert WellKnown.model_validate(doc).to_wire() == doc
    with pytest.raises(ValueError, match=r"card_signing_keys|cardSigningKeys"):
        well_known(ISSUER, "https://gateway.acme.com", [])
