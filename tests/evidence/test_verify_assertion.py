"""[GW-SIGN-IN] checking a browser's sign-in assertion against the cards that may hold its
passkey, and reading the challenge a WebAuthn response says it signed.

Assertions are what a browser hands over, made by a
:class:`~hatp.gateway.SoftwareAuthenticator` whose key entry is on a
directory-signed Human Card. Each refusal breaks one step and names it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from directory.people import DIRECTORY_KEY, card
from hatp.directory import sign_card
from hatp.errors import PasskeyInvalid
from hatp.evidence import PasskeyVerified, client_challenge, verify_assertion
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway import SoftwareAuthenticator
from hatp.model import HumanCard, parse_card

RP = "acme.com"
ORIGIN = "https://acme.com"
CHALLENGE = bytes(range(32))
OTHER_CHALLENGE = bytes(range(1, 33))


def _device(name: str, **options: Any) -> SoftwareAuthenticator:
    """``name``'s passkey for acme.com (the same key every time, a fresh sign count)."""
    return SoftwareAuthenticator.from_seed(
        name.encode(), RP, f"human://acme.com/{name}#passkey-1", **options
    )


def _card(name: str, device: SoftwareAuthenticator) -> HumanCard:
    """``name``'s directory-signed card holding ``device``'s passkey."""
    return parse_card(sign_card(card(name, keys=[device.key_entry()]), DIRECTORY_KEY))


def _edit_client_data(response: dict[str, Any], **changes: Any) -> dict[str, Any]:
    client = json.loads(base64.urlsafe_b64decode(response["response"]["clientDataJSON"] + "=="))
    text = json.dumps({**client, **changes}, separators=(",", ":")).encode()
    return _with(response, clientDataJSON=b64url_encode(text))


def _with(response: dict[str, Any], **members: Any) -> dict[str, Any]:
    """The credential with these members of its ``response`` replaced."""
    return {**response, "response": {**response["response"], **members}}


def _without(response: dict[str, Any], member: str) -> dict[str, Any]:
    inner = {k: v for k, v in response["response"].items() if k != member}
    return {**response, "response": inner}


def _flip_last_byte(text: str) -> str:
    raw = bytearray(b64url_decode(text))
    raw[-1] ^= 0x01
    return b64url_encode(bytes(raw))


def _refused(credential: Any, cards: list[HumanCard], **options: Any) -> PasskeyInvalid:
    with pytest.raises(PasskeyInvalid) as info:
        verify_assertion(credential, cards, challenge=CHALLENGE, **options)
    return info.value


# -- what verifies -----------------------------------------------------------


def test_an_assertion_returns_the_card_holding_its_passkey() -> None:
    """[GW-SIGN-IN] of two cards, the one whose passkey made the assertion, and what
    verified: its kid, credential, origin and the authenticator's new count."""
    alice, bob = _device("alice"), _device("bob")
    cards = [_card("alice", alice), _card("bob", bob)]

    found, verified = verify_assertion(bob.assertion(CHALLENGE), cards, challenge=CHALLENGE)
    assert found == cards[1]
    assert found.id == "human://acme.com/bob"
    assert verified == PasskeyVerified(bob.kid, bob.credential_id, ORIGIN, 1)

    found, verified = verify_assertion(alice.assertion(CHALLENGE), cards, challenge=CHALLENGE)
    assert found == cards[0]
    assert verified.kid == alice.kid


def test_an_assertion_from_an_origin_served_on_the_rp_verifies() -> None:
    """[GW-SIGN-IN] a subdomain of the rpId the gateway serves, named in ``origins``."""
    served = "https://gateway.acme.com"
    bob = _device("bob", origin=served)
    cards = [_card("bob", bob)]

    _, verified = verify_assertion(
        bob.assertion(CHALLENGE), cards, challenge=CHALLENGE, origins=[ORIGIN, served]
    )

    assert verified.origin == served


def test_the_sign_count_is_asked_for_the_card_and_credential_and_must_be_exceeded() -> None:
    """[GW-SIGN-IN] the count kept for (person, credential) is what the new one must pass."""
    bob = _device("bob")
    cards = [_card("bob", bob)]
    asked: list[tuple[str, str]] = []

    def kept(human: str, credential_id: str) -> int:
        asked.append((human, credential_id))
        return 4

    bob.sign_count = 4  # the authenticator signed four times before
    _, verified = verify_assertion(
        bob.assertion(CHALLENGE), cards, challenge=CHALLENGE, sign_count=kept
    )

    assert asked == [("human://acme.com/bob", bob.credential_id)]
    assert verified.sign_count == 5


def test_a_synced_passkey_that_never_counts_verifies_while_no_count_was_seen() -> None:
    """[GW-SIGN-IN] 0 after 0 is allowed: synced passkeys stay at 0."""
    bob = _device("bob", counting=False)
    cards = [_card("bob", bob)]

    for _ in range(2):
        _, verified = verify_assertion(
            bob.assertion(CHALLENGE), cards, challenge=CHALLENGE, sign_count=lambda h, c: 0
        )
        assert verified.sign_count == 0


# -- what is refused, and the step that refused it ---------------------------


def test_an_assertion_by_a_passkey_on_no_card_is_refused_KEY_UNKNOWN() -> None:
    """[GW-SIGN-IN] step 2: no card holds the credential the assertion names."""
    alice, bob = _device("alice"), _device("bob")

    for cards in ([_card("alice", alice)], []):
        refused = _refused(bob.assertion(CHALLENGE), cards)
        assert refused.reason == "KEY_UNKNOWN"
        assert bob.credential_id in refused.message


def test_a_card_key_with_the_same_kid_but_another_credential_is_refused_KEY_UNKNOWN() -> None:
    """[GW-SIGN-IN] the credential id names the passkey, not the kid: a second device
    under bob's kid is not bob's passkey."""
    bob, impostor = _device("bob"), _device("mallory")
    impostor.kid = bob.kid

    refused = _refused(impostor.assertion(CHALLENGE), [_card("bob", bob)])

    assert refused.reason == "KEY_UNKNOWN"


def test_a_passkey_on_two_peoples_cards_is_refused_KEY_AMBIGUOUS() -> None:
    """[GW-SIGN-IN] step 2: the card that holds the passkey says who signs in, so a
    credential on the cards of two people names nobody, whichever card comes first."""
    shared = _device("bob")
    on_alice = {**shared.key_entry(), "kid": "human://acme.com/alice#passkey-1"}
    cards = [
        _card("bob", shared),
        parse_card(sign_card(card("alice", keys=[on_alice]), DIRECTORY_KEY)),
    ]

    for order in (cards, cards[::-1]):
        refused = _refused(shared.assertion(CHALLENGE), order)
        assert refused.reason == "KEY_AMBIGUOUS"
        assert "human://acme.com/alice, human://acme.com/bob" in refused.message


SHAPES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "no-id": lambda c: {k: v for k, v in c.items() if k != "id"},
    "no-response": lambda c: {k: v for k, v in c.items() if k != "response"},
    "response-not-an-object": lambda c: {**c, "response": "e30"},
    "no-authenticatorData": lambda c: _without(c, "authenticatorData"),
    "no-clientDataJSON": lambda c: _without(c, "clientDataJSON"),
    "no-signature": lambda c: _without(c, "signature"),
    "id-not-base64url": lambda c: {**c, "id": c["id"] + "=="},
    "authenticatorData-not-base64url": lambda c: _with(c, authenticatorData="a+b/"),
    "clientDataJSON-not-base64url": lambda c: _with(c, clientDataJSON="!!"),
    "signature-not-base64url": lambda c: _with(c, signature="sig nature"),
    "signature-empty": lambda c: _with(c, signature=""),
    "signature-not-text": lambda c: _with(c, signature=12345),
    "clientDataJSON-not-json": lambda c: _with(c, clientDataJSON=b64url_encode(b"not json")),
    "clientDataJSON-an-array": lambda c: _with(c, clientDataJSON=b64url_encode(b"[]")),
    "clientDataJSON-nested-deep": lambda c: _with(c, clientDataJSON=b64url_encode(b"[" * 5000)),
    "clientDataJSON-without-origin": lambda c: _with(
        c, clientDataJSON=b64url_encode(b'{"type":"webauthn.get","challenge":"AA"}')
    ),
    "not-a-credential": lambda c: [c],
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_credential_not_of_the_assertion_form_is_refused_SHAPE(name: str) -> None:
    """[GW-SIGN-IN] steps 1 and 3: id and the three response members, base64url each,
    the client data a JSON object with type, challenge and origin."""
    bob = _device("bob")

    refused = _refused(SHAPES[name](bob.assertion(CHALLENGE)), [_card("bob", bob)])

    assert refused.reason == "SHAPE"


def test_client_data_of_a_registration_is_refused_TYPE() -> None:
    """[GW-SIGN-IN] step 3: the client data says webauthn.create, not webauthn.get."""
    bob = _device("bob")
    credential = _edit_client_data(bob.assertion(CHALLENGE), type="webauthn.create")

    refused = _refused(credential, [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("TYPE", bob.kid)


def test_an_assertion_over_another_challenge_is_refused_CHALLENGE() -> None:
    """[GW-SIGN-IN] step 3: the passkey signed a challenge this sign-in did not issue."""
    bob = _device("bob")

    refused = _refused(bob.assertion(OTHER_CHALLENGE), [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("CHALLENGE", bob.kid)


ORIGINS: dict[str, tuple[dict[str, Any], list[str] | None]] = {
    "another-site": ({"origin": "https://evil.example"}, None),
    "a-site-ending-like-the-rp": ({"origin": "https://notacme.com"}, None),
    "plain-http": ({"origin": "http://acme.com"}, None),
    "cross-origin": ({"cross_origin": True}, None),
    "cross-origin-from-a-served-origin": ({"cross_origin": True}, [ORIGIN]),
    "fits-the-rp-but-not-served": ({"origin": "https://login.acme.com"}, [ORIGIN]),
    "no-origin-served": ({}, []),
}


@pytest.mark.parametrize("name", sorted(ORIGINS))
def test_an_assertion_from_an_origin_not_accepted_is_refused_ORIGIN(name: str) -> None:
    """[GW-SIGN-IN] step 3: https on the rpId or a subdomain, not cross-origin, and one
    of the origins served when they are given."""
    made, origins = ORIGINS[name]
    bob = _device("bob")

    refused = _refused(bob.assertion(CHALLENGE, **made), [_card("bob", bob)], origins=origins)

    assert (refused.reason, refused.data["kid"]) == ("ORIGIN", bob.kid)


def test_an_assertion_for_another_rp_is_refused_RP_ID() -> None:
    """[GW-SIGN-IN] step 4: the authenticator data hashes another rpId than the passkey's."""
    bob = _device("bob")

    refused = _refused(bob.assertion(CHALLENGE, rp_id="evil.example"), [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("RP_ID", bob.kid)


def test_an_assertion_without_user_verification_is_refused_USER_VERIFICATION() -> None:
    """[GW-SIGN-IN] step 4: the authenticator saw the user but did not verify them."""
    bob = _device("bob", user_verified=False)

    refused = _refused(bob.assertion(CHALLENGE), [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("USER_VERIFICATION", bob.kid)


@pytest.mark.parametrize(("counting", "kept"), [(True, 1), (True, 7), (False, 3)])
def test_a_sign_count_not_above_the_one_kept_is_refused_SIGN_COUNT(
    counting: bool, kept: int
) -> None:
    """[GW-SIGN-IN] step 4: the same count again, a lower one, or 0 once a count was seen
    (a cloned authenticator)."""
    bob = _device("bob", counting=counting)

    refused = _refused(bob.assertion(CHALLENGE), [_card("bob", bob)], sign_count=lambda h, c: kept)

    assert (refused.reason, refused.data["kid"]) == ("SIGN_COUNT", bob.kid)


def test_an_assertion_with_a_changed_signature_is_refused_SIGNATURE() -> None:
    """[GW-SIGN-IN] step 4: one bit of the ES256 signature changed."""
    bob = _device("bob")
    credential = bob.assertion(CHALLENGE)
    credential = _with(credential, signature=_flip_last_byte(credential["response"]["signature"]))

    refused = _refused(credential, [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("SIGNATURE", bob.kid)


def test_an_assertion_with_client_data_changed_after_signing_is_refused_SIGNATURE() -> None:
    """[GW-SIGN-IN] step 4: the signature covers the client data's hash, so a member added
    afterwards (every other check passing) breaks it."""
    bob = _device("bob")
    credential = _edit_client_data(bob.assertion(CHALLENGE), note="added after signing")

    refused = _refused(credential, [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("SIGNATURE", bob.kid)


def test_another_key_claiming_the_cards_credential_is_refused_SIGNATURE() -> None:
    """[GW-SIGN-IN] step 4: a device claiming bob's credential id, with its own key."""
    bob = _device("bob")
    impostor = SoftwareAuthenticator.from_seed(
        b"mallory", RP, bob.kid, credential_id=b64url_decode(bob.credential_id)
    )
    assert impostor.credential_id == bob.credential_id

    refused = _refused(impostor.assertion(CHALLENGE), [_card("bob", bob)])

    assert (refused.reason, refused.data["kid"]) == ("SIGNATURE", bob.kid)


# -- client_challenge --------------------------------------------------------


def test_the_client_challenge_is_the_one_the_client_data_names() -> None:
    """[GW-SIGN-IN-CHALLENGE] read from an assertion's and a registration's client data,
    before anything is verified, so the server can look up the challenge it issued."""
    bob = _device("bob")

    assert client_challenge(bob.assertion(CHALLENGE)) == CHALLENGE
    assert client_challenge(bob.assertion(OTHER_CHALLENGE)) == OTHER_CHALLENGE
    assert client_challenge(bob.register(CHALLENGE)) == CHALLENGE


UNREADABLE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "no-response": lambda c: {k: v for k, v in c.items() if k != "response"},
    "response-not-an-object": lambda c: {**c, "response": ["clientDataJSON"]},
    "no-clientDataJSON": lambda c: _without(c, "clientDataJSON"),
    "clientDataJSON-not-text": lambda c: _with(c, clientDataJSON=42),
    "clientDataJSON-not-base64url": lambda c: _with(c, clientDataJSON="e30="),
    "clientDataJSON-not-json": lambda c: _with(c, clientDataJSON=b64url_encode(b"{nope")),
    "clientDataJSON-not-utf8": lambda c: _with(c, clientDataJSON=b64url_encode(b"\xff\xfe")),
    "clientDataJSON-an-array": lambda c: _with(c, clientDataJSON=b64url_encode(b"[]")),
    "clientDataJSON-nested-deep": lambda c: _with(c, clientDataJSON=b64url_encode(b"[" * 5000)),
    "no-challenge": lambda c: _edit_client_data(c, challenge=None),
    "challenge-not-text": lambda c: _edit_client_data(c, challenge=[1, 2]),
    "challenge-empty": lambda c: _edit_client_data(c, challenge=""),
    "challenge-not-base64url": lambda c: _edit_client_data(c, challenge="AA+/"),
    "challenge-padded": lambda c: _edit_client_data(c, challenge="AA=="),
    "not-a-credential": lambda c: "credential",
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_a_response_without_a_readable_challenge_is_refused_SHAPE(name: str) -> None:
    """[GW-SIGN-IN-CHALLENGE] clientDataJSON must be base64url of a JSON object whose
    challenge is base64url."""
    credential = UNREADABLE[name](_device("bob").assertion(CHALLENGE))

    with pytest.raises(PasskeyInvalid) as info:
        client_challenge(credential)

    assert info.value.reason == "SHAPE"
