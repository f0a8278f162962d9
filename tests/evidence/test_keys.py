"""Keys and keyrings: the public JWK, the private key file, and the verifier's keyring."""

from __future__ import annotations

import base64
import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hatp.errors import (
    InvalidJson,
    KeyInvalid,
    KeyringInvalid,
    SignatureInvalid,
    VersionUnsupported,
)
from hatp.evidence import KeyPeriod, Keyring, PublicKey, SigningKey
from hatp.version import PROTOCOL_VERSION

SEED_A = bytes(range(32))
SEED_B = bytes(range(32, 64))
MESSAGE = b"hatp test message"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _write_json(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture
def key_a() -> SigningKey:
    return SigningKey.from_seed(SEED_A, kid="key-a")


@pytest.fixture
def key_b() -> SigningKey:
    return SigningKey.from_seed(SEED_B, kid="key-b")


# --- KEY-JWK: the public JWK ---------------------------------------------------------------


def test_public_jwk_has_exactly_kty_crv_x_kid(key_a: SigningKey) -> None:
    """[KEY-JWK] to_jwk is {kty: OKP, crv: Ed25519, x: 43-char base64url of 32 bytes, kid}."""
    jwk = key_a.public.to_jwk()
    assert jwk == {"kty": "OKP", "crv": "Ed25519", "x": _b64url(key_a.public.raw), "kid": "key-a"}
    assert len(jwk["x"]) == 43
    assert "=" not in jwk["x"]


def test_public_jwk_round_trips_through_from_jwk(key_a: SigningKey) -> None:
    """[KEY-JWK] from_jwk(to_jwk()) is the same key with the same kid."""
    again = PublicKey.from_jwk(key_a.public.to_jwk())
    assert again.raw == key_a.public.raw
    assert again.kid == "key-a"
    again.verify_bytes(key_a.sign_bytes(MESSAGE), MESSAGE)


def test_from_jwk_ignores_extra_jwk_members(key_a: SigningKey) -> None:
    """[KEY-JWK] standard extra members (use, alg, issuer) do not stop a JWK being read."""
    jwk = {**key_a.public.to_jwk(), "use": "sig", "alg": "EdDSA", "issuer": "acme"}
    assert PublicKey.from_jwk(jwk).raw == key_a.public.raw


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"kty": "EC"}, id="kty-EC"),
        pytest.param({"kty": "oct"}, id="kty-oct"),
        pytest.param({"crv": "X25519"}, id="crv-X25519"),
        pytest.param({"crv": "Ed448"}, id="crv-Ed448"),
        pytest.param({"x": _b64url(bytes(31))}, id="x-31-bytes"),
        pytest.param({"x": _b64url(bytes(33))}, id="x-33-bytes"),
        pytest.param({"x": _b64url(bytes(32)) + "="}, id="x-padded"),
        pytest.param({"x": "A" * 42 + "B"}, id="x-unused-bits-set"),
        pytest.param({"x": "A" * 42 + "+"}, id="x-not-base64url"),
        pytest.param({"x": 12}, id="x-not-a-string"),
        pytest.param({"kid": "has space"}, id="kid-with-space"),
        pytest.param({"kid": ""}, id="kid-empty"),
        pytest.param({"kid": 7}, id="kid-not-a-string"),
    ],
)
def test_from_jwk_refuses_a_jwk_that_is_not_ed25519(
    key_a: SigningKey, change: dict[str, Any]
) -> None:
    """[KEY-JWK] anything but kty OKP, crv Ed25519, a 32-byte x and a kid is KeyInvalid."""
    jwk = {**key_a.public.to_jwk(), **change}
    with pytest.raises(KeyInvalid, match="not an Ed25519 public JWK"):
        PublicKey.from_jwk(jwk)


@pytest.mark.parametrize("member", ["kty", "crv", "x", "kid"])
def test_from_jwk_refuses_a_jwk_missing_a_member(key_a: SigningKey, member: str) -> None:
    """[KEY-JWK] kty, crv, x and kid are all required."""
    jwk = {k: v for k, v in key_a.public.to_jwk().items() if k != member}
    with pytest.raises(KeyInvalid) as caught:
        PublicKey.from_jwk(jwk)
    assert member in caught.value.message


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_public_key_refuses_raw_bytes_that_are_not_32(length: int) -> None:
    """[KEY-JWK] an Ed25519 public key is 32 bytes."""
    with pytest.raises(KeyInvalid, match="32 bytes"):
        PublicKey(bytes(length), kid="k")


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_from_seed_refuses_a_seed_that_is_not_32_bytes(length: int) -> None:
    """[KEY-FILE] an Ed25519 seed is 32 bytes."""
    with pytest.raises(KeyInvalid, match="32 bytes"):
        SigningKey.from_seed(bytes(length), kid="k")


def test_generate_makes_distinct_keys_with_the_kid() -> None:
    """[KEY-FILE] generate gives a fresh random key carrying the requested kid."""
    first, second = SigningKey.generate("k1"), SigningKey.generate("k1")
    assert first.kid == first.public.kid == "k1"
    assert first.public.raw != second.public.raw


def test_generate_refuses_an_invalid_kid_with_key_invalid() -> None:
    """[KEY-JWK] a kid that no JWK may carry is refused as KeyInvalid."""
    with pytest.raises(KeyInvalid):
        SigningKey.generate("has space")


# --- KEY-FILE: the private key file --------------------------------------------------------


def test_saved_key_loads_back_as_the_same_key(tmp_path: Path) -> None:
    """[KEY-FILE] save then load gives the same kid, public key and signatures."""
    key = SigningKey.generate("round-trip")
    path = tmp_path / "key.json"
    key.save(path)
    loaded = SigningKey.load(path)
    assert loaded.kid == "round-trip"
    assert loaded.public.raw == key.public.raw
    assert loaded.private_jwk() == key.private_jwk()
    # Ed25519 is deterministic: the same private key makes the same signature.
    assert loaded.sign_bytes(MESSAGE) == key.sign_bytes(MESSAGE)


def test_key_file_is_the_private_jwk(tmp_path: Path, key_a: SigningKey) -> None:
    """[KEY-FILE] the file is a JSON private JWK: the public members plus d (the seed)."""
    path = tmp_path / "key.json"
    key_a.save(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc == {**key_a.public.to_jwk(), "d": _b64url(SEED_A)}


def test_key_file_is_readable_by_the_owner_only(tmp_path: Path, key_a: SigningKey) -> None:
    """[KEY-FILE] a new key file has mode 0600."""
    path = tmp_path / "key.json"
    key_a.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_save_refuses_to_overwrite_an_existing_file(
    tmp_path: Path, key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEY-FILE] save refuses an existing file (KeyInvalid) and leaves it untouched."""
    path = tmp_path / "key.json"
    key_a.save(path)
    before = path.read_bytes()
    with pytest.raises(KeyInvalid, match="refusing to overwrite") as caught:
        key_b.save(path)
    assert str(path) in caught.value.message
    assert path.read_bytes() == before
    assert SigningKey.load(path).public.raw == key_a.public.raw


def test_save_refuses_to_overwrite_any_existing_file(tmp_path: Path, key_a: SigningKey) -> None:
    """[KEY-FILE] the refusal covers files that are not keys too: nothing is clobbered."""
    path = tmp_path / "notes.txt"
    path.write_text("keep me", encoding="utf-8")
    with pytest.raises(KeyInvalid):
        key_a.save(path)
    assert path.read_text(encoding="utf-8") == "keep me"


def test_save_with_overwrite_replaces_the_key(
    tmp_path: Path, key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEY-FILE] overwrite=True replaces the file with the new key, still mode 0600."""
    path = tmp_path / "key.json"
    key_a.save(path)
    key_b.save(path, overwrite=True)
    loaded = SigningKey.load(path)
    assert loaded.kid == "key-b"
    assert loaded.public.raw == key_b.public.raw
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_overwritten_key_file_is_readable_by_the_owner_only(
    tmp_path: Path, key_a: SigningKey
) -> None:
    """[KEY-FILE] overwriting a world-readable file still leaves a key file with mode 0600."""
    path = tmp_path / "key.json"
    path.write_text("{}", encoding="utf-8")
    os.chmod(path, 0o644)
    key_a.save(path, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_load_refuses_a_missing_file(tmp_path: Path) -> None:
    """[KEY-FILE] a missing key file is KeyInvalid naming the file and the OS reason."""
    path = tmp_path / "absent.json"
    with pytest.raises(KeyInvalid, match="cannot read key file") as caught:
        SigningKey.load(path)
    assert str(path) in caught.value.message
    assert "No such file" in caught.value.message


def test_load_refuses_a_directory(tmp_path: Path) -> None:
    """[KEY-FILE] an unreadable path (a directory) is KeyInvalid."""
    with pytest.raises(KeyInvalid, match="cannot read key file"):
        SigningKey.load(tmp_path)


def test_load_refuses_a_file_that_is_not_json(tmp_path: Path) -> None:
    """[KEY-FILE] a key file that is not JSON is KeyInvalid naming the file."""
    path = tmp_path / "key.json"
    path.write_text("-----BEGIN PRIVATE KEY-----\n", encoding="utf-8")
    with pytest.raises(KeyInvalid) as caught:
        SigningKey.load(path)
    assert str(path) in caught.value.message


def test_load_refuses_a_file_that_is_not_json_as_a_hatp_error(tmp_path: Path) -> None:
    """[KEY-FILE] meanwhile a non-JSON key file is at least refused with a hatp error."""
    path = tmp_path / "key.json"
    path.write_text("-----BEGIN PRIVATE KEY-----\n", encoding="utf-8")
    with pytest.raises((KeyInvalid, InvalidJson)):
        SigningKey.load(path)


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ([1, 2, 3], "no 'd' member"),
        ("a string", "no 'd' member"),
        ({"kty": "OKP", "crv": "Ed25519", "x": "A" * 43, "kid": "k"}, "no 'd' member"),
        ({"kty": "OKP", "crv": "Ed25519", "x": "A" * 43, "kid": "k", "d": 5}, "no 'd' member"),
    ],
    ids=["array", "string", "public-jwk-only", "d-not-a-string"],
)
def test_load_refuses_a_file_without_a_private_part(
    tmp_path: Path, doc: Any, fragment: str
) -> None:
    """[KEY-FILE] a JSON file with no string 'd' is not a private key file."""
    path = _write_json(tmp_path / "key.json", doc)
    with pytest.raises(KeyInvalid, match=fragment) as caught:
        SigningKey.load(path)
    assert str(path) in caught.value.message


@pytest.mark.parametrize(
    "x", ["short", _b64url(bytes(31)), "A" * 42 + "B"], ids=["short", "31-bytes", "unused-bits"]
)
def test_load_refuses_a_file_with_a_bad_x(tmp_path: Path, key_a: SigningKey, x: str) -> None:
    """[KEY-FILE] an 'x' that is not a 32-byte base64url key is KeyInvalid."""
    path = _write_json(tmp_path / "key.json", {**key_a.private_jwk(), "x": x})
    with pytest.raises(KeyInvalid, match="not an Ed25519 public JWK"):
        SigningKey.load(path)


def test_load_refuses_x_that_is_not_the_public_half_of_d(
    tmp_path: Path, key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEY-FILE] 'x' of one key with 'd' of another is refused, not silently trusted."""
    doc = {**key_a.private_jwk(), "d": key_b.private_jwk()["d"]}
    path = _write_json(tmp_path / "key.json", doc)
    with pytest.raises(KeyInvalid, match="'x' is not the public half of 'd'") as caught:
        SigningKey.load(path)
    assert str(path) in caught.value.message
    assert caught.value.data["kid"] == "key-a"


@pytest.mark.parametrize(
    ("d", "fragment"),
    [
        ("A" * 42 + "B", "'d' is not base64url"),
        (_b64url(SEED_A) + "=", "'d' is not base64url"),
        ("!" * 43, "'d' is not base64url"),
        (_b64url(bytes(31)), "seed is 32 bytes"),
    ],
    ids=["unused-bits", "padded", "not-base64url", "31-bytes"],
)
def test_load_refuses_a_bad_d(tmp_path: Path, key_a: SigningKey, d: str, fragment: str) -> None:
    """[KEY-FILE] a 'd' that is not the canonical base64url of a 32-byte seed is KeyInvalid."""
    path = _write_json(tmp_path / "key.json", {**key_a.private_jwk(), "d": d})
    with pytest.raises(KeyInvalid, match=fragment):
        SigningKey.load(path)


# --- Keyring: resolve and trust ------------------------------------------------------------


def test_keyring_resolves_a_key_of_a_trusted_issuer(key_a: SigningKey) -> None:
    """[SIG-KID] [SIG-ISSUER] resolve returns the key and the issuer that vouches for it."""
    ring = Keyring([(key_a.public, "acme")], trusted_issuers=["acme"])
    key, issuer = ring.resolve("key-a")
    assert key.raw == key_a.public.raw
    assert issuer == "acme"


def test_keyring_refuses_an_unknown_kid(key_a: SigningKey) -> None:
    """[SIG-KID] resolving a kid the keyring does not hold is KID_UNKNOWN."""
    ring = Keyring([(key_a.public, "acme")], trusted_issuers=["acme"])
    with pytest.raises(SignatureInvalid) as caught:
        ring.resolve("key-z")
    assert caught.value.reason == "KID_UNKNOWN"
    assert caught.value.data["kid"] == "key-z"


def test_keyring_refuses_a_key_of_an_untrusted_issuer(key_a: SigningKey) -> None:
    """[SIG-ISSUER] a key vouched for by an issuer the keyring does not trust is refused."""
    ring = Keyring([(key_a.public, "mallory")], trusted_issuers=["acme"])
    with pytest.raises(SignatureInvalid) as caught:
        ring.resolve("key-a")
    assert caught.value.reason == "ISSUER_UNTRUSTED"
    assert caught.value.data["issuer"] == "mallory"


def test_trusting_the_issuer_makes_its_key_resolve(key_a: SigningKey) -> None:
    """[SIG-ISSUER] trust(issuer) is what turns ISSUER_UNTRUSTED into a resolved key."""
    ring = Keyring([(key_a.public, "acme")])
    with pytest.raises(SignatureInvalid):
        ring.resolve("key-a")
    ring.trust("acme")
    assert ring.resolve("key-a")[1] == "acme"


def test_keyring_refuses_a_second_key_with_the_same_kid(
    key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEYRING-DOC] two different keys under one kid are KeyringInvalid; the first stays."""
    impostor = PublicKey(key_b.public.raw, kid="key-a")
    ring = Keyring([(key_a.public, "acme")], trusted_issuers=["acme"])
    with pytest.raises(KeyringInvalid, match="share kid"):
        ring.add(impostor, "acme")
    assert ring.resolve("key-a")[0].raw == key_a.public.raw
    with pytest.raises(KeyringInvalid):
        Keyring([(key_a.public, "acme"), (impostor, "acme")])


def test_keyring_accepts_the_same_key_twice(key_a: SigningKey) -> None:
    """[KEYRING-DOC] adding the very same key again is not a conflict."""
    ring = Keyring([(key_a.public, "acme")], trusted_issuers=["acme"])
    ring.add(PublicKey(key_a.public.raw, kid="key-a"), "acme")
    assert len(ring) == 1
    assert ring.kids() == ["key-a"]


def test_keyring_refuses_one_key_vouched_for_by_two_issuers(key_a: SigningKey) -> None:
    """[KEYRING-DOC] the last entry must not silently decide whether a key is trusted."""
    ring = Keyring([(key_a.public, "acme")], trusted_issuers=["acme"])
    with pytest.raises(KeyringInvalid, match="both"):
        ring.add(key_a.public, "evil")
    assert ring.resolve("key-a")[1] == "acme"


def test_keyring_lists_and_contains_its_kids(key_a: SigningKey, key_b: SigningKey) -> None:
    """[KEYRING-DOC] kids() is sorted; `in` and len() see every key."""
    ring = Keyring([(key_b.public, "acme"), (key_a.public, "acme")])
    assert ring.kids() == ["key-a", "key-b"]
    assert "key-a" in ring
    assert "key-z" not in ring
    assert len(ring) == 2


# --- KEYRING-DOC: the keyring document -----------------------------------------------------


def _ring(key_a: SigningKey, key_b: SigningKey) -> Keyring:
    return Keyring(
        [(key_b.public, "beta"), (key_a.public, "acme")], trusted_issuers=["acme", "zed"]
    )


def test_keyring_document_has_version_trusted_issuers_and_keys_with_issuer(
    key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEYRING-DOC] to_json: hatpVersion, sorted trustedIssuers, keys (JWK + issuer) by kid."""
    assert _ring(key_a, key_b).to_json() == {
        "hatpVersion": PROTOCOL_VERSION,
        "trustedIssuers": ["acme", "zed"],
        "keys": [
            {**key_a.public.to_jwk(), "issuer": "acme"},
            {**key_b.public.to_jwk(), "issuer": "beta"},
        ],
    }


def test_keyring_document_round_trips_through_from_json(
    key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEYRING-DOC] from_json(to_json()) has the same keys, issuers and trust."""
    doc = _ring(key_a, key_b).to_json()
    again = Keyring.from_json(json.loads(json.dumps(doc)))
    assert again.to_json() == doc
    assert again.resolve("key-a")[0].raw == key_a.public.raw
    with pytest.raises(SignatureInvalid) as caught:
        again.resolve("key-b")
    assert caught.value.reason == "ISSUER_UNTRUSTED"


def test_keyring_file_round_trips_through_save_and_load(
    tmp_path: Path, key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEYRING-DOC] save then load gives the same keyring document."""
    ring = _ring(key_a, key_b)
    path = tmp_path / "keyring.json"
    ring.save(path)
    assert json.loads(path.read_text(encoding="utf-8")) == ring.to_json()
    assert Keyring.load(path).to_json() == ring.to_json()


def _doc(key_a: SigningKey, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "hatpVersion": PROTOCOL_VERSION,
        "trustedIssuers": ["acme"],
        "keys": [{**key_a.public.to_jwk(), "issuer": "acme"}],
    }
    doc.update(changes)
    return doc


def test_keyring_document_template_is_accepted(key_a: SigningKey) -> None:
    """[KEYRING-DOC] the document the refusals below start from is itself a valid keyring."""
    assert Keyring.from_json(_doc(key_a)).kids() == ["key-a"]


@pytest.mark.parametrize("doc", [[], "keyring", 3, None], ids=["array", "string", "int", "null"])
def test_keyring_from_json_refuses_a_non_object(doc: Any) -> None:
    """[KEYRING-DOC] a keyring is a JSON object."""
    with pytest.raises(KeyringInvalid, match="JSON object"):
        Keyring.from_json(doc)


def test_keyring_from_json_refuses_a_missing_trusted_issuers(key_a: SigningKey) -> None:
    """[KEYRING-DOC] trustedIssuers is required."""
    doc = _doc(key_a)
    del doc["trustedIssuers"]
    with pytest.raises(KeyringInvalid, match="trustedIssuers"):
        Keyring.from_json(doc)


def test_keyring_from_json_refuses_empty_trusted_issuers(key_a: SigningKey) -> None:
    """[KEYRING-DOC] a keyring that trusts nobody verifies nothing: refused."""
    with pytest.raises(KeyringInvalid, match="trustedIssuers"):
        Keyring.from_json(_doc(key_a, trustedIssuers=[]))


@pytest.mark.parametrize(
    "changes",
    [
        {"keys": "none"},
        {"trustedIssuers": "acme"},
        {"trustedIssuers": [1]},
        {"extra": True},
    ],
    ids=["keys-not-array", "issuers-not-array", "issuer-not-string", "unknown-member"],
)
def test_keyring_from_json_refuses_a_bad_shape(key_a: SigningKey, changes: dict[str, Any]) -> None:
    """[KEYRING-DOC] the keyring document's members have fixed types; unknown ones are refused."""
    with pytest.raises(KeyringInvalid, match="not a keyring"):
        Keyring.from_json(_doc(key_a, **changes))


@pytest.mark.parametrize(
    "version", [None, "0.2", "1.0", 0.1, ""], ids=["missing", "0.2", "1.0", "number", "empty"]
)
def test_keyring_from_json_refuses_an_unknown_version(key_a: SigningKey, version: Any) -> None:
    """[VER-KNOWN] [KEYRING-DOC] a keyring without a known hatpVersion is VersionUnsupported."""
    doc = _doc(key_a, hatpVersion=version)
    if version is None:
        del doc["hatpVersion"]
    with pytest.raises(VersionUnsupported):
        Keyring.from_json(doc)


def test_keyring_version_is_checked_before_the_shape() -> None:
    """[VER-KNOWN] an unknown version is reported even when the rest is not a keyring."""
    with pytest.raises(VersionUnsupported):
        Keyring.from_json({"hatpVersion": "9.9", "keys": "nonsense"})


@pytest.mark.parametrize(
    ("entry_change", "fragment"),
    [
        ({"x": "short"}, "not a keyring"),
        ({"x": "A" * 42 + "B"}, "key 'key-a'"),
        ({"kty": "EC"}, "not a keyring"),
        ({"crv": "X25519"}, "not a keyring"),
        ({"issuer": ""}, "not a keyring"),
        ({"issuer": None}, "not a keyring"),
    ],
    ids=["short-x", "x-unused-bits", "kty-EC", "crv-X25519", "empty-issuer", "null-issuer"],
)
def test_keyring_from_json_refuses_a_bad_key(
    key_a: SigningKey, entry_change: dict[str, Any], fragment: str
) -> None:
    """[KEYRING-DOC] [KEY-JWK] a key entry that is not an Ed25519 JWK with issuer is refused."""
    entry = {**key_a.public.to_jwk(), "issuer": "acme", **entry_change}
    with pytest.raises(KeyringInvalid, match=fragment):
        Keyring.from_json(_doc(key_a, keys=[entry]))


def test_keyring_from_json_refuses_a_key_without_issuer(key_a: SigningKey) -> None:
    """[KEYRING-DOC] every key in a keyring names the issuer that vouches for it."""
    with pytest.raises(KeyringInvalid, match="issuer"):
        Keyring.from_json(_doc(key_a, keys=[key_a.public.to_jwk()]))


def test_keyring_from_json_refuses_two_keys_with_one_kid(
    key_a: SigningKey, key_b: SigningKey
) -> None:
    """[KEYRING-DOC] a document listing two different keys under one kid is refused."""
    impostor = {**PublicKey(key_b.public.raw, kid="key-a").to_jwk(), "issuer": "acme"}
    keys = [{**key_a.public.to_jwk(), "issuer": "acme"}, impostor]
    with pytest.raises(KeyringInvalid, match="share kid"):
        Keyring.from_json(_doc(key_a, keys=keys))


def test_keyring_from_json_accepts_the_same_key_listed_twice(key_a: SigningKey) -> None:
    """[KEYRING-DOC] listing the very same key twice is harmless."""
    entry = {**key_a.public.to_jwk(), "issuer": "acme"}
    assert len(Keyring.from_json(_doc(key_a, keys=[entry, dict(entry)]))) == 1


def test_keyring_load_refuses_a_missing_file(tmp_path: Path) -> None:
    """[KEYRING-DOC] an unreadable keyring path is KeyringInvalid naming the path."""
    path = tmp_path / "absent.json"
    with pytest.raises(KeyringInvalid, match="cannot read keyring") as caught:
        Keyring.load(path)
    assert str(path) in caught.value.message


def test_keyring_load_refuses_a_directory(tmp_path: Path) -> None:
    """[KEYRING-DOC] a directory is an unreadable keyring path: KeyringInvalid."""
    with pytest.raises(KeyringInvalid, match="cannot read keyring"):
        Keyring.load(tmp_path)


def test_keyring_load_refuses_a_document_that_is_not_a_keyring(tmp_path: Path) -> None:
    """[KEYRING-DOC] a readable JSON file that is not a keyring is KeyringInvalid."""
    path = _write_json(tmp_path / "keyring.json", {"hatpVersion": PROTOCOL_VERSION})
    with pytest.raises(KeyringInvalid):
        Keyring.load(path)


def test_keyring_load_refuses_a_file_that_is_not_json(tmp_path: Path) -> None:
    """[KEYRING-DOC] a keyring file that is not JSON is KeyringInvalid, as documented."""
    path = tmp_path / "keyring.json"
    path.write_text("trusted: acme\n", encoding="utf-8")
    with pytest.raises(KeyringInvalid):
        Keyring.load(path)


@pytest.mark.parametrize("kid", ["key-a\n", "", "a b", "k" * 257])
def test_public_key_refuses_a_kid_that_is_not_a_key_id(kid: str) -> None:
    """[KEY-JWK] a kid is 1-256 printable ASCII characters, matched whole (no trailing newline)."""
    with pytest.raises(KeyInvalid):
        PublicKey(bytes(32), kid)


def test_issued_by_lists_a_trusted_issuers_keys_only_SIG_ISSUER() -> None:
    """[SIG-ISSUER] The keys one issuer vouches for, by kid; an untrusted issuer's none
    (what a well-known document may publish as the directory's)."""
    first, second, other = (SigningKey.from_seed(bytes([n]) * 32, f"k-{n}") for n in (1, 2, 3))
    ring = Keyring(
        [(second.public, "dir"), (other.public, "evil"), (first.public, "dir")],
        trusted_issuers=["dir"],
    )
    assert [key.kid for key in ring.issued_by("dir")] == ["k-1", "k-2"]
    assert ring.issued_by("evil") == []
    assert ring.issued_by("nobody") == []


def test_a_keyring_includes_another_with_its_periods_and_refuses_a_clash() -> None:
    """[KEYRING-DOC] [SIG-PERIOD] include() adds every key with its issuer and period and
    trusts the other's issuers; the same kid under another key is refused."""
    since = datetime(2026, 1, 1, tzinfo=UTC)
    partner_key = SigningKey.from_seed(b"\x31" * 32, "partner-1")
    partner = Keyring()
    partner.add(partner_key.public, "https://partner.example", KeyPeriod(not_before=since))
    partner.trust("https://partner.example")
    ours = Keyring()
    ours.include(partner)
    assert ours.resolve("partner-1")[1] == "https://partner.example"
    assert ours.period("partner-1") == KeyPeriod(not_before=since)
    clash = Keyring([(SigningKey.from_seed(b"\x32" * 32, "partner-1").public, "x")], ["x"])
    with pytest.raises(KeyringInvalid):
        ours.include(clash)
