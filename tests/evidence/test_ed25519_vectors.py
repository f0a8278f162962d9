"""Our Ed25519 verify path against published vectors: Wycheproof and RFC 8032 §7.1.

The Wycheproof file is a byte-identical copy kept in ``tests/vectors`` so the
suite runs offline; its digest and counts are pinned so a truncated or edited
copy fails loudly instead of silently testing less.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hatp.errors import SignatureInvalid
from hatp.evidence import PublicKey, SigningKey

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "wycheproof" / "ed25519_test.json"
#: sha256 of the upstream file the copy was taken from.
VECTORS_SHA256 = "752d2ea7d7c6cf4736381b6cbacb61f8182b126ab7cd9b058f00c50084975536"
SIGNATURE_LENGTH = 64


def _load_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    doc = json.loads(VECTORS.read_bytes())
    return [(group, case) for group in doc["testGroups"] for case in group["tests"]]


CASES = _load_cases()


def _key_from_hex(group: dict[str, Any]) -> PublicKey:
    return PublicKey(bytes.fromhex(group["publicKey"]["pk"]), kid="wp")


def _key_from_jwk(group: dict[str, Any]) -> PublicKey:
    return PublicKey.from_jwk({**group["publicKeyJwk"], "kid": "wp"})


KEY_BUILDERS = {"pk-hex": _key_from_hex, "jwk": _key_from_jwk}


def test_wycheproof_copy_is_complete_and_unmodified() -> None:
    """[SIG-CRYPTO] the vector copy is the upstream file: 151 cases, 88 valid, 63 invalid."""
    assert hashlib.sha256(VECTORS.read_bytes()).hexdigest() == VECTORS_SHA256
    doc = json.loads(VECTORS.read_bytes())
    assert doc["algorithm"] == "EDDSA"
    assert doc["numberOfTests"] == 151
    assert len(CASES) == 151
    assert Counter(case["result"] for _, case in CASES) == {"valid": 88, "invalid": 63}
    assert len({case["tcId"] for _, case in CASES}) == 151


@pytest.mark.parametrize("build", KEY_BUILDERS.values(), ids=KEY_BUILDERS.keys())
@pytest.mark.parametrize(("group", "case"), CASES, ids=[f"tcId{case['tcId']}" for _, case in CASES])
def test_wycheproof_case_gets_the_expected_verdict(
    group: dict[str, Any], case: dict[str, Any], build: Any
) -> None:
    """[SIG-CRYPTO] [SIG-LENGTH] [KEY-JWK] valid vectors verify, invalid ones are refused."""
    key = build(group)
    signature = bytes.fromhex(case["sig"])
    message = bytes.fromhex(case["msg"])
    if case["result"] == "valid":
        key.verify_bytes(signature, message)
        return
    assert case["result"] == "invalid"
    with pytest.raises(SignatureInvalid) as caught:
        key.verify_bytes(signature, message)
    expected = "BAD_LENGTH" if len(signature) != SIGNATURE_LENGTH else "BAD_SIGNATURE"
    assert caught.value.reason == expected
    assert caught.value.data["kid"] == "wp"


def test_wycheproof_jwk_and_hex_keys_agree() -> None:
    """[KEY-JWK] every group's JWK decodes to its hex key and round-trips through to_jwk."""
    for group, _ in CASES:
        from_hex = _key_from_hex(group)
        from_jwk = _key_from_jwk(group)
        assert from_jwk.raw == from_hex.raw
        assert from_hex.to_jwk()["x"] == group["publicKeyJwk"]["x"]


# RFC 8032 §7.1, typed from the RFC: (secret key, public key, message, signature).
RFC8032 = {
    "TEST 1": (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    "TEST 2": (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
        "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    "TEST 3": (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
        "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
}


@pytest.mark.parametrize(
    ("secret", "public", "message", "signature"), RFC8032.values(), ids=RFC8032
)
def test_rfc8032_vector_signs_and_verifies(
    secret: str, public: str, message: str, signature: str
) -> None:
    """[SIG-CRYPTO] RFC 8032 §7.1: the seed gives the public key and the exact signature."""
    key = SigningKey.from_seed(bytes.fromhex(secret), kid="rfc8032")
    assert key.public.raw == bytes.fromhex(public)
    assert key.sign_bytes(bytes.fromhex(message)) == bytes.fromhex(signature)
    key.public.verify_bytes(bytes.fromhex(signature), bytes.fromhex(message))


@pytest.mark.parametrize(
    ("secret", "public", "message", "signature"), RFC8032.values(), ids=RFC8032
)
def test_rfc8032_signature_refused_for_another_message(
    secret: str, public: str, message: str, signature: str
) -> None:
    """[SIG-CRYPTO] the RFC 8032 signatures do not verify over a different message."""
    key = PublicKey(bytes.fromhex(public), kid="rfc8032")
    with pytest.raises(SignatureInvalid) as caught:
        key.verify_bytes(bytes.fromhex(signature), bytes.fromhex(message) + b"\x00")
    assert caught.value.reason == "BAD_SIGNATURE"
