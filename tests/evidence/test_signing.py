"""Signed objects: what the signature covers, and every refusal of verify, by reason."""

from __future__ import annotations

import base64
import copy
import json
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hatp.errors import InvalidJson, SignatureInvalid, VersionUnsupported
from hatp.evidence import (
    Keyring,
    PublicKey,
    SigningKey,
    Verified,
    canonicalize,
    parse_json,
    sign,
    verify,
)
from hatp.version import PROTOCOL_VERSION

ISSUER = "https://issuer.example"
UNTRUSTED = "https://elsewhere.example"
SIGNER = SigningKey.from_seed(bytes(range(32)), kid="signer-1")
OTHER = SigningKey.from_seed(bytes(range(32, 64)), kid="other-1")
#: A key that is not in the keyring but claims the signer's kid.
IMPOSTOR = SigningKey.from_seed(bytes(range(64, 96)), kid="signer-1")
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

UNSIGNED: dict[str, Any] = {
    "hatpVersion": PROTOCOL_VERSION,
    "type": "approval",
    "amount": 1250,
    "currency": "EUR",
    "approved": True,
    "note": None,
    "who": "Zoë",
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
}


def _ring(*, trusted: tuple[str, ...] = (ISSUER,)) -> Keyring:
    return Keyring([(SIGNER.public, ISSUER), (OTHER.public, ISSUER)], trusted_issuers=trusted)


def _signed() -> dict[str, Any]:
    return sign(copy.deepcopy(UNSIGNED), SIGNER)


def _with_signature(**members: Any) -> dict[str, Any]:
    signed = _signed()
    signed["signature"] = {**signed["signature"], **members}
    return signed


def _refusal(obj: Any, ring: Keyring | None = None) -> SignatureInvalid:
    with pytest.raises(SignatureInvalid) as caught:
        verify(obj, _ring() if ring is None else ring)
    return caught.value


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _lenient_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- round trip and SIG-COVERAGE -----------------------------------------------------------


def test_signed_object_verifies_and_names_signer_and_issuer() -> None:
    """[SIG-COVERAGE] verify(sign(obj)) returns Verified(kid, issuer) of the signer."""
    assert verify(_signed(), _ring()) == Verified(kid="signer-1", issuer=ISSUER)
    other = sign(UNSIGNED, OTHER)
    assert verify(other, _ring()) == Verified(kid="other-1", issuer=ISSUER)


def test_sign_adds_only_a_signature_member_and_leaves_the_input_alone() -> None:
    """[SIG-MEMBER] sign returns obj plus signature {alg: Ed25519, kid, sig}; obj is unchanged."""
    original = copy.deepcopy(UNSIGNED)
    signed = sign(original, SIGNER)
    assert original == UNSIGNED
    assert "signature" not in original
    assert {k: v for k, v in signed.items() if k != "signature"} == UNSIGNED
    signature = signed["signature"]
    assert set(signature) == {"alg", "kid", "sig"}
    assert signature["alg"] == "Ed25519"
    assert signature["kid"] == "signer-1"
    assert len(signature["sig"]) == 86
    assert set(signature["sig"]) <= set(B64URL)


def test_signature_is_over_the_canonical_bytes_without_the_signature_member() -> None:
    """[SIG-COVERAGE] sig is Ed25519 over canonicalize(obj minus signature), nothing else."""
    signed = _signed()
    raw = _lenient_decode(signed["signature"]["sig"])
    SIGNER.public.verify_bytes(raw, canonicalize(UNSIGNED))
    assert raw == SIGNER.sign_bytes(canonicalize(UNSIGNED))


def test_member_order_does_not_change_the_signature() -> None:
    """[SIG-COVERAGE] signing a reordered object gives the same sig; reordered objects verify."""
    reordered = dict(reversed(list(UNSIGNED.items())))
    assert list(reordered) != list(UNSIGNED)
    assert sign(reordered, SIGNER)["signature"] == _signed()["signature"]
    signed = _signed()
    assert verify(dict(reversed(list(signed.items()))), _ring()).kid == "signer-1"


@pytest.mark.parametrize(
    "dump",
    [
        pytest.param(lambda o: json.dumps(o, indent=2), id="indent-2"),
        pytest.param(lambda o: json.dumps(o, indent="\t", sort_keys=True), id="tabs-sorted"),
        pytest.param(lambda o: json.dumps(o, ensure_ascii=True), id="ascii-escapes"),
        pytest.param(lambda o: json.dumps(o, ensure_ascii=False), id="utf8"),
        pytest.param(lambda o: json.dumps(o, separators=(" ,  ", " :\n ")), id="odd-spacing"),
    ],
)
def test_reserialized_signed_object_still_verifies(dump: Callable[[Any], str]) -> None:
    """[SIG-COVERAGE] whitespace, escaping and member order of the wire text do not matter."""
    text = dump(_signed())
    assert text.encode("utf-8") != canonicalize(_signed())
    assert verify(parse_json(text), _ring()) == Verified("signer-1", ISSUER)
    assert verify(parse_json(text.encode("utf-8")), _ring()) == Verified("signer-1", ISSUER)


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        target: Any = obj
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return change


def _delete(member: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        del obj[member]

    return change


def _swap_items(obj: dict[str, Any]) -> None:
    obj["items"].reverse()


CHANGES = {
    "type": _set(("type",), "approvaL"),
    "amount+1": _set(("amount",), 1251),
    "amount-negated": _set(("amount",), -1250),
    "amount-as-string": _set(("amount",), "1250"),
    "amount-as-float": _set(("amount",), 1250.5),
    "currency": _set(("currency",), "USD"),
    "approved-false": _set(("approved",), False),
    "approved-as-1": _set(("approved",), 1),
    "note-empty-string": _set(("note",), ""),
    "note-false": _set(("note",), False),
    "who-nfd": _set(("who",), unicodedata.normalize("NFD", "Zoë")),
    "who-trailing-space": _set(("who",), "Zoë "),
    "nested-qty": _set(("items", 0, "qty"), 3),
    "nested-sku": _set(("items", 1, "sku"), "B-8"),
    "nested-extra-member": _set(("items", 0, "note"), None),
    "items-reordered": _swap_items,
    "member-added": _set(("extra",), None),
    "member-added-empty-object": _set(("meta",), {}),
    **{f"{member}-removed": _delete(member) for member in UNSIGNED if member != "hatpVersion"},
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_any_change_to_any_member_breaks_the_signature(
    change: Callable[[dict[str, Any]], None],
) -> None:
    """[SIG-COVERAGE] [SIG-CRYPTO] changing, adding or removing any member is BAD_SIGNATURE."""
    signed = _signed()
    change(signed)
    assert canonicalize({k: v for k, v in signed.items() if k != "signature"}) != canonicalize(
        UNSIGNED
    )
    refusal = _refusal(signed)
    assert refusal.reason == "BAD_SIGNATURE"
    assert refusal.data["kid"] == "signer-1"


def test_signature_made_by_another_key_under_the_kid_is_refused() -> None:
    """[SIG-CRYPTO] a signature by a key other than the kid's key is BAD_SIGNATURE."""
    forged = sign(UNSIGNED, IMPOSTOR)
    assert forged["signature"]["kid"] == "signer-1"
    assert _refusal(forged).reason == "BAD_SIGNATURE"


def test_signature_moved_to_another_kid_is_refused() -> None:
    """[SIG-CRYPTO] a genuine sig relabelled with another trusted kid is BAD_SIGNATURE."""
    refusal = _refusal(_with_signature(kid="other-1"))
    assert refusal.reason == "BAD_SIGNATURE"
    assert refusal.data["kid"] == "other-1"


def test_signature_of_one_object_does_not_verify_another() -> None:
    """[SIG-CRYPTO] a sig copied from another signed object is BAD_SIGNATURE."""
    donor = sign({**UNSIGNED, "amount": 1}, SIGNER)
    signed = _signed()
    signed["signature"] = donor["signature"]
    assert _refusal(signed).reason == "BAD_SIGNATURE"


def test_signing_is_deterministic() -> None:
    """[SIG-CRYPTO] Ed25519: the same object and key always give the same signature."""
    assert _signed() == _signed()


# --- SIG-MEMBER -----------------------------------------------------------------------------


def test_object_without_signature_is_refused_as_missing() -> None:
    """[SIG-MEMBER] an unsigned object is MISSING, never accepted."""
    assert _refusal(copy.deepcopy(UNSIGNED)).reason == "MISSING"


MALFORMED = {
    "string": "Ed25519.signer-1.sig",
    "array": ["Ed25519", "signer-1", "sig"],
    "number": 1,
    "true": True,
    "empty-object": {},
    "no-sig": {"alg": "Ed25519", "kid": "signer-1"},
    "no-kid": {"alg": "Ed25519", "sig": "AAAA"},
    "no-alg": {"kid": "signer-1", "sig": "AAAA"},
}


@pytest.mark.parametrize("signature", MALFORMED.values(), ids=MALFORMED.keys())
def test_signature_member_of_the_wrong_shape_is_malformed(signature: Any) -> None:
    """[SIG-MEMBER] a signature member that is not an object {alg, kid, sig} is MALFORMED."""
    signed = _signed()
    signed["signature"] = signature
    assert _refusal(signed).reason == "MALFORMED"


@pytest.mark.parametrize(
    "members",
    [
        pytest.param({"typ": "JWT"}, id="extra-member"),
        pytest.param({"sig": 5}, id="sig-number"),
        pytest.param({"sig": None}, id="sig-null"),
        pytest.param({"kid": 1}, id="kid-number"),
        pytest.param({"kid": ["signer-1"]}, id="kid-array"),
        pytest.param({"alg": None}, id="alg-null"),
        pytest.param({"alg": {"name": "Ed25519"}}, id="alg-object"),
    ],
)
def test_signature_member_with_a_wrong_member_is_malformed(members: dict[str, Any]) -> None:
    """[SIG-MEMBER] exactly alg, kid and sig, all strings, or MALFORMED."""
    assert _refusal(_with_signature(**members)).reason == "MALFORMED"


# --- SIG-ALG --------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "NONE", "None", "nOnE"])
def test_alg_none_is_refused_as_alg_none(alg: str) -> None:
    """[SIG-ALG] alg none, in any case, is the ALG_NONE attack."""
    assert _refusal(_with_signature(alg=alg, sig="")).reason == "ALG_NONE"
    assert _refusal(_with_signature(alg=alg)).reason == "ALG_NONE"


@pytest.mark.parametrize("alg", ["HS256", "EdDSA", "RS256", "ES256", "ed25519", "Ed448", ""])
def test_alg_other_than_ed25519_is_refused_as_alg_unknown(alg: str) -> None:
    """[SIG-ALG] only "Ed25519" is accepted; anything else (EdDSA, HS256...) is ALG_UNKNOWN."""
    assert _refusal(_with_signature(alg=alg)).reason == "ALG_UNKNOWN"


def test_alg_is_checked_before_the_kid() -> None:
    """[SIG-ALG] alg none is reported as such even with an unknown kid and no sig."""
    assert _refusal(_with_signature(alg="none", kid="nobody", sig="")).reason == "ALG_NONE"


# --- SIG-KID and SIG-ISSUER -----------------------------------------------------------------


def test_unknown_kid_is_refused() -> None:
    """[SIG-KID] a kid the keyring does not hold is KID_UNKNOWN, even with a genuine sig."""
    refusal = _refusal(_with_signature(kid="signer-2"))
    assert refusal.reason == "KID_UNKNOWN"
    assert refusal.data["kid"] == "signer-2"


def test_unknown_kid_is_refused_even_if_some_key_would_verify() -> None:
    """[SIG-KID] a verifier never tries other keys: the signer's key under a new kid fails."""
    ring = Keyring([(OTHER.public, ISSUER)], trusted_issuers=[ISSUER])
    assert _refusal(_signed(), ring).reason == "KID_UNKNOWN"
    ring.add(PublicKey(SIGNER.public.raw, kid="renamed"), ISSUER)
    assert _refusal(_signed(), ring).reason == "KID_UNKNOWN"


def test_kid_is_checked_before_the_encoding() -> None:
    """[SIG-KID] an unknown kid is reported before a garbled sig is looked at."""
    assert _refusal(_with_signature(kid="nobody", sig="not base64!")).reason == "KID_UNKNOWN"


def test_key_of_an_untrusted_issuer_verifies_nothing() -> None:
    """[SIG-ISSUER] a genuine signature by a key whose issuer is not trusted is refused."""
    ring = _ring(trusted=(UNTRUSTED,))
    refusal = _refusal(_signed(), ring)
    assert refusal.reason == "ISSUER_UNTRUSTED"
    assert refusal.data["issuer"] == ISSUER
    ring.trust(ISSUER)
    assert verify(_signed(), ring) == Verified("signer-1", ISSUER)


def test_issuer_trust_is_per_key() -> None:
    """[SIG-ISSUER] trusting one issuer does not make another issuer's key verify."""
    ring = Keyring([(SIGNER.public, UNTRUSTED), (OTHER.public, ISSUER)], trusted_issuers=[ISSUER])
    assert verify(sign(UNSIGNED, OTHER), ring).kid == "other-1"
    assert _refusal(_signed(), ring).reason == "ISSUER_UNTRUSTED"


# --- SIG-ENCODING and SIG-LENGTH ------------------------------------------------------------


def _sig() -> str:
    sig = _signed()["signature"]["sig"]
    assert isinstance(sig, str)
    return sig


def _set_unused_bits(sig: str) -> str:
    last = B64URL.index(sig[-1])
    # 64 bytes = 86 characters; the last one carries 2 bits of data and 4 unused bits.
    assert last & 0b1111 == 0
    return sig[:-1] + B64URL[last | 0b0001]


ENCODINGS: dict[str, Callable[[str], str]] = {
    "padding": lambda s: s + "==",
    "single-pad": lambda s: s + "=",
    "plus": lambda s: s[:10] + "+" + s[11:],
    "slash": lambda s: s[:10] + "/" + s[11:],
    "standard-alphabet": lambda s: base64.b64encode(_lenient_decode(s)).decode().rstrip("="),
    "inner-space": lambda s: s[:40] + " " + s[40:],
    "trailing-newline": lambda s: s + "\n",
    "leading-space": lambda s: " " + s,
    "inner-tab": lambda s: s[:40] + "\t" + s[40:],
    "unused-bits-set": _set_unused_bits,
    "non-ascii": lambda s: s[:-2] + "é" + s[-1],
    "impossible-length": lambda s: s + "AAA",
    "dot": lambda s: s[:10] + "." + s[11:],
}


@pytest.mark.parametrize("spell", ENCODINGS.values(), ids=ENCODINGS.keys())
def test_sig_not_in_canonical_unpadded_base64url_is_bad_encoding(
    spell: Callable[[str], str],
) -> None:
    """[SIG-ENCODING] padding, +, /, whitespace, unused bits set... are BAD_ENCODING."""
    sig = _sig()
    respelled = spell(sig)
    assert respelled != sig
    refusal = _refusal(_with_signature(sig=respelled))
    assert refusal.reason == "BAD_ENCODING"
    assert refusal.data["kid"] == "signer-1"


def test_non_canonical_last_character_is_refused_although_it_decodes_to_the_same_bytes() -> None:
    """[SIG-ENCODING] two spellings of one signature: only the canonical one is accepted."""
    sig = _sig()
    respelled = _set_unused_bits(sig)
    # A lenient decoder (Python's own) reads both spellings as the same, valid signature.
    assert _lenient_decode(respelled) == _lenient_decode(sig)
    assert _refusal(_with_signature(sig=respelled)).reason == "BAD_ENCODING"
    assert verify(_with_signature(sig=sig), _ring()).kid == "signer-1"


@pytest.mark.parametrize(
    "resize",
    [
        pytest.param(lambda raw: raw[:63], id="63-bytes"),
        pytest.param(lambda raw: raw + b"\x00", id="65-bytes"),
        pytest.param(lambda raw: raw[:32], id="32-bytes"),
        pytest.param(lambda raw: raw + raw, id="128-bytes"),
        pytest.param(lambda raw: b"", id="empty"),
    ],
)
def test_sig_of_the_wrong_length_is_bad_length(resize: Callable[[bytes], bytes]) -> None:
    """[SIG-LENGTH] an Ed25519 signature is exactly 64 bytes; 63 or 65 are BAD_LENGTH."""
    raw = _lenient_decode(_sig())
    refusal = _refusal(_with_signature(sig=_b64url(resize(raw))))
    assert refusal.reason == "BAD_LENGTH"
    assert refusal.data["kid"] == "signer-1"


def test_flipped_bit_in_the_sig_is_bad_signature() -> None:
    """[SIG-CRYPTO] a well-encoded 64-byte sig with one bit changed is BAD_SIGNATURE."""
    raw = bytearray(_lenient_decode(_sig()))
    raw[10] ^= 0x01
    assert _refusal(_with_signature(sig=_b64url(bytes(raw)))).reason == "BAD_SIGNATURE"


# --- VER-KNOWN ------------------------------------------------------------------------------

BAD_VERSIONS = {
    "missing": None,
    "0.2": "0.2",
    "1.0": "1.0",
    "padded": " 0.1",
    "number": 0.1,
    "empty": "",
    "array": ["0.1"],
}


def _versioned(obj: dict[str, Any], version: Any) -> dict[str, Any]:
    changed = {k: v for k, v in obj.items() if k != "hatpVersion"}
    if version is not None:
        changed["hatpVersion"] = version
    return changed


@pytest.mark.parametrize("version", BAD_VERSIONS.values(), ids=BAD_VERSIONS.keys())
def test_verify_refuses_an_object_without_a_known_version(version: Any) -> None:
    """[VER-KNOWN] missing or unknown hatpVersion is VersionUnsupported, not a signature error."""
    with pytest.raises(VersionUnsupported):
        verify(_versioned(_signed(), version), _ring())


@pytest.mark.parametrize("version", BAD_VERSIONS.values(), ids=BAD_VERSIONS.keys())
def test_verify_checks_the_version_before_anything_else(version: Any) -> None:
    """[VER-KNOWN] an unknown version wins over every signature problem and an empty keyring."""
    unsigned = _versioned(copy.deepcopy(UNSIGNED), version)
    with pytest.raises(VersionUnsupported):
        verify(unsigned, _ring())
    for broken in (
        {"signature": "garbage"},
        {"signature": {"alg": "none", "kid": "nobody", "sig": ""}},
        {"signature": {"alg": "Ed25519", "kid": "nobody", "sig": "=="}},
    ):
        with pytest.raises(VersionUnsupported):
            verify({**unsigned, **broken}, Keyring())


@pytest.mark.parametrize("version", BAD_VERSIONS.values(), ids=BAD_VERSIONS.keys())
def test_sign_refuses_an_object_without_a_known_version(version: Any) -> None:
    """[VER-KNOWN] sign will not make a signed object no verifier can read."""
    with pytest.raises(VersionUnsupported):
        sign(_versioned(copy.deepcopy(UNSIGNED), version), SIGNER)


def test_sign_checks_the_version_before_anything_else() -> None:
    """[VER-KNOWN] an unversioned object is VersionUnsupported even if it has a signature."""
    with pytest.raises(VersionUnsupported):
        sign({"signature": {"alg": "Ed25519", "kid": "x", "sig": ""}}, SIGNER)


def test_sign_refuses_an_already_signed_object() -> None:
    """[SIG-MEMBER] signing a signed object raises ValueError rather than signing the sig."""
    with pytest.raises(ValueError, match="already signed"):
        sign(_signed(), OTHER)


def test_sign_refuses_a_value_without_a_canonical_form() -> None:
    """[SIG-COVERAGE] an object with no RFC 8785 form (NaN) cannot be signed."""
    with pytest.raises(InvalidJson):
        sign({**UNSIGNED, "amount": float("nan")}, SIGNER)


# --- any single-byte change to the signed bytes ---------------------------------------------

FUZZ_UNSIGNED: dict[str, Any] = {
    **UNSIGNED,
    "text": 'quote " backslash \\ slash / unit-separator \x1f tab \t € é',
    "ratio": 0.5,
    "delta": -7,
    "flags": [True, False, None],
    "nested": {"a": [], "b": {}, "c": [{"d": "x"}]},
}
FUZZ_BYTES = canonicalize(sign(FUZZ_UNSIGNED, SIGNER))
#: RFC 8785 writes control characters as lowercase \u escapes: \u001F is the same string.
UNIT_SEPARATOR_F = FUZZ_BYTES.index(b"\\u001f") + 5
STRUCTURAL = b'"\\{}[],:-+.0123456789eEtfnuFA \t\n\r'


@settings(max_examples=500, deadline=None)
@given(
    position=st.integers(min_value=0, max_value=len(FUZZ_BYTES) - 1),
    replacement=st.one_of(st.sampled_from(STRUCTURAL), st.integers(min_value=0, max_value=255)),
)
@example(position=0, replacement=ord("["))
@example(position=len(FUZZ_BYTES) - 1, replacement=ord(" "))
@example(position=UNIT_SEPARATOR_F, replacement=ord("F"))
@example(position=FUZZ_BYTES.index(b"0.5") + 2, replacement=ord("0"))
@example(position=FUZZ_BYTES.index(b'"sig":"') + 7, replacement=ord("B"))
def test_single_byte_change_to_signed_bytes_never_verifies_different_content(
    position: int, replacement: int
) -> None:
    """[SIG-COVERAGE] [SIG-CRYPTO] a one-byte change to a signed object's canonical bytes
    is refused by the parser or by verify, unless it spells exactly the same JSON value
    (only possible through a \\u escape's hex case), in which case it still verifies."""
    original = FUZZ_BYTES[position]
    if replacement == original:
        replacement ^= 0x01
    mutated = FUZZ_BYTES[:position] + bytes([replacement]) + FUZZ_BYTES[position + 1 :]
    assert mutated != FUZZ_BYTES
    try:
        parsed = parse_json(mutated)
    except InvalidJson:
        return
    assert isinstance(parsed, dict)
    if canonicalize(parsed) == FUZZ_BYTES:
        # Same JSON value, differently spelled: the signature covers the value, not the bytes.
        assert verify(parsed, _ring()) == Verified("signer-1", ISSUER)
        return
    with pytest.raises((SignatureInvalid, VersionUnsupported)):
        verify(parsed, _ring())


def test_signed_fuzz_object_verifies_and_spells_the_unit_separator_in_lowercase() -> None:
    """[SIG-COVERAGE] the fuzzed object verifies as is, and its \\u001f escape is lowercase."""
    assert verify(parse_json(FUZZ_BYTES), _ring()) == Verified("signer-1", ISSUER)
    assert FUZZ_BYTES[UNIT_SEPARATOR_F - 5 : UNIT_SEPARATOR_F + 1] == b"\\u001f"
    respelled = FUZZ_BYTES.replace(b"\\u001f", b"\\u001F")
    assert parse_json(respelled) == parse_json(FUZZ_BYTES)


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("member", "rule", "where"),
    [
        ({"amount": 1e20}, "JSON-INTEGER-RANGE", "/amount"),
        ({"items": [{"qty": 9007199254740993.0}]}, "JSON-INTEGER-RANGE", "/items/0/qty"),
        ({"deep": _nested(64)}, "JSON-DEPTH", "/deep" + "/0" * 63),
    ],
    ids=["1e20", "2**53+1.0", "nesting-65"],
)
def test_sign_refuses_what_the_strict_reader_would_not_read_back(
    member: dict[str, Any], rule: str, where: str
) -> None:
    """[JCS-READBACK] RFC 8785 writes 1e20 as 100000000000000000000, which the reader refuses."""
    canonicalize({**UNSIGNED, **member})  # RFC 8785 itself has a form for it
    with pytest.raises(InvalidJson) as caught:
        sign({**UNSIGNED, **member}, SIGNER)
    assert (caught.value.data["rule"], caught.value.data["where"]) == (rule, where)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53) + 1, 2**53 - 1))
def test_every_number_sign_takes_reads_back_through_the_strict_reader(number: float) -> None:
    """[JCS-READBACK]"""
    try:
        signed = sign({**UNSIGNED, "amount": number}, SIGNER)
    except InvalidJson as refused:
        assert refused.data["rule"] == "JSON-INTEGER-RANGE"
        return
    assert parse_json(canonicalize(signed)) == signed
