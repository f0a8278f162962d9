"""[GW-SIGN-IN] [GW-SIGN-IN-CHALLENGE] a person signs in to the approver page with a passkey.

:class:`~hatp.gateway.ApproverSessions` issues a sign-in challenge, checks the
browser's assertion (made here by a :class:`~hatp.gateway.SoftwareAuthenticator`
whose key is on the person's card) and opens a session naming the person whose
card holds the passkey; the session lives until it expires or they sign out.
Every refusal opens no session. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from directory.people import directory, signed
from hatp._checks import unsafe_switched_off
from hatp.clock import ManualClock
from hatp.directory import Directory
from hatp.errors import SignInRefused, Unauthenticated
from hatp.evidence._b64 import b64url_decode, b64url_encode
from hatp.gateway import ApproverSessions, SignedIn, SoftwareAuthenticator
from hatp.store import PasskeyBook, Store, WebBook, open_store
from racing import race

RP = "acme.com"
ORIGIN = "https://acme.com"
APPROVE = "https://approve.acme.com"
BOB = "human://acme.com/bob"
ALICE = "human://acme.com/alice"

#: Planted violations of the sign-in: case -> the checks that refuse it.
CASES: dict[str, tuple[str, ...]] = {
    "forged-signature": ("GW-SIGN-IN",),
    "replayed-challenge": ("GW-SIGN-IN-CHALLENGE",),
}


def _device(name: str, **options: Any) -> SoftwareAuthenticator:
    """``name``'s passkey (the same key and credential every time it is made)."""
    return SoftwareAuthenticator.from_seed(
        name.encode(), RP, f"human://acme.com/{name}#passkey-1", **options
    )


def _people() -> Directory:
    """bob and alice, each with their passkey on their card."""
    return directory(
        signed("bob", keys=[_device("bob").key_entry()]),
        signed("alice", keys=[_device("alice").key_entry()]),
    )


def _sessions(
    store: Store, clock: ManualClock, lifetime: timedelta | None = None
) -> ApproverSessions:
    extra = {} if lifetime is None else {"lifetime": lifetime}
    return ApproverSessions(
        _people(),
        WebBook(store),
        PasskeyBook(store),
        clock,
        rp_id=RP,
        origins=[ORIGIN, APPROVE],
        **extra,
    )


@pytest.fixture
def sessions(store: Store, clock: ManualClock) -> ApproverSessions:
    return _sessions(store, clock)


@pytest.fixture
def bob() -> SoftwareAuthenticator:
    return _device("bob")


def _challenge(sessions: ApproverSessions) -> bytes:
    return b64url_decode(sessions.sign_in_options()["challenge"])


def _kept_sessions(store: Store) -> int:
    """How many sessions the store holds, live or not."""
    with store.transaction() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM hatp_web_session")).scalar_one())


def _count(store: Store, device: SoftwareAuthenticator, human: str = BOB) -> int:
    return PasskeyBook(store).sign_count(human, device.credential_id)


def _edit_response(credential: dict[str, Any], **members: Any) -> dict[str, Any]:
    return {**credential, "response": {**credential["response"], **members}}


def _edit_client_data(credential: dict[str, Any], **changes: Any) -> dict[str, Any]:
    text = credential["response"]["clientDataJSON"]
    client = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    edited = json.dumps({**client, **changes}, separators=(",", ":")).encode()
    return _edit_response(credential, clientDataJSON=b64url_encode(edited))


def _flip(text: str, index: int, bits: int = 0x01) -> str:
    """``text`` (base64url) with ``bits`` of its byte at ``index`` flipped."""
    raw = bytearray(b64url_decode(text))
    raw[index] ^= bits
    return b64url_encode(bytes(raw))


def _forged(credential: dict[str, Any]) -> dict[str, Any]:
    """The assertion with one bit of its signature's last byte flipped (still DER)."""
    return _edit_response(credential, signature=_flip(credential["response"]["signature"], -1))


def _not_present(credential: dict[str, Any]) -> dict[str, Any]:
    """The assertion with the flag UP (bit 0 of the authenticator data's flags byte,
    after the 32-byte rpId hash) cleared."""
    data = credential["response"]["authenticatorData"]
    return _edit_response(credential, authenticatorData=_flip(data, 32, 0x01))


def _unauthenticated(caught: pytest.ExceptionInfo[Unauthenticated]) -> str:
    return str(caught.value.data["reason"])


# -- signing in, and the session ---------------------------------------------------


def test_options_ask_for_a_verified_passkey_of_the_rp_over_a_fresh_challenge(
    sessions: ApproverSessions,
) -> None:
    """[GW-SIGN-IN-CHALLENGE] 32 random bytes each time; any passkey of acme.com."""
    first, second = sessions.sign_in_options(), sessions.sign_in_options()
    assert first["rpId"] == RP and first["userVerification"] == "required"
    assert first["allowCredentials"] == []
    assert len(b64url_decode(first["challenge"])) == 32
    assert first["challenge"] != second["challenge"]


def test_a_passkey_on_a_card_signs_its_person_in(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator, clock: ManualClock
) -> None:
    """[GW-SIGN-IN] the session names the person whose card holds the passkey, for the
    default eight hours; its token finds it, and the passkey's count is kept."""
    signed_in = sessions.sign_in(bob.assertion(_challenge(sessions)))

    assert isinstance(signed_in, SignedIn)
    session = signed_in.session
    assert (session.human, session.credential_id) == (BOB, bob.credential_id)
    assert session.created_at == clock.now()
    assert session.expires_at == clock.now() + timedelta(hours=8)
    assert sessions.session(signed_in.token) == session
    assert _count(store, bob) == 1
    assert _kept_sessions(store) == 1


def test_each_persons_passkey_signs_in_that_person(
    sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN] who signs in comes from the card that holds the credential."""
    alice = _device("alice")
    as_alice = sessions.sign_in(alice.assertion(_challenge(sessions)))
    as_bob = sessions.sign_in(bob.assertion(_challenge(sessions), origin=APPROVE))
    assert sessions.session(as_alice.token).human == ALICE
    assert sessions.session(as_bob.token).human == BOB
    assert as_alice.token != as_bob.token


def test_a_session_lasts_the_configured_lifetime(
    store: Store, clock: ManualClock, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN] live until its lifetime has passed, then ENDED."""
    sessions = _sessions(store, clock, timedelta(minutes=30))
    signed_in = sessions.sign_in(bob.assertion(_challenge(sessions)))
    assert signed_in.session.expires_at == clock.now() + timedelta(minutes=30)

    clock.advance(30 * 60 - 1)
    assert sessions.session(signed_in.token).human == BOB
    clock.advance(1)
    with pytest.raises(Unauthenticated) as caught:
        sessions.session(signed_in.token)
    assert _unauthenticated(caught) == "ENDED"
    assert sessions.sign_out(signed_in.token) is False


def test_signing_out_ends_the_session(
    sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN] after sign_out the token names nobody; signing out again ends nothing,
    and another session of the same person lives on."""
    first = sessions.sign_in(bob.assertion(_challenge(sessions)))
    second = sessions.sign_in(bob.assertion(_challenge(sessions)))

    assert sessions.sign_out(first.token) is True
    with pytest.raises(Unauthenticated) as caught:
        sessions.session(first.token)
    assert _unauthenticated(caught) == "ENDED"
    assert sessions.sign_out(first.token) is False
    assert sessions.session(second.token).human == BOB


def test_asking_to_sign_in_clears_away_ended_sessions_and_expired_challenges(
    store: Store, clock: ManualClock, sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[STORE-WEB-SESSION] [STORE-WEB-CHALLENGE] the tables do not grow without end: a
    signed-out session, an expired one and an expired challenge are gone once someone
    asks to sign in again; a live session stays."""

    def challenges() -> int:
        with store.transaction() as conn:
            found = conn.execute(sa.text("SELECT count(*) FROM hatp_web_challenge"))
            return int(found.scalar_one())

    signed_out = sessions.sign_in(bob.assertion(_challenge(sessions)))
    sessions.sign_out(signed_out.token)
    assert (_kept_sessions(store), challenges()) == (1, 1)
    sessions.sign_in_options()  # left unused
    assert (_kept_sessions(store), challenges()) == (0, 2)
    expiring = sessions.sign_in(bob.assertion(_challenge(sessions)))
    clock.advance(8 * 3600)
    assert _kept_sessions(store) == 1
    live = sessions.sign_in(bob.assertion(_challenge(sessions)))
    assert _kept_sessions(store) == 1 and challenges() == 1  # all but the live one's
    assert sessions.session(live.token).human == BOB
    with pytest.raises(Unauthenticated):
        sessions.session(expiring.token)


@pytest.mark.parametrize("token", [None, ""])
def test_no_token_is_no_session(sessions: ApproverSessions, token: str | None) -> None:
    with pytest.raises(Unauthenticated) as caught:
        sessions.session(token)
    assert _unauthenticated(caught) == "NO_SESSION"
    assert sessions.sign_out(token) is False


def test_a_token_never_handed_out_names_nobody(
    sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    signed_in = sessions.sign_in(bob.assertion(_challenge(sessions)))
    with pytest.raises(Unauthenticated) as caught:
        sessions.session(signed_in.token + "x")
    assert _unauthenticated(caught) == "ENDED"
    assert sessions.sign_out(signed_in.token[:-1]) is False
    assert sessions.session(signed_in.token).human == BOB


# -- refused before the database: nothing opened, nothing spent ---------------------


REFUSED: dict[str, tuple[Callable[[SoftwareAuthenticator, bytes], dict[str, Any]], str]] = {
    "no-response": (
        lambda d, c: {k: v for k, v in d.assertion(c).items() if k != "response"},
        "SHAPE",
    ),
    "no-signature": (
        lambda d, c: _edit_response(d.assertion(c), signature=None),
        "SHAPE",
    ),
    "a-passkey-on-no-card": (lambda d, c: _device("stranger").assertion(c), "KEY_UNKNOWN"),
    "a-create-not-a-get": (
        lambda d, c: _edit_client_data(d.assertion(c), type="webauthn.create"),
        "TYPE",
    ),
    "another-origin": (lambda d, c: d.assertion(c, origin="https://evil.example"), "ORIGIN"),
    "an-acme-origin-not-served": (
        lambda d, c: d.assertion(c, origin="https://wiki.acme.com"),
        "ORIGIN",
    ),
    "cross-origin": (lambda d, c: d.assertion(c, cross_origin=True), "ORIGIN"),
    "another-rp": (lambda d, c: d.assertion(c, rp_id="evil.example"), "RP_ID"),
    "user-not-present": (lambda d, c: _not_present(d.assertion(c)), "USER_PRESENCE"),
    "user-not-verified": (
        lambda d, c: _device("bob", user_verified=False).assertion(c),
        "USER_VERIFICATION",
    ),
    "forged-signature": (lambda d, c: _forged(d.assertion(c)), "SIGNATURE"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_assertion_that_fails_verification_opens_no_session_and_spends_nothing(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator, name: str
) -> None:
    """[GW-SIGN-IN] refused with the step that failed, before the database: no session,
    no sign count, and the challenge is still good for a genuine assertion."""
    make, reason = REFUSED[name]
    challenge = _challenge(sessions)

    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(make(bob, challenge))
    assert caught.value.reason == reason, caught.value.message
    assert _kept_sessions(store) == 0
    assert _count(store, bob) == 0

    genuine = bob.assertion(challenge)
    assert sessions.sign_in(genuine).session.human == BOB
    assert _count(store, bob) == bob.sign_count


def test_a_passkey_on_two_peoples_cards_signs_nobody_in(store: Store, clock: ManualClock) -> None:
    """[GW-SIGN-IN] KEY_AMBIGUOUS: the directory lists bob's passkey on alice's card too, so
    the credential says nothing about who is signing in: refused, nothing kept. With the
    check switched off, bob's own passkey signs him in as alice (her card comes first)."""
    shared = _device("bob")
    on_alice = {**shared.key_entry(), "kid": "human://acme.com/alice#passkey-1"}
    sessions = ApproverSessions(
        directory(signed("bob", keys=[shared.key_entry()]), signed("alice", keys=[on_alice])),
        WebBook(store),
        PasskeyBook(store),
        clock,
        rp_id=RP,
        origins=[ORIGIN],
    )

    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(shared.assertion(_challenge(sessions)))
    assert caught.value.reason == "KEY_AMBIGUOUS"
    assert ALICE in caught.value.message and BOB in caught.value.message
    assert _kept_sessions(store) == 0
    assert _count(store, shared) == 0

    with unsafe_switched_off("GW-SIGN-IN"):
        assert sessions.sign_in(shared.assertion(_challenge(sessions))).session.human == ALICE
    assert _kept_sessions(store) == 1


def test_an_older_assertion_after_a_newer_one_is_refused_by_its_count(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN] SIGN_COUNT: the count went backwards (a replay or a clone), though its
    own challenge was never spent; the challenge is still good for a genuine assertion."""
    first, second = _challenge(sessions), _challenge(sessions)
    older = bob.assertion(first)
    sessions.sign_in(bob.assertion(second))

    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(older)
    assert caught.value.reason == "SIGN_COUNT"
    assert _kept_sessions(store) == 1
    assert _count(store, bob) == 2

    assert sessions.sign_in(bob.assertion(first)).session.human == BOB
    assert _count(store, bob) == 3


def test_a_clone_that_stopped_counting_is_refused_once_a_count_was_seen(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN] SIGN_COUNT: bob's passkey reported a count; the same key answering
    with count 0 (twice, from two challenges) is refused each time."""
    sessions.sign_in(bob.assertion(_challenge(sessions)))
    clone = _device("bob", counting=False)
    for _ in range(2):
        with pytest.raises(SignInRefused) as caught:
            sessions.sign_in(clone.assertion(_challenge(sessions)))
        assert caught.value.reason == "SIGN_COUNT"
    assert _kept_sessions(store) == 1
    assert _count(store, bob) == 1


def test_a_passkey_that_never_counts_signs_in_every_time(
    store: Store, sessions: ApproverSessions
) -> None:
    """[GW-SIGN-IN] a synced passkey stays at count 0; that alone is no replay."""
    synced = _device("bob", counting=False)
    for _ in range(2):
        assert sessions.sign_in(synced.assertion(_challenge(sessions))).session.human == BOB
    assert _count(store, synced) == 0
    assert _kept_sessions(store) == 2


# -- the challenge: issued here, for a sign-in, unexpired, once ----------------------


def test_a_challenge_never_issued_is_refused(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN-CHALLENGE] a well-signed assertion over a challenge of the page's own
    making opens nothing, and its count is not kept."""
    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(bob.assertion(bytes(32)))
    assert caught.value.reason == "CHALLENGE"
    assert _kept_sessions(store) == 0
    assert _count(store, bob) == 0


def test_a_challenge_signs_in_once(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN-CHALLENGE] a second assertion over a spent challenge (a fresh count
    even) is refused; its count is not kept."""
    challenge = _challenge(sessions)
    sessions.sign_in(bob.assertion(challenge))
    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(bob.assertion(challenge))
    assert caught.value.reason == "CHALLENGE"
    assert _kept_sessions(store) == 1
    assert _count(store, bob) == 1


def test_a_challenge_is_good_for_five_minutes(
    store: Store, sessions: ApproverSessions, clock: ManualClock, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN-CHALLENGE] [STORE-WEB-CHALLENGE] good a second short of five minutes;
    refused at five."""
    stale, fresh = _challenge(sessions), _challenge(sessions)
    clock.advance(5 * 60 - 1)
    assert sessions.sign_in(bob.assertion(fresh)).session.human == BOB
    clock.advance(1)
    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(bob.assertion(stale))
    assert caught.value.reason == "CHALLENGE"
    assert _kept_sessions(store) == 1


def test_a_challenge_issued_to_register_a_passkey_does_not_sign_in(
    store: Store, sessions: ApproverSessions, clock: ManualClock, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN-CHALLENGE] an enrolment challenge on the same store is of another
    purpose."""
    from directory.people import DIRECTORY_KEY, keyring
    from hatp.directory import PasskeyEnrolment

    enrolment = PasskeyEnrolment(
        _people(), DIRECTORY_KEY, keyring(), WebBook(store), clock, rp_id=RP, origins=[ORIGIN]
    )
    enrol_challenge = b64url_decode(enrolment.options(enrolment.invite(BOB))["challenge"])
    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(bob.assertion(enrol_challenge))
    assert caught.value.reason == "CHALLENGE"
    assert _kept_sessions(store) == 0


def test_one_assertion_sent_at_once_from_several_threads_opens_one_session(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator
) -> None:
    """[GW-SIGN-IN-CHALLENGE] [STORE-WEB-CHALLENGE] the challenge is spent once: one
    sign-in wins, every other is refused (CHALLENGE, or SIGN_COUNT when it read the
    winner's count)."""
    assertion = bob.assertion(_challenge(sessions))

    def attempt() -> SignedIn | SignInRefused:
        try:
            return sessions.sign_in(assertion)
        except SignInRefused as refused:
            return refused

    outcomes = race([attempt] * 4)

    won = [o for o in outcomes if isinstance(o, SignedIn)]
    refused = [o for o in outcomes if isinstance(o, SignInRefused)]
    assert len(won) == 1 and len(refused) == 3
    assert {o.reason for o in refused} <= {"CHALLENGE", "SIGN_COUNT"}
    assert sessions.session(won[0].token).human == BOB
    assert _kept_sessions(store) == 1
    assert _count(store, bob) == 1


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "origins",
    [[], ["https://evil.example"], ["http://acme.com"], [ORIGIN, "https://acme.com:x"]],
)
def test_origins_that_cannot_use_the_rp_are_a_configuration_error(
    store: Store, clock: ManualClock, origins: list[str]
) -> None:
    with pytest.raises(ValueError, match="origins"):
        ApproverSessions(
            _people(), WebBook(store), PasskeyBook(store), clock, rp_id=RP, origins=origins
        )


def test_sessions_and_sign_counts_are_kept_in_one_store(
    store: Store, store_url: str, clock: ManualClock
) -> None:
    other = open_store(store_url)
    try:
        with pytest.raises(ValueError, match="one store"):
            ApproverSessions(
                _people(), WebBook(store), PasskeyBook(other), clock, rp_id=RP, origins=[ORIGIN]
            )
    finally:
        other.close()


@pytest.mark.parametrize("lifetime", [timedelta(0), timedelta(seconds=-1)])
def test_a_session_lasts_some_time(store: Store, clock: ManualClock, lifetime: timedelta) -> None:
    with pytest.raises(ValueError, match="positive lifetime"):
        _sessions(store, clock, lifetime)


# -- planted violations -----------------------------------------------------------------


def _forged_signature(sessions: ApproverSessions, bob: SoftwareAuthenticator) -> dict[str, Any]:
    return _forged(bob.assertion(_challenge(sessions)))


def _replayed_challenge(sessions: ApproverSessions, bob: SoftwareAuthenticator) -> dict[str, Any]:
    challenge = _challenge(sessions)
    sessions.sign_in(bob.assertion(challenge))
    return bob.assertion(challenge)


#: case -> (what is submitted, after any sign-in that sets it up; the reason it is refused)
PLANTED: dict[
    str, tuple[Callable[[ApproverSessions, SoftwareAuthenticator], dict[str, Any]], str]
] = {
    "forged-signature": (_forged_signature, "SIGNATURE"),
    "replayed-challenge": (_replayed_challenge, "CHALLENGE"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_sign_in_is_refused_by_its_check_alone(
    store: Store, sessions: ApproverSessions, bob: SoftwareAuthenticator, case: str
) -> None:
    """[GW-SIGN-IN] [GW-SIGN-IN-CHALLENGE] refused with the check on; with it switched off
    the very same attempt opens a session for bob, so that check is what refuses it."""
    make, reason = PLANTED[case]
    before = _kept_sessions(store)
    credential = make(sessions, bob)
    with pytest.raises(SignInRefused) as caught:
        sessions.sign_in(credential)
    assert caught.value.reason == reason
    opened_by_setup = _kept_sessions(store) - before

    with unsafe_switched_off(*CASES[case]):
        credential = make(sessions, bob)
        assert sessions.sign_in(credential).session.human == BOB
    assert _kept_sessions(store) == before + 2 * opened_by_setup + 1
