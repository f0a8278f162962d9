"""[DIR-ENROL] a person registers a passkey onto their Human Card from an invitation.

The invitation is the authority: :class:`~hatp.directory.PasskeyEnrolment`
hands its holder creation options with a challenge kept for that invitation,
and registers what their browser (a :class:`~hatp.gateway.SoftwareAuthenticator`
here) creates over it onto the invited person's card, signed again by the
directory. Every refusal leaves the card as it was. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from directory.people import DIRECTORY_KEY, ISSUER, directory, keyring, signed
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.directory import Directory, PasskeyEnrolment, user_handle, verify_card
from hatp.errors import CardInvalid, CardUnknown, InviteInvalid, PasskeyInvalid
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway import SoftwareAuthenticator
from hatp.model import HumanCard, WebAuthnKey
from hatp.store import Store, WebBook

RP = "acme.com"
ORIGIN = "https://acme.com"
BOB = "human://acme.com/bob"
ALICE = "human://acme.com/alice"

#: Planted violations of the enrolment: case -> the checks that refuse it.
CASES: dict[str, tuple[str, ...]] = {"challenge-of-another-invitation": ("DIR-ENROL",)}


def _people() -> Directory:
    """bob and alice, neither with a passkey yet."""
    return directory(signed("bob", keys=[]), signed("alice", keys=[]))


def _enrolment(
    found: Directory,
    store: Store,
    clock: ManualClock,
    saved: Callable[[Directory], None] | None = None,
) -> PasskeyEnrolment:
    return PasskeyEnrolment(
        found,
        DIRECTORY_KEY,
        keyring(),
        WebBook(store),
        clock,
        rp_id=RP,
        origins=[ORIGIN],
        saved=saved,
    )


def _device(name: str, **options: Any) -> SoftwareAuthenticator:
    """A person's passkey, the same every run (its ``kid`` is what registration will give)."""
    return SoftwareAuthenticator.from_seed(name.encode(), RP, "unregistered", **options)


def _challenge(enrolment: PasskeyEnrolment, token: str) -> bytes:
    return b64url_decode(enrolment.options(token)["challenge"])


def _passkeys(card: HumanCard) -> list[tuple[str, str]]:
    return [(k.kid, k.credential_id) for k in card.keys if isinstance(k, WebAuthnKey)]


def _reason(caught: pytest.ExceptionInfo[InviteInvalid]) -> str:
    return caught.value.reason


def _refused_at_every_step(
    enrolment: PasskeyEnrolment, token: str, challenge: bytes, reason: str
) -> None:
    """Reading the invitation, its options and registering with it are all refused ``reason``."""
    for call in (
        lambda: enrolment.invitation(token),
        lambda: enrolment.options(token),
        lambda: enrolment.register(token, _device("bob-phone").register(challenge)),
    ):
        with pytest.raises(InviteInvalid) as caught:
            call()
        assert _reason(caught) == reason


# -- the path --------------------------------------------------------------


def test_an_invitation_registers_a_passkey_the_directory_signs_and_holds(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    """[DIR-ENROL] invite -> options -> register: bob's card now carries the passkey,
    signed again by the directory; the directory holds that card and `saved` wrote it."""
    file = tmp_path / "directory.json"
    calls: list[Directory] = []

    def saved(found: Directory) -> None:
        calls.append(found)
        found.save(file)

    found = _people()
    enrolment = _enrolment(found, store, clock, saved)
    phone = _device("bob-phone")
    token = enrolment.invite(BOB)
    assert enrolment.invitation(token).human == BOB

    card = enrolment.register(token, phone.register(_challenge(enrolment, token)))

    assert _passkeys(card) == [(f"{BOB}#passkey-1", phone.credential_id)]
    assert verify_card(found.signed(BOB), keyring()) == card == found.card(BOB)
    assert found.card(ALICE).keys == []
    assert calls == [found]
    reloaded = Directory.load(file, keyring())
    assert reloaded.issuer == ISSUER
    assert _passkeys(reloaded.card(BOB)) == [(f"{BOB}#passkey-1", phone.credential_id)]


def test_the_registered_passkey_is_the_authenticators_own_key(
    store: Store, clock: ManualClock
) -> None:
    """[DIR-ENROL] the card's entry is the public key and credential the browser created."""
    enrolment = _enrolment(_people(), store, clock)
    phone = _device("bob-phone")
    token = enrolment.invite(BOB)
    card = enrolment.register(token, phone.register(_challenge(enrolment, token)))
    (entry,) = card.keys
    assert entry.to_wire() == {**phone.key_entry(), "kid": f"{BOB}#passkey-1"}


def test_an_invitation_registers_once_then_it_is_used(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] [STORE-WEB-INVITE] after its registration the invitation is USED:
    no more options, no second passkey, and the store says which passkey it made."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    token = enrolment.invite(BOB)
    spare = _challenge(enrolment, token)
    enrolment.register(token, _device("bob-phone").register(_challenge(enrolment, token)))
    after = found.signed(BOB)

    with pytest.raises(InviteInvalid) as caught:
        enrolment.invitation(token)
    assert _reason(caught) == "USED"
    assert f"{BOB}#passkey-1" in caught.value.message
    with pytest.raises(InviteInvalid) as caught:
        enrolment.options(token)
    assert _reason(caught) == "USED"
    with pytest.raises(InviteInvalid) as caught:
        enrolment.register(token, _device("bob-laptop").register(spare))
    assert _reason(caught) == "USED"
    assert found.signed(BOB) == after
    (invite,) = WebBook(store).invites(BOB)
    assert invite.kid == f"{BOB}#passkey-1" and invite.used_at == clock.now()


def test_registrations_at_once_for_one_person_keep_both_passkeys(
    store: Store, clock: ManualClock
) -> None:
    """[DIR-ENROL] two invitations used from two threads at the same moment: each
    registration signs the card as the other left it; neither passkey is lost."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    devices = [_device(f"bob-device-{n}") for n in range(2)]
    tokens = [enrolment.invite(BOB) for _ in devices]
    responses = [
        device.register(_challenge(enrolment, token))
        for device, token in zip(devices, tokens, strict=True)
    ]
    start = threading.Barrier(len(devices))

    def register(n: int) -> HumanCard:
        start.wait(timeout=10)
        return enrolment.register(tokens[n], responses[n])

    with ThreadPoolExecutor(len(devices)) as pool:
        list(pool.map(register, range(len(devices))))
    held = sorted(credential for _, credential in _passkeys(found.card(BOB)))
    assert held == sorted(device.credential_id for device in devices)
    assert sorted(kid for kid, _ in _passkeys(found.card(BOB))) == [
        f"{BOB}#passkey-1",
        f"{BOB}#passkey-2",
    ]


def test_a_second_invitation_registers_passkey_2_and_excludes_the_first(
    store: Store, clock: ManualClock
) -> None:
    """[DIR-ENROL] the options name the person by their user handle and exclude the
    passkeys already on their card; the next passkey gets the next kid."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    phone, laptop = _device("bob-phone"), _device("bob-laptop")
    first = enrolment.invite(BOB)
    options = enrolment.options(first)
    assert options["excludeCredentials"] == []
    assert options["user"]["id"] == b64url_encode(user_handle(BOB))
    assert options["rp"]["id"] == RP
    enrolment.register(first, phone.register(b64url_decode(options["challenge"])))

    second = enrolment.invite(BOB)
    options = enrolment.options(second)
    assert options["excludeCredentials"] == [{"id": phone.credential_id, "type": "public-key"}]
    assert options["user"]["id"] == b64url_encode(user_handle(BOB))
    card = enrolment.register(second, laptop.register(b64url_decode(options["challenge"])))

    assert _passkeys(card) == [
        (f"{BOB}#passkey-1", phone.credential_id),
        (f"{BOB}#passkey-2", laptop.credential_id),
    ]
    assert verify_card(found.signed(BOB), keyring()) == card


def test_each_call_for_options_issues_a_fresh_challenge(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] a reload of the page asks again; either challenge registers (once)."""
    enrolment = _enrolment(_people(), store, clock)
    token = enrolment.invite(BOB)
    first, second = _challenge(enrolment, token), _challenge(enrolment, token)
    assert first != second and len(first) == len(second) == 32
    card = enrolment.register(token, _device("bob-phone").register(first))
    assert len(_passkeys(card)) == 1


def test_a_failing_save_still_leaves_the_passkey_registered(
    store: Store, clock: ManualClock
) -> None:
    """[DIR-ENROL] `saved` runs after the registration: its error reaches the caller, but
    the card and the used invitation stay as registered."""

    def disk_full(found: Directory) -> None:
        raise OSError("disk full")

    found = _people()
    enrolment = _enrolment(found, store, clock, disk_full)
    token = enrolment.invite(BOB)
    with pytest.raises(OSError, match="disk full"):
        enrolment.register(token, _device("bob-phone").register(_challenge(enrolment, token)))
    assert [kid for kid, _ in _passkeys(found.card(BOB))] == [f"{BOB}#passkey-1"]
    with pytest.raises(InviteInvalid) as caught:
        enrolment.invitation(token)
    assert _reason(caught) == "USED"


# -- invitations refused -------------------------------------------------------


def test_a_token_never_issued_is_unknown(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] [STORE-WEB-INVITE] UNKNOWN everywhere; nothing registered."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    before = found.signed(BOB)
    real = enrolment.invite(BOB)
    challenge = _challenge(enrolment, real)
    for call in (
        lambda: enrolment.invitation("not-a-token"),
        lambda: enrolment.options(real + "x"),
        lambda: enrolment.register("", _device("bob-phone").register(challenge)),
    ):
        with pytest.raises(InviteInvalid) as caught:
            call()
        assert _reason(caught) == "UNKNOWN"
    assert found.signed(BOB) == before
    assert enrolment.invitation(real).used_at is None


def test_an_invitation_expires_after_its_valid_for(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] good until valid_for has passed, then EXPIRED, even with options in hand."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    before = found.signed(BOB)
    token = enrolment.invite(BOB, valid_for=timedelta(minutes=10))
    assert enrolment.invitation(token).expires_at == clock.now() + timedelta(minutes=10)
    clock.advance(9 * 60 + 58)
    challenge = _challenge(enrolment, token)
    clock.advance(2)

    _refused_at_every_step(enrolment, token, challenge, "EXPIRED")
    assert found.signed(BOB) == before


def test_an_invitation_whose_person_lost_their_card_is_refused(
    store: Store, clock: ManualClock
) -> None:
    """[DIR-ENROL] CARD: bob was invited, then the directory (another process on the same
    store, with the file rewritten) no longer holds his card; nothing is registered."""
    enrolment = _enrolment(_people(), store, clock)
    token = enrolment.invite(BOB)
    challenge = _challenge(enrolment, token)
    without_bob = directory(signed("alice", keys=[]))
    later = _enrolment(without_bob, store, clock)

    _refused_at_every_step(later, token, challenge, "CARD")
    assert [card.id for card in without_bob.cards()] == [ALICE]
    assert without_bob.card(ALICE).keys == []
    assert enrolment.invitation(token).used_at is None


def test_nobody_without_a_card_is_invited(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] CardUnknown, and no invitation is stored."""
    enrolment = _enrolment(_people(), store, clock)
    nobody = "human://acme.com/nobody"
    with pytest.raises(CardUnknown) as caught:
        enrolment.invite(nobody)
    assert caught.value.data["card"] == nobody
    assert WebBook(store).invites(nobody) == []


@pytest.mark.parametrize("valid_for", [timedelta(0), timedelta(seconds=-1)])
def test_an_invitation_is_valid_for_some_time(
    store: Store, clock: ManualClock, valid_for: timedelta
) -> None:
    enrolment = _enrolment(_people(), store, clock)
    with pytest.raises(ValueError, match="positive valid_for"):
        enrolment.invite(BOB, valid_for=valid_for)
    assert WebBook(store).invites(BOB) == []


# -- challenges refused -----------------------------------------------------------


def test_a_challenge_issued_for_another_invitation_is_refused(
    store: Store, clock: ManualClock
) -> None:
    """[DIR-ENROL] CHALLENGE: alice's invitation cannot carry a passkey made over bob's
    challenge; nothing is registered and both invitations still work."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    bobs, alices = enrolment.invite(BOB), enrolment.invite(ALICE)
    bobs_challenge = _challenge(enrolment, bobs)
    before = found.to_json()

    with pytest.raises(PasskeyInvalid) as caught:
        enrolment.register(alices, _device("alice-phone").register(bobs_challenge))
    assert caught.value.reason == "CHALLENGE"
    assert found.to_json() == before

    card = enrolment.register(
        alices, _device("alice-phone").register(_challenge(enrolment, alices))
    )
    assert card.id == ALICE and len(_passkeys(card)) == 1
    card = enrolment.register(bobs, _device("bob-phone").register(bobs_challenge))
    assert card.id == BOB and len(_passkeys(card)) == 1


def test_a_challenge_never_issued_is_refused(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] CHALLENGE: a passkey made over a challenge the directory never gave."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    token = enrolment.invite(BOB)
    before = found.signed(BOB)
    with pytest.raises(PasskeyInvalid) as caught:
        enrolment.register(token, _device("bob-phone").register(bytes(32)))
    assert caught.value.reason == "CHALLENGE"
    assert found.signed(BOB) == before
    assert enrolment.invitation(token).used_at is None


def test_a_spent_challenge_is_not_spent_again(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] [STORE-WEB-CHALLENGE] CHALLENGE: the challenge a registration spent
    does not register a second passkey through bob's next invitation."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    first = enrolment.invite(BOB)
    challenge = _challenge(enrolment, first)
    enrolment.register(first, _device("bob-phone").register(challenge))
    after = found.signed(BOB)
    second = enrolment.invite(BOB)

    with pytest.raises(PasskeyInvalid) as caught:
        enrolment.register(second, _device("bob-laptop").register(challenge))
    assert caught.value.reason == "CHALLENGE"
    assert found.signed(BOB) == after
    assert enrolment.invitation(second).used_at is None


def test_a_challenge_is_good_for_five_minutes(store: Store, clock: ManualClock) -> None:
    """[DIR-ENROL] [STORE-WEB-CHALLENGE] CHALLENGE at five minutes; the invitation still
    works with fresh options."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    token = enrolment.invite(BOB)
    stale = _challenge(enrolment, token)
    before = found.signed(BOB)
    clock.advance(5 * 60)

    with pytest.raises(PasskeyInvalid) as caught:
        enrolment.register(token, _device("bob-phone").register(stale))
    assert caught.value.reason == "CHALLENGE"
    assert found.signed(BOB) == before

    fresh = _challenge(enrolment, token)
    clock.advance(5 * 60 - 1)
    card = enrolment.register(token, _device("bob-phone").register(fresh))
    assert len(_passkeys(card)) == 1


# -- registrations that fail verification ------------------------------------------


REFUSED: dict[str, tuple[Callable[[bytes], dict[str, Any]], str]] = {
    "user-not-verified": (
        lambda c: _device("bob-phone", user_verified=False).register(c),
        "USER_VERIFICATION",
    ),
    "another-origin": (
        lambda c: _device("bob-phone").register(c, origin="https://evil.example"),
        "ORIGIN",
    ),
    "a-sibling-origin-not-served": (
        lambda c: _device("bob-phone").register(c, origin="https://other.acme.com"),
        "ORIGIN",
    ),
    "another-rp": (
        lambda c: SoftwareAuthenticator.from_seed(
            b"bob-phone", "evil.example", "unregistered", origin=ORIGIN
        ).register(c),
        "RP_ID",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_registration_that_fails_verification_leaves_the_invitation_usable(
    store: Store, clock: ManualClock, name: str
) -> None:
    """[DIR-ENROL] [CARD-PASSKEY] the refusal names the failed step; nothing registered,
    the challenge unspent: the same options then register a good passkey."""
    make, reason = REFUSED[name]
    found = _people()
    enrolment = _enrolment(found, store, clock)
    token = enrolment.invite(BOB)
    challenge = _challenge(enrolment, token)
    before = found.signed(BOB)

    with pytest.raises(PasskeyInvalid) as caught:
        enrolment.register(token, make(challenge))
    assert caught.value.reason == reason, caught.value.message
    assert found.signed(BOB) == before
    assert enrolment.invitation(token).used_at is None

    card = enrolment.register(token, _device("bob-phone").register(challenge))
    assert [kid for kid, _ in _passkeys(card)] == [f"{BOB}#passkey-1"]


@pytest.mark.parametrize("whose", ["bob", "alice"])
def test_a_credential_already_on_a_card_is_not_registered_again(
    store: Store, clock: ManualClock, whose: str
) -> None:
    """[DIR-ENROL] [CARD-PASSKEY] a passkey (by its credential id) goes on one card, once:
    not twice on bob's, nor on alice's beside bob's, where a sign-in that finds the card by
    the credential would meet alice's key and lock bob out. Nothing registered; the
    invitation still works."""
    found = _people()
    enrolment = _enrolment(found, store, clock)
    phone = _device("bob-phone")
    first = enrolment.invite(BOB)
    enrolment.register(first, phone.register(_challenge(enrolment, first)))
    before = found.to_json()
    human = f"human://acme.com/{whose}"
    # bob's own phone again, or alice's device claiming bob's credential id.
    same = SoftwareAuthenticator.from_seed(
        f"{whose}-phone".encode(),
        RP,
        "unregistered",
        credential_id=b64url_decode(phone.credential_id),
    )
    token = enrolment.invite(human)
    challenge = _challenge(enrolment, token)

    with pytest.raises(CardInvalid) as caught:
        enrolment.register(token, same.register(challenge))
    assert caught.value.data["reason"] == "SHAPE"
    assert caught.value.data["where"] == "/keys"
    assert found.to_json() == before
    assert enrolment.invitation(token).used_at is None

    card = enrolment.register(token, _device(f"{whose}-laptop").register(challenge))
    assert card.id == human and len(_passkeys(card)) == len(_passkeys(found.card(human)))


# -- configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "origins",
    [[], ["https://evil.example"], ["http://acme.com"], [ORIGIN, "https://acme.com.evil.example"]],
)
def test_origins_that_cannot_use_the_rp_are_a_configuration_error(
    store: Store, clock: ManualClock, origins: list[str]
) -> None:
    with pytest.raises(ValueError, match="origins"):
        PasskeyEnrolment(
            _people(), DIRECTORY_KEY, keyring(), WebBook(store), clock, rp_id=RP, origins=origins
        )


# -- planted violation ---------------------------------------------------------------


def _challenge_of_another_invitation(enrolment: PasskeyEnrolment) -> HumanCard:
    bobs, alices = enrolment.invite(BOB), enrolment.invite(ALICE)
    return enrolment.register(alices, _device("alice-phone").register(_challenge(enrolment, bobs)))


PLANTED: dict[str, Callable[[PasskeyEnrolment], HumanCard]] = {
    "challenge-of-another-invitation": _challenge_of_another_invitation,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_enrolment_is_refused_by_its_check_alone(
    store: Store, clock: ManualClock, case: str
) -> None:
    """[DIR-ENROL] refused CHALLENGE with the check on; with it switched off the same
    registration goes through, so that check is what refuses it."""
    found = _people()
    with pytest.raises(PasskeyInvalid) as caught:
        PLANTED[case](_enrolment(found, store, clock))
    assert caught.value.reason == "CHALLENGE"
    assert found.card(ALICE).keys == []

    with unsafe_switched_off(*CASES[case]):
        card = PLANTED[case](_enrolment(found, store, clock))
    assert card.id == ALICE
    assert [kid for kid, _ in _passkeys(found.card(ALICE))] == [f"{ALICE}#passkey-1"]


def test_two_holders_of_one_directory_file_register_passkeys_and_keep_both(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    """[DIR-ENROL] two processes' worth of enrolment (two directories loaded from one file,
    as two workers of one ``hatp serve`` hold them), one invitation each for bob: both
    passkeys are on his card, in the file and in both holders; neither needs `saved`."""
    file = tmp_path / "directory.json"
    _people().save(file)
    first, second = Directory.load(file, keyring()), Directory.load(file, keyring())
    one, other = _enrolment(first, store, clock), _enrolment(second, store, clock)
    phone, laptop = _device("bob-phone"), _device("bob-laptop")
    phone_token, laptop_token = one.invite(BOB), other.invite(BOB)
    phone_made = phone.register(_challenge(one, phone_token))
    laptop_made = laptop.register(_challenge(other, laptop_token))

    one.register(phone_token, phone_made)
    card = other.register(laptop_token, laptop_made)

    expected = [
        (f"{BOB}#passkey-1", phone.credential_id),
        (f"{BOB}#passkey-2", laptop.credential_id),
    ]
    assert _passkeys(card) == expected
    assert _passkeys(Directory.load(file, keyring()).card(BOB)) == expected
    assert _passkeys(first.card(BOB)) == _passkeys(second.card(BOB)) == expected
