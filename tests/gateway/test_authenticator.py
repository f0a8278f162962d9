"""The software authenticator answers as a browser and platform authenticator would:
checked against the ``webauthn`` library's own verify functions."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from webauthn import verify_authentication_response, verify_registration_response
from webauthn.helpers import parse_authenticator_data
from webauthn.helpers.exceptions import InvalidAuthenticationResponse
from webauthn.helpers.structs import AttestationFormat

from hatp.evidence._passkey import cose_public_key
from hatp.gateway import SoftwareAuthenticator
from hatp.model import WebAuthnKey

RP, KID, ORIGIN = "acme.com", "human://acme.com/bob#passkey-1", "https://acme.com"


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_a_registration_response_verifies_with_attestation_none() -> None:
    device = SoftwareAuthenticator(RP, KID)
    challenge = secrets.token_bytes(32)
    verified = verify_registration_response(
        credential=device.register(challenge),
        expected_challenge=challenge,
        expected_rp_id=RP,
        expected_origin=ORIGIN,
        require_user_verification=True,
    )
    assert verified.fmt == AttestationFormat.NONE and verified.user_verified
    assert verified.credential_public_key == cose_public_key(
        WebAuthnKey.model_validate(device.key_entry())
    )


def test_an_assertion_verifies_and_its_count_goes_up() -> None:
    device = SoftwareAuthenticator(RP, KID)
    public = cose_public_key(WebAuthnKey.model_validate(device.key_entry()))
    counts = []
    for _ in range(2):
        challenge = secrets.token_bytes(32)
        verified = verify_authentication_response(
            credential=device.assertion(challenge),
            expected_challenge=challenge,
            expected_rp_id=RP,
            expected_origin=ORIGIN,
            credential_public_key=public,
            credential_current_sign_count=counts[-1] if counts else 0,
            require_user_verification=True,
        )
        counts.append(verified.new_sign_count)
    assert counts == [1, 2]


def test_the_client_data_and_flags_are_a_browsers() -> None:
    response = SoftwareAuthenticator(RP, KID).assertion(b"\x01" * 32)["response"]
    client = _b64(response["clientDataJSON"])
    assert client == (
        b'{"type":"webauthn.get","challenge":"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE",'
        b'"origin":"https://acme.com","crossOrigin":false}'
    )
    data = parse_authenticator_data(_b64(response["authenticatorData"]))
    assert data.flags.up and data.flags.uv and data.sign_count == 1


def test_without_user_verification_the_library_refuses_it() -> None:
    device = SoftwareAuthenticator(RP, KID, user_verified=False, counting=False)
    challenge = secrets.token_bytes(32)
    with pytest.raises(InvalidAuthenticationResponse, match="User verification"):
        verify_authentication_response(
            credential=device.assertion(challenge),
            expected_challenge=challenge,
            expected_rp_id=RP,
            expected_origin=ORIGIN,
            credential_public_key=cose_public_key(WebAuthnKey.model_validate(device.key_entry())),
            credential_current_sign_count=0,
            require_user_verification=True,
        )


def test_a_seeded_authenticator_is_the_same_passkey_every_time() -> None:
    one = SoftwareAuthenticator.from_seed(b"bob", RP, KID)
    assert one.key_entry() == SoftwareAuthenticator.from_seed(b"bob", RP, KID).key_entry()
    assert one.key_entry() != SoftwareAuthenticator.from_seed(b"carol", RP, KID).key_entry()
    assert json.loads(json.dumps(one.register(b"x" * 32)))["type"] == "public-key"
