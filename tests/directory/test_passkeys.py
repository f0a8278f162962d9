"""[CARD-PASSKEY] registering a passkey onto a Human Card, and what a passkey key is not.

The registration response is what a browser hands over, made here by a
:class:`~hatp.gateway.SoftwareAuthenticator`; :func:`register_passkey`
verifies it with the ``webauthn`` library and returns the card's key entry,
and :func:`add_passkey` signs the card again. Registration, then a vote
signed by that passkey through the real gateway, runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest

from directory.people import DIRECTORY_KEY, ISSUER, card, keyring, signed
from hatp.directory import Directory, add_passkey, register_passkey, verify_card
from hatp.errors import CardInvalid, PasskeyInvalid, SignatureInvalid
from hatp.evidence import card_keyring, sign, verify, verify_approval, verify_passkey
from hatp.evidence._b64 import b64url_encode
from hatp.gateway import SoftwareAuthenticator, sign_passkey_vote
from hatp.model import PublicJwk, Result, WebAuthnKey, parse_card

RP = "acme.com"
ORIGIN = "https://acme.com"
KID = "human://acme.com/bob#passkey-2"


def _device(**options: Any) -> SoftwareAuthenticator:
    return SoftwareAuthenticator(RP, KID, **options)


def _registered(device: SoftwareAuthenticator, challenge: bytes, **response: Any) -> dict[str, Any]:
    return register_passkey(
        device.register(challenge, **response),
        challenge=challenge,
        rp_id=RP,
        origins=[ORIGIN],
        kid=KID,
    )


def test_a_registration_gives_the_cards_passkey_entry() -> None:
    """[CARD-PASSKEY] the entry is the authenticator's own key, credential and rpId."""
    device = _device()
    challenge = secrets.token_bytes(32)
    entry = _registered(device, challenge)
    assert entry == device.key_entry()
    assert WebAuthnKey.model_validate(entry).rp_id == RP


def _edit_client_data(response: dict[str, Any], **changes: Any) -> dict[str, Any]:
    client = json.loads(base64.urlsafe_b64decode(response["response"]["clientDataJSON"] + "=="))
    text = json.dumps({**client, **changes}, separators=(",", ":")).encode()
    return {**response, "response": {**response["response"], "clientDataJSON": b64url_encode(text)}}


REFUSED = {
    "another-challenge": (lambda d, c: d.register(secrets.token_bytes(32)), "CHALLENGE"),
    "another-origin": (lambda d, c: d.register(c, origin="https://evil.example"), "ORIGIN"),
    "cross-origin": (lambda d, c: _edit_client_data(d.register(c), crossOrigin=True), "ORIGIN"),
    "a-get-not-a-create": (
        lambda d, c: _edit_client_data(d.register(c), type="webauthn.get"),
        "TYPE",
    ),
    "user-not-verified": (
        lambda d, c: _device(user_verified=False).register(c),
        "USER_VERIFICATION",
    ),
    "another-rp": (
        lambda d, c: SoftwareAuthenticator("evil.example", KID, origin=ORIGIN).register(c),
        "RP_ID",
    ),
    "not-json": (lambda d, c: {**d.register(c), "response": {"clientDataJSON": "!!"}}, "SHAPE"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_bad_registration_is_refused_with_its_reason(name: str) -> None:
    """[CARD-PASSKEY] PASSKEY_INVALID, with the step that failed."""
    make, reason = REFUSED[name]
    device, challenge = _device(), secrets.token_bytes(32)
    with pytest.raises(PasskeyInvalid) as info:
        register_passkey(
            make(device, challenge), challenge=challenge, rp_id=RP, origins=[ORIGIN], kid=KID
        )
    assert info.value.reason == reason, info.value.message


def test_an_origin_that_cannot_use_the_rp_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="cannot use passkeys"):
        register_passkey({}, challenge=b"x", rp_id=RP, origins=["https://evil.example"], kid=KID)


def test_the_directory_signs_the_card_again_with_the_passkey_on_it() -> None:
    """[CARD-PASSKEY] [CARD-SIGNED] the new card verifies; the old signature is gone."""
    old = signed("bob", keys=[])
    entry = _registered(_device(), secrets.token_bytes(32))
    new = add_passkey(old, entry, DIRECTORY_KEY)
    assert new["signature"] != old["signature"]
    card_ = verify_card(new, keyring())
    assert card_.has_passkey and [k.kid for k in card_.keys] == [KID]
    assert len(Directory(ISSUER, [new], keyring())) == 1


def test_a_second_passkey_with_the_same_kid_or_credential_is_refused() -> None:
    entry = _device().key_entry()
    with_one = add_passkey(card("bob", keys=[]), entry, DIRECTORY_KEY)
    with pytest.raises(CardInvalid) as info:
        add_passkey(with_one, entry, DIRECTORY_KEY)
    assert info.value.data["where"] == "/keys"


def test_a_passkey_never_verifies_an_ed25519_signature_nor_a_vote_key_an_assertion() -> None:
    """[CARD-PASSKEY] card_keyring holds the Ed25519 keys only; verify_passkey the passkeys only."""
    from gateway.people import KEYS

    device = _device()
    bob = parse_card(
        add_passkey(
            signed("bob", keys=[KEYS["bob"].public.to_jwk()]), device.key_entry(), DIRECTORY_KEY
        )
    )
    ring = card_keyring(bob)
    assert ring.kids() == [KEYS["bob"].kid]
    signed_as_passkey = {**sign({"hatpVersion": "0.1", "n": 1}, KEYS["bob"])}
    signed_as_passkey["signature"] = {**signed_as_passkey["signature"], "kid": KID}
    with pytest.raises(SignatureInvalid) as info:
        verify(signed_as_passkey, ring)
    assert info.value.reason == "KID_UNKNOWN"
    payload = {
        "askId": "ask-aaaaaaaaaaaa",
        "txnId": "t",
        "planDigest": "sha256:" + "A" * 43,
        "groupId": "finance",
        "human": bob.id,
    }
    at = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    vote = sign_passkey_vote(device, payload, "approve", "n" * 22, at)
    vote["passkey"] = {**vote["passkey"], "kid": KEYS["bob"].kid}
    with pytest.raises(PasskeyInvalid) as caught:
        verify_passkey(vote, bob)
    assert caught.value.reason == "KEY_UNKNOWN"
    assert [type(k) for k in bob.keys] == [PublicJwk, WebAuthnKey]


def test_register_a_passkey_then_approve_with_it(store_url: str) -> None:
    """[CARD-PASSKEY] [GW-PASSKEY] [TXN-PASSKEY] bob registers, the directory re-signs his
    card, and his passkey's vote approves a group that needs one; the approval verifies."""
    from gateway.people import World, people_directory, person_card, plan_doc, request
    from gateway.people import keyring as gateway_keyring

    device = SoftwareAuthenticator(RP, "human://acme.com/bob#passkey-9")
    challenge = secrets.token_bytes(32)
    entry = register_passkey(
        device.register(challenge), challenge=challenge, rp_id=RP, origins=[ORIGIN], kid=device.kid
    )
    bob = add_passkey(person_card("bob", keys=[]), entry, DIRECTORY_KEY)
    world = World(store_url, people_directory(bob, person_card("alice", keys=[])))
    doc = plan_doc(passkey_required=True)

    async def body() -> dict[str, Any]:
        pending = await world.gateway.ask(request(doc))
        (notice,) = world.inbox("bob")
        assert notice.nonce is not None and world.inbox("alice") == []
        vote = sign_passkey_vote(device, notice.payload, "approve", notice.nonce, world.clock.now())
        await world.gateway.submit_vote(pending["askId"], vote)
        return await world.gateway.poll(pending["askId"])

    try:
        approval = asyncio.run(body())
    finally:
        world.close()
    assert approval["decision"] == "approve"
    findings = verify_approval(approval, doc, gateway_keyring())
    assert [f.rule for f in findings if f.result is not Result.PASS] == []
