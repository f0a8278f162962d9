"""Key sets: the thumbprint pin, signing and verifying a set in order, and key periods
(rotation and revocation) in the keyring and in verify."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from evidence.keysets import (
    COORD,
    COORDINATOR,
    GATEWAY,
    GATEWAY_NEW,
    GATEWAY_OLD,
    JAN,
    NOW,
    ORG,
    OTHER_ROOT,
    PIN,
    ROOT,
    listed,
)
from hatp._checks import unsafe_switched_off
from hatp.clock import format_time
from hatp.errors import (
    KEYSET_REASONS,
    KeyringInvalid,
    KeySetInvalid,
    SignatureInvalid,
    VersionUnsupported,
)
from hatp.evidence import (
    KeyPeriod,
    Keyring,
    PublicKey,
    SigningKey,
    VerifiedKeySet,
    digest,
    parse_json,
    sign,
    sign_key_set,
    thumbprint,
    verify,
    verify_key_set,
)
from hatp.evidence._b64 import b64url_decode
from hatp.model import KeyringDocument, KeySetKey
from hatp.version import PROTOCOL_VERSION

#: Each check switched off here, and the tests that show the harm it prevents.
SWITCH_OFF_TESTS = {
    "SIG-PERIOD": ("test_switched_off_keys_verify_what_they_signed_outside_their_period",),
    "KEYSET-PIN": ("test_switched_off_the_pin_takes_a_set_another_root_signed",),
    "KEYSET-ROLLBACK": ("test_switched_off_an_older_set_brings_a_revoked_key_back",),
}


ISSUED = NOW - timedelta(hours=1)
EXPIRES = NOW + timedelta(days=7)
#: The old gateway key's period ends; the new one's starts a month before (overlap).
OLD_UNTIL = datetime(2026, 6, 30, 23, 59, 59, 999000, tzinfo=UTC)
NEW_FROM = datetime(2026, 6, 1, tzinfo=UTC)
#: The coordinator's key was revoked then.
REVOKED = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _keys() -> list[dict[str, Any]]:
    return [
        listed(GATEWAY_OLD, "gateway", GATEWAY, notAfter=format_time(OLD_UNTIL), status="retired"),
        listed(GATEWAY_NEW, "gateway", GATEWAY, notBefore=format_time(NEW_FROM)),
        listed(COORD, "coordinator", COORDINATOR, status="revoked", revokedAt=format_time(REVOKED)),
    ]


def _set(
    root: SigningKey = ROOT,
    *,
    version: int = 3,
    issued_at: datetime = ISSUED,
    expires_at: datetime = EXPIRES,
    keys: Sequence[KeySetKey | Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    return sign_key_set(
        root,
        organisation=ORG,
        version=version,
        issued_at=issued_at,
        expires_at=expires_at,
        keys=_keys() if keys is None else keys,
    )


def _refusal(doc: Any, **options: Any) -> KeySetInvalid:
    with pytest.raises(KeySetInvalid) as caught:
        verify_key_set(doc, **{"pin": PIN, "now": NOW, **options})
    assert caught.value.reason in KEYSET_REASONS
    return caught.value


def _object(by: SigningKey) -> dict[str, Any]:
    return sign({"hatpVersion": PROTOCOL_VERSION, "type": "approval", "amount": "10.00"}, by)


# --- [KEYSET-PIN] the thumbprint -----------------------------------------------------------


def test_thumbprint_is_rfc_7638_as_rfc_8037_publishes_for_its_ed25519listed() -> None:
    """[KEYSET-PIN] RFC 8037 Appendix A.3: the Ed25519 example key's JWK thumbprint."""
    raw = b64url_decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
    assert thumbprint(PublicKey(raw, "any-kid")) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_thumbprint_names_the_key_not_its_kid() -> None:
    """[KEYSET-PIN] the kid is not hashed: renaming a key keeps its pin; another key's differs."""
    renamed = PublicKey(ROOT.public.raw, "acme-root-renamed")
    assert thumbprint(renamed) == PIN
    assert thumbprint(OTHER_ROOT.public) != PIN
    assert len(PIN) == 43 and "=" not in PIN


# --- [KEYSET-DOC] [KEYSET-ORDER] signing and verifying -----------------------------------------


def test_a_signed_key_set_verifies_and_says_what_it_holds() -> None:
    """[KEYSET-DOC] [KEYSET-ORDER] sign_key_set's output, read back from its JSON bytes,
    verifies under the pinned root and reports organisation, version, times and keys."""
    doc = _set()
    assert doc["type"] == "hatp.keyset"
    assert doc["root"] == ROOT.public.to_jwk()
    assert doc["signature"]["kid"] == ROOT.kid
    assert "revokedAt" not in doc["keys"][0] and "notAfter" not in doc["keys"][1]
    wire = parse_json(json.dumps(doc).encode())
    verified = verify_key_set(wire, pin=PIN, now=NOW)
    assert verified == VerifiedKeySet(
        organisation=ORG,
        version=3,
        issued_at=ISSUED,
        expires_at=EXPIRES,
        root_thumbprint=PIN,
        digest=digest(doc),
        keys=tuple(KeySetKey.model_validate(key) for key in _keys()),
    )


def test_sign_key_set_takes_models_and_refuses_what_verify_would() -> None:
    """[KEYSET-DOC] keys may be KeySetKey objects; a set breaking the form is not signed."""
    models = [KeySetKey.model_validate(key) for key in _keys()]
    assert _set(keys=models) == _set()
    with pytest.raises(KeySetInvalid) as caught:
        _set(keys=[*_keys(), _keys()[0]])
    assert caught.value.reason == "SHAPE"
    assert "listed twice" in caught.value.message


def _drop_type(doc: dict[str, Any]) -> None:
    del doc["type"]


def _as_keyring(doc: dict[str, Any]) -> None:
    doc["type"] = "hatp.keyring"


def _version_zero(doc: dict[str, Any]) -> None:
    doc["version"] = 0


def _version_as_text(doc: dict[str, Any]) -> None:
    doc["version"] = "3"


def _extra_member(doc: dict[str, Any]) -> None:
    doc["approvedBy"] = "cfo"


def _duplicate_kid(doc: dict[str, Any]) -> None:
    doc["keys"].append(copy.deepcopy(doc["keys"][0]))


def _revoked_without_time(doc: dict[str, Any]) -> None:
    del doc["keys"][2]["revokedAt"]


def _active_with_revoked_at(doc: dict[str, Any]) -> None:
    doc["keys"][1]["revokedAt"] = format_time(REVOKED)


def _ends_before_it_starts(doc: dict[str, Any]) -> None:
    doc["keys"][0]["notAfter"] = doc["keys"][0]["notBefore"]


def _root_kid_reused(doc: dict[str, Any]) -> None:
    doc["keys"][1]["kid"] = ROOT.kid


def _unknown_role(doc: dict[str, Any]) -> None:
    doc["keys"][1]["role"] = "admin"


def _unknown_status(doc: dict[str, Any]) -> None:
    doc["keys"][1]["status"] = "suspended"


def _bad_time(doc: dict[str, Any]) -> None:
    doc["keys"][1]["notBefore"] = "2026-02-30T00:00:00.000Z"


def _expires_before_issued(doc: dict[str, Any]) -> None:
    doc["expiresAt"] = doc["issuedAt"]


def _x_unused_bits(doc: dict[str, Any]) -> None:
    x = doc["keys"][1]["x"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    doc["keys"][1]["x"] = x[:-1] + alphabet[alphabet.index(x[-1]) | 1]


def _signature_malformed(doc: dict[str, Any]) -> None:
    doc["signature"] = {**doc["signature"], "extra": "x"}


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (_drop_type, "/type"),
        (_as_keyring, "/type"),
        (_version_zero, "/version"),
        (_version_as_text, "/version"),
        (_extra_member, "/approvedBy"),
        (_duplicate_kid, ""),
        (_revoked_without_time, "/keys/2"),
        (_active_with_revoked_at, "/keys/1"),
        (_ends_before_it_starts, "/keys/0"),
        (_root_kid_reused, ""),
        (_unknown_role, "/keys/1/role"),
        (_unknown_status, "/keys/1/status"),
        (_bad_time, "/keys/1/notBefore"),
        (_expires_before_issued, ""),
        (_x_unused_bits, "/keys/1"),
        (_signature_malformed, "/signature"),
    ],
    ids=lambda value: getattr(value, "__name__", value).strip("_"),
)
def test_a_set_not_of_the_key_set_form_is_refused(
    edit: Callable[[dict[str, Any]], None], where: str
) -> None:
    """[KEYSET-DOC] SHAPE: the form is checked before the signature, naming where."""
    doc = _set()
    edit(doc)
    refusal = _refusal(doc)
    assert refusal.reason == "SHAPE"
    assert refusal.data["rule"] == "KEYSET-DOC"
    assert refusal.data["where"] == where, refusal.message
    assert refusal.data["organisation"] == ORG


@pytest.mark.parametrize("doc", [[], "keys", None, 3], ids=["list", "text", "null", "number"])
def test_what_is_not_an_object_is_refused_as_shape(doc: Any) -> None:
    """[KEYSET-DOC] SHAPE: a key set is a JSON object."""
    assert _refusal(doc).reason == "SHAPE"


def test_a_set_of_an_unknown_version_is_refused_before_its_form() -> None:
    """[VER-KNOWN] [KEYSET-ORDER] VERSION_UNSUPPORTED as for every document, before the form
    (a newer format may have other members)."""
    doc = {**_set(), "hatpVersion": "9.0", "newMember": True}
    with pytest.raises(VersionUnsupported) as caught:
        verify_key_set(doc, pin=PIN, now=NOW)
    assert caught.value.data["found"] == "9.0"


def test_an_unsigned_set_is_refused() -> None:
    """[KEYSET-ORDER] UNSIGNED: no signature member."""
    doc = _set()
    del doc["signature"]
    refusal = _refusal(doc)
    assert refusal.reason == "UNSIGNED"
    assert refusal.data["version"] == 3


def test_a_set_signed_by_another_root_is_refused() -> None:
    """[KEYSET-PIN] ROOT_MISMATCH: a well-signed set whose root is not the one pinned."""
    doc = _set(OTHER_ROOT)
    refusal = _refusal(doc)
    assert refusal.reason == "ROOT_MISMATCH"
    assert refusal.data["rule"] == "KEYSET-PIN"
    assert refusal.data["thumbprint"] == thumbprint(OTHER_ROOT.public)
    assert refusal.data["pin"] == PIN
    assert verify_key_set(doc, pin=thumbprint(OTHER_ROOT.public), now=NOW).version == 3


def test_a_set_signed_by_a_key_it_lists_not_its_root_is_refused() -> None:
    """[KEYSET-ORDER] BAD_SIGNATURE: the signature's kid is not the root's."""
    doc = sign({k: v for k, v in _set().items() if k != "signature"}, GATEWAY_NEW)
    refusal = _refusal(doc)
    assert refusal.reason == "BAD_SIGNATURE"
    assert refusal.data["kid"] == GATEWAY_NEW.kid


def test_a_set_changed_after_its_root_signed_it_is_refused() -> None:
    """[KEYSET-ORDER] BAD_SIGNATURE: a key added after signing (an attacker's, for the
    gateway) breaks the root's signature."""
    doc = _set()
    mallory = SigningKey.from_seed(bytes([99]) * 32, "gateway-mallory")
    doc["keys"].append(listed(mallory, "gateway", GATEWAY))
    refusal = _refusal(doc)
    assert refusal.reason == "BAD_SIGNATURE"
    assert refusal.data["signatureReason"] == "BAD_SIGNATURE"


def test_a_set_signed_by_another_key_under_the_root_kid_is_refused() -> None:
    """[KEYSET-ORDER] BAD_SIGNATURE: the root's kid on another key's signature."""
    body = {k: v for k, v in _set().items() if k != "signature"}
    forged = sign(body, SigningKey.from_seed(bytes([98]) * 32, ROOT.kid))
    assert _refusal(forged).reason == "BAD_SIGNATURE"


def test_an_expired_set_is_refused_from_its_expiry_on() -> None:
    """[KEYSET-ORDER] EXPIRED: now >= expiresAt; a millisecond before, it is used."""
    doc = _set()
    refusal = _refusal(doc, now=EXPIRES)
    assert refusal.reason == "EXPIRED"
    assert refusal.data["expiresAt"] == format_time(EXPIRES)
    assert verify_key_set(doc, pin=PIN, now=EXPIRES - timedelta(milliseconds=1)).version == 3


def test_a_set_issued_in_the_future_is_refused_beyond_five_minutes_of_skew() -> None:
    """[KEYSET-ORDER] NOT_YET_ISSUED: issuedAt more than 5 minutes after now."""
    doc = _set(issued_at=NOW + timedelta(minutes=5, milliseconds=1))
    assert _refusal(doc).reason == "NOT_YET_ISSUED"
    skewed = _set(issued_at=NOW + timedelta(minutes=5))
    assert verify_key_set(skewed, pin=PIN, now=NOW).issued_at == NOW + timedelta(minutes=5)


def test_an_older_version_than_the_newest_seen_is_refused() -> None:
    """[KEYSET-ORDER] ROLLED_BACK: version 3 after version 4 was accepted."""
    refusal = _refusal(_set(), newest_seen=4)
    assert (refusal.reason, refusal.data["rule"]) == ("ROLLED_BACK", "KEYSET-ROLLBACK")
    assert refusal.data["newestSeen"] == 4
    assert verify_key_set(_set(), pin=PIN, now=NOW, newest_seen=2).version == 3


def test_another_set_under_the_version_seen_is_refused() -> None:
    """[KEYSET-ORDER] ROLLED_BACK: the same version, other content (the coordinator's key
    un-revoked); the very set seen is accepted again."""
    seen = verify_key_set(_set(), pin=PIN, now=NOW)
    again = verify_key_set(_set(), pin=PIN, now=NOW, newest_seen=3, newest_digest=seen.digest)
    assert again == seen
    unrevoked = _keys()
    unrevoked[2] = listed(COORD, "coordinator", COORDINATOR)
    swapped = _set(keys=unrevoked)
    refusal = _refusal(swapped, newest_seen=3, newest_digest=seen.digest)
    assert refusal.reason == "ROLLED_BACK"
    assert refusal.data["newestDigest"] == seen.digest


def test_the_checks_run_in_order() -> None:
    """[KEYSET-ORDER] the first failing step is the one reported: form before signature,
    pin before signature, signature before time, time before version."""
    unsigned_bad_form = _set()
    del unsigned_bad_form["signature"]
    unsigned_bad_form["version"] = 0
    assert _refusal(unsigned_bad_form).reason == "SHAPE"
    other_root_edited = _set(OTHER_ROOT)
    other_root_edited["organisation"] = "https://evil.example"
    assert _refusal(other_root_edited).reason == "ROOT_MISMATCH"
    expired_edited = _set(expires_at=NOW)
    expired_edited["version"] = 4
    assert _refusal(expired_edited).reason == "BAD_SIGNATURE"
    assert _refusal(_set(expires_at=NOW), newest_seen=9).reason == "EXPIRED"


# --- [SIG-PERIOD] the keyring of a set: rotation and revocation ----------------------------------


def _verified() -> VerifiedKeySet:
    return verify_key_set(_set(), pin=PIN, now=NOW)


def test_the_keyring_of_a_set_holds_its_keys_with_issuer_and_period() -> None:
    """[SIG-PERIOD] every key, vouched for by its issuer, each issuer trusted; not the root."""
    ring = _verified().keyring()
    assert ring.kids() == sorted([GATEWAY_OLD.kid, GATEWAY_NEW.kid, COORD.kid])
    assert ROOT.kid not in ring
    assert ring.trusted_issuers == sorted([GATEWAY, COORDINATOR])
    assert ring.resolve(GATEWAY_NEW.kid)[1] == GATEWAY
    assert ring.period(GATEWAY_OLD.kid) == KeyPeriod(
        not_before=JAN, not_after=OLD_UNTIL, role="gateway", organisation=ORG, set_version=3
    )
    assert ring.period(COORD.kid) == KeyPeriod(
        not_before=JAN, revoked_at=REVOKED, role="coordinator", organisation=ORG, set_version=3
    )
    assert ring.period("nobody") is None


def _period_refusal(doc: dict[str, Any], ring: Keyring, at: datetime) -> SignatureInvalid:
    with pytest.raises(SignatureInvalid) as caught:
        verify(doc, ring, at=at)
    assert caught.value.data["rule"] == "SIG-PERIOD"
    assert caught.value.data["at"] == format_time(at)
    return caught.value


def test_a_retired_key_verifies_inside_its_period_and_not_after() -> None:
    """[SIG-PERIOD] rotation: the old gateway key verifies what it signed up to notAfter
    (inclusive); signed later, KEY_EXPIRED; the new key takes over."""
    ring = _verified().keyring()
    signed = _object(GATEWAY_OLD)
    assert verify(signed, ring, at=datetime(2026, 3, 1, tzinfo=UTC)).issuer == GATEWAY
    assert verify(signed, ring, at=OLD_UNTIL).kid == GATEWAY_OLD.kid
    refusal = _period_refusal(signed, ring, OLD_UNTIL + timedelta(milliseconds=1))
    assert refusal.reason == "KEY_EXPIRED"
    assert refusal.data["kid"] == GATEWAY_OLD.kid
    assert verify(_object(GATEWAY_NEW), ring, at=NOW).kid == GATEWAY_NEW.kid


def test_a_key_verifies_nothing_signed_before_its_period() -> None:
    """[SIG-PERIOD] KEY_NOT_YET_VALID: the new gateway key, at a time before notBefore."""
    ring = _verified().keyring()
    refusal = _period_refusal(_object(GATEWAY_NEW), ring, NEW_FROM - timedelta(milliseconds=1))
    assert refusal.reason == "KEY_NOT_YET_VALID"
    assert verify(_object(GATEWAY_NEW), ring, at=NEW_FROM).kid == GATEWAY_NEW.kid


def test_a_revoked_key_verifies_what_it_signed_before_revocation_only() -> None:
    """[SIG-PERIOD] revocation: before revokedAt it verifies; at or after, KEY_REVOKED."""
    ring = _verified().keyring()
    signed = _object(COORD)
    before = REVOKED - timedelta(milliseconds=1)
    assert verify(signed, ring, at=before).issuer == COORDINATOR
    assert _period_refusal(signed, ring, REVOKED).reason == "KEY_REVOKED"
    assert _period_refusal(signed, ring, NOW).reason == "KEY_REVOKED"


def test_without_a_signing_time_periods_are_not_looked_at() -> None:
    """[SIG-PERIOD] the check needs the signing time: verify without ``at`` (as before key
    periods) checks the signature alone; resolve likewise."""
    ring = _verified().keyring()
    assert verify(_object(COORD), ring).kid == COORD.kid
    assert ring.resolve(COORD.kid)[0].raw == COORD.public.raw


def test_a_naive_signing_time_is_refused() -> None:
    """[SIG-PERIOD] a time without a zone cannot be placed in a period: ValueError."""
    with pytest.raises(ValueError, match="timezone-aware"):
        _verified().keyring().resolve(COORD.kid, datetime(2026, 1, 2))


def test_switched_off_keys_verify_what_they_signed_outside_their_period() -> None:
    """[SIG-PERIOD] planted: with the check off, the revoked coordinator key and the retired
    gateway key verify what was signed after revocation and after retirement."""
    ring = _verified().keyring()
    late = NOW
    for signer, reason in ((COORD, "KEY_REVOKED"), (GATEWAY_OLD, "KEY_EXPIRED")):
        assert _period_refusal(_object(signer), ring, late).reason == reason
        with unsafe_switched_off("SIG-PERIOD"):
            assert verify(_object(signer), ring, at=late).kid == signer.kid
    with unsafe_switched_off("SIG-PERIOD"):
        too_early = NEW_FROM - timedelta(days=1)
        assert verify(_object(GATEWAY_NEW), ring, at=too_early).kid == GATEWAY_NEW.kid


# --- [KEYRING-DOC] periods in keyring files, and merging -----------------------------------------


def test_a_keyring_keeps_its_periods_through_json_and_a_file(tmp_path: Path) -> None:
    """[KEYRING-DOC] [SIG-PERIOD] to_json / from_json and save / load keep every period."""
    ring = _verified().keyring()
    doc = ring.to_json()
    old = next(entry for entry in doc["keys"] if entry["kid"] == GATEWAY_OLD.kid)
    assert old == {
        **GATEWAY_OLD.public.to_jwk(),
        "issuer": GATEWAY,
        "notBefore": format_time(JAN),
        "notAfter": format_time(OLD_UNTIL),
        "role": "gateway",
        "organisation": ORG,
        "setVersion": 3,
    }
    assert KeyringDocument.model_validate(doc).to_wire() == doc
    back = Keyring.from_json(doc)
    assert back.to_json() == doc
    for kid in ring.kids():
        assert back.period(kid) == ring.period(kid)
    ring.save(tmp_path / "keyring.json")
    loaded = Keyring.load(tmp_path / "keyring.json")
    assert loaded.to_json() == doc
    with pytest.raises(SignatureInvalid) as caught:
        verify(_object(COORD), loaded, at=NOW)
    assert caught.value.reason == "KEY_REVOKED"


def test_a_keyring_file_without_periods_loads_as_before(tmp_path: Path) -> None:
    """[KEYRING-DOC] an old keyring file (no period members) loads unchanged, and its keys
    verify at any time."""
    old = {
        "hatpVersion": PROTOCOL_VERSION,
        "trustedIssuers": [GATEWAY],
        "keys": [{**GATEWAY_OLD.public.to_jwk(), "issuer": GATEWAY}],
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old, indent=2), encoding="utf-8")
    ring = Keyring.load(path)
    assert ring.to_json() == old
    assert ring.period(GATEWAY_OLD.kid) is None
    assert verify(_object(GATEWAY_OLD), ring, at=NOW).kid == GATEWAY_OLD.kid


@pytest.mark.parametrize(
    ("members", "fragment"),
    [
        ({"notAfter": "2026-06-30T00:00:00.000Z"}, "without notBefore"),
        ({"role": "gateway"}, "without notBefore"),
        (
            {"notBefore": "2026-06-30T00:00:00.000Z", "notAfter": "2026-06-30T00:00:00.000Z"},
            "not after notBefore",
        ),
        ({"notBefore": "2026-06-31T00:00:00.000Z"}, "notBefore"),
        ({"notBefore": "2026-06-30T00:00:00.000Z", "setVersion": 0}, "setVersion"),
        ({"notBefore": "2026-06-30T00:00:00.000Z", "role": "admin"}, "role"),
    ],
    ids=["notAfter-alone", "role-alone", "empty-period", "no-such-day", "version-0", "role"],
)
def test_a_keyring_with_a_broken_period_is_refused(members: dict[str, Any], fragment: str) -> None:
    """[KEYRING-DOC] period members are all-or-nothing around notBefore, and well formed."""
    doc = {
        "hatpVersion": PROTOCOL_VERSION,
        "trustedIssuers": [GATEWAY],
        "keys": [{**GATEWAY_OLD.public.to_jwk(), "issuer": GATEWAY, **members}],
    }
    with pytest.raises(KeyringInvalid, match=fragment):
        Keyring.from_json(doc)


def test_a_key_is_added_again_only_with_the_same_period() -> None:
    """[SIG-PERIOD] merging: the same key, issuer and period is a no-op; another period, or
    none where there was one, is refused (a keyring is built from one set, the newest)."""
    ring = _verified().keyring()
    period = ring.period(COORD.kid)
    ring.add(COORD.public, COORDINATOR, period)
    unrevoked = KeyPeriod(not_before=JAN, role="coordinator", organisation=ORG, set_version=3)
    for other in (unrevoked, None):
        with pytest.raises(KeyringInvalid, match="another period") as caught:
            ring.add(COORD.public, COORDINATOR, other)
        assert caught.value.data["kid"] == COORD.kid
    assert ring.period(COORD.kid) == period


def test_two_sets_for_one_issuer_merge_when_their_kids_differ() -> None:
    """[SIG-PERIOD] two organisations' sets may name one issuer with different keys; one kid
    with other key bytes is refused, as always."""
    ring = _verified().keyring()
    partner_root = SigningKey.from_seed(bytes([31]) * 32, "partner-root-1")
    extra = SigningKey.from_seed(bytes([32]) * 32, "gateway-partner-1")
    partner = sign_key_set(
        partner_root,
        organisation="https://partner.example",
        version=1,
        issued_at=ISSUED,
        expires_at=EXPIRES,
        keys=[listed(extra, "gateway", GATEWAY)],
    )
    other = verify_key_set(partner, pin=thumbprint(partner_root.public), now=NOW).keyring()
    for kid in other.kids():
        key, issuer = other.resolve(kid)
        ring.add(key, issuer, other.period(kid))
    assert extra.kid in ring and GATEWAY_NEW.kid in ring
    clash = SigningKey.from_seed(bytes([33]) * 32, GATEWAY_NEW.kid)
    with pytest.raises(KeyringInvalid, match="two different keys share kid"):
        ring.add(clash.public, GATEWAY, other.period(extra.kid))


@pytest.mark.parametrize(
    ("period", "fragment"),
    [
        (lambda: KeyPeriod(not_before=datetime(2026, 1, 1)), "timezone-aware"),
        (lambda: KeyPeriod(not_before=JAN, not_after=JAN), "before it starts"),
        (lambda: KeyPeriod(not_before=JAN, role="admin"), "role"),
    ],
    ids=["naive", "empty", "role"],
)
def test_a_key_period_is_checked_when_made(period: Callable[[], KeyPeriod], fragment: str) -> None:
    """[SIG-PERIOD] a KeyPeriod refuses a naive time, an empty period, an unknown role."""
    with pytest.raises(KeyringInvalid, match=fragment):
        period()


def test_switched_off_the_pin_takes_a_set_another_root_signed() -> None:
    """[KEYSET-PIN] planted: with the pin unchecked, a set a stranger's root signed, listing
    the stranger's key as acme's gateway, is taken: a signature by that key verifies as
    acme's gateway."""
    stranger = SigningKey.from_seed(bytes([31]) * 32, "gateway-stranger")
    forged = _set(OTHER_ROOT, keys=[listed(stranger, "gateway", GATEWAY)])
    assert _refusal(forged).reason == "ROOT_MISMATCH"
    with unsafe_switched_off("KEYSET-PIN"):
        ring = verify_key_set(forged, pin=PIN, now=NOW).keyring()
    assert verify(_object(stranger), ring).issuer == GATEWAY


def test_switched_off_an_older_set_brings_a_revoked_key_back() -> None:
    """[KEYSET-ROLLBACK] planted: version 3 revoked the coordinator's key; with rollback
    unchecked, version 2 (before the revocation) is taken after it, and the key signs
    again for the coordinator."""
    newest = _verified()
    unrevoked = _keys()
    unrevoked[2] = listed(COORD, "coordinator", COORDINATOR)
    older = _set(version=2, keys=unrevoked)
    assert _refusal(older, newest_seen=newest.version).reason == "ROLLED_BACK"
    with unsafe_switched_off("KEYSET-ROLLBACK"):
        ring = verify_key_set(older, pin=PIN, now=NOW, newest_seen=newest.version).keyring()
    assert verify(_object(COORD), ring, at=NOW).issuer == COORDINATOR
