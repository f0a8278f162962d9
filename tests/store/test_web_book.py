"""[STORE-WEB-CHALLENGE] [STORE-WEB-SESSION] [STORE-WEB-INVITE] the approver page's
challenges, sessions and invitations, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import sqlalchemy as sa

from hatp.store import ChallengePurpose, Store, WebBook, WebInvite, WebSession, token_digest
from racing import race

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
ALICE = "human://acme.com/alice"
BOB = "human://acme.com/bob"
INVITE_DIGEST = token_digest("invite-token-1")
RACERS = 8


def _spend(
    book: WebBook, challenge: str, purpose: ChallengePurpose, now: datetime = NOW
) -> str | None:
    with book.store.transaction() as conn:
        return book.spend_challenge_txn(conn, challenge, purpose, now)


def _open(book: WebBook, digest: str, expires_at: datetime = LATER) -> WebSession:
    session = WebSession(ALICE, "Y3JlZC0x", NOW, expires_at)
    with book.store.transaction() as conn:
        book.open_session_txn(conn, digest, session)
    return session


def _use_invite(book: WebBook, digest: str, kid: str, now: datetime = NOW) -> bool:
    with book.store.transaction() as conn:
        return book.use_invite_txn(conn, digest, kid, now)


# -- challenges ------------------------------------------------------------


def test_a_challenge_is_spent_once_for_its_subject(store: Store) -> None:
    """[STORE-WEB-CHALLENGE] the first spend returns what it was issued for; the next, None."""
    book = WebBook(store)
    book.issue_challenge("c-enrol", ChallengePurpose.ENROL, INVITE_DIGEST, LATER)
    book.issue_challenge("c-sign-in", ChallengePurpose.SIGN_IN, "", LATER)

    assert _spend(book, "c-enrol", ChallengePurpose.ENROL) == INVITE_DIGEST
    assert _spend(book, "c-enrol", ChallengePurpose.ENROL) is None
    assert _spend(book, "c-sign-in", ChallengePurpose.SIGN_IN) == ""
    assert _spend(book, "c-sign-in", ChallengePurpose.SIGN_IN) is None


def test_an_unknown_challenge_is_not_spent(store: Store) -> None:
    """[STORE-WEB-CHALLENGE] a challenge never issued spends nothing."""
    book = WebBook(store)
    book.issue_challenge("c-known", ChallengePurpose.SIGN_IN, "", LATER)

    assert _spend(book, "c-unknown", ChallengePurpose.SIGN_IN) is None
    assert _spend(book, "c-known", ChallengePurpose.SIGN_IN) == ""


def test_a_challenge_of_the_other_purpose_is_not_spent_and_stays_for_its_own(
    store: Store,
) -> None:
    """[STORE-WEB-CHALLENGE] a registration's challenge never signs in, and the reverse;
    the refused try does not use it up."""
    book = WebBook(store)
    book.issue_challenge("c-enrol", ChallengePurpose.ENROL, INVITE_DIGEST, LATER)
    book.issue_challenge("c-sign-in", ChallengePurpose.SIGN_IN, "", LATER)

    assert _spend(book, "c-enrol", ChallengePurpose.SIGN_IN) is None
    assert _spend(book, "c-sign-in", ChallengePurpose.ENROL) is None
    assert _spend(book, "c-enrol", ChallengePurpose.ENROL) == INVITE_DIGEST
    assert _spend(book, "c-sign-in", ChallengePurpose.SIGN_IN) == ""


def test_a_challenge_is_spent_only_before_it_expires(store: Store) -> None:
    """[STORE-WEB-CHALLENGE] its expiry is exclusive: spent a millisecond before, not at it."""
    book = WebBook(store)
    book.issue_challenge("c-at", ChallengePurpose.SIGN_IN, "", LATER)
    book.issue_challenge("c-after", ChallengePurpose.SIGN_IN, "", LATER)
    book.issue_challenge("c-before", ChallengePurpose.SIGN_IN, "", LATER)

    assert _spend(book, "c-at", ChallengePurpose.SIGN_IN, LATER) is None
    assert _spend(book, "c-after", ChallengePurpose.SIGN_IN, LATER + timedelta(hours=1)) is None
    before = LATER - timedelta(milliseconds=1)
    assert _spend(book, "c-before", ChallengePurpose.SIGN_IN, before) == ""


def test_a_spend_rolled_back_with_its_transaction_leaves_the_challenge_unspent(
    store: Store,
) -> None:
    """[STORE-WEB-CHALLENGE] the spend is part of the caller's transaction: if the session
    it opens fails, the challenge may still be spent."""
    book = WebBook(store)
    book.issue_challenge("c-1", ChallengePurpose.SIGN_IN, "", LATER)

    class Failed(Exception):
        pass

    try:
        with store.transaction() as conn:
            assert book.spend_challenge_txn(conn, "c-1", ChallengePurpose.SIGN_IN, NOW) == ""
            raise Failed
    except Failed:
        pass

    assert _spend(book, "c-1", ChallengePurpose.SIGN_IN) == ""


def test_exactly_one_of_racing_spends_gets_the_challenge(
    store: Store, open_more: Callable[[], Store]
) -> None:
    """[STORE-WEB-CHALLENGE] gateway processes on one database race to spend one challenge:
    one gets its subject, every other None."""
    books = [WebBook(open_more()) for _ in range(RACERS)]
    for round_ in range(3):
        challenge = f"c-race-{round_}"
        WebBook(store).issue_challenge(challenge, ChallengePurpose.ENROL, INVITE_DIGEST, LATER)

        results = race([partial(_spend, book, challenge, ChallengePurpose.ENROL) for book in books])

        assert sorted(results, key=str) == [INVITE_DIGEST] + [None] * (RACERS - 1), results


# -- sessions --------------------------------------------------------------


def test_a_session_is_found_by_its_token_digest_while_it_lives(store: Store) -> None:
    """[STORE-WEB-SESSION] found as opened until its expiry (exclusive), then not."""
    book = WebBook(store)
    digest = token_digest("session-token-1")
    opened = _open(book, digest)

    assert book.session(digest, NOW) == opened
    assert book.session(digest, LATER - timedelta(milliseconds=1)) == opened
    assert book.session(digest, LATER) is None
    assert book.session(digest, LATER + timedelta(days=1)) is None


def test_an_unknown_token_digest_finds_no_session(store: Store) -> None:
    """[STORE-WEB-SESSION] a token never issued signs nobody in."""
    book = WebBook(store)
    _open(book, token_digest("session-token-1"))

    assert book.session(token_digest("session-token-2"), NOW) is None
    assert book.session("session-token-1", NOW) is None  # the raw token is not the key


def test_a_session_ends_once_and_is_gone_afterwards(store: Store) -> None:
    """[STORE-WEB-SESSION] signing out ends the live session; again, there is none to end."""
    book = WebBook(store)
    digest, other = token_digest("session-token-1"), token_digest("session-token-2")
    _open(book, digest)
    kept = _open(book, other)

    assert book.end_session(digest, NOW) is True
    assert book.end_session(digest, NOW) is False
    assert book.session(digest, NOW) is None
    assert book.end_session(token_digest("never-issued"), NOW) is False
    assert book.session(other, NOW) == kept  # only the one signed out ended


def test_signing_out_of_an_expired_session_ends_no_live_one(store: Store) -> None:
    """[STORE-WEB-SESSION] end_session says whether a live session was ended: an expired
    one was not live."""
    book = WebBook(store)
    digest = token_digest("session-token-1")
    _open(book, digest, expires_at=LATER)

    assert book.end_session(digest, LATER) is False
    assert book.session(digest, LATER) is None


def test_only_the_digest_of_a_session_token_is_stored(store: Store) -> None:
    """[STORE-WEB-SESSION] reading the database does not give anyone a session's token."""
    book = WebBook(store)
    token = "raw-session-token-Zm9vYmFy"
    _open(book, token_digest(token))

    with store.transaction() as conn:
        rows = conn.execute(sa.text("SELECT * FROM hatp_web_session")).all()

    assert len(rows) == 1
    assert token_digest(token) in rows[0]
    assert all(token not in str(value) for row in rows for value in row)


# -- invitations -----------------------------------------------------------


def test_an_invitation_is_kept_unused_until_used(store: Store) -> None:
    """[STORE-WEB-INVITE] as issued: for whom, from when, until when, not used."""
    book = WebBook(store)
    book.invite(INVITE_DIGEST, ALICE, expires_at=LATER, now=NOW)

    assert book.invite_of(INVITE_DIGEST) == WebInvite(ALICE, NOW, LATER, None, None)
    assert book.invite_of(token_digest("never-issued")) is None


def test_an_invitation_is_used_once_and_says_for_which_passkey(store: Store) -> None:
    """[STORE-WEB-INVITE] one invitation registers one passkey."""
    book = WebBook(store)
    book.invite(INVITE_DIGEST, ALICE, expires_at=LATER, now=NOW)
    used_at = NOW + timedelta(minutes=1)

    assert _use_invite(book, INVITE_DIGEST, "passkey-1", used_at) is True
    assert _use_invite(book, INVITE_DIGEST, "passkey-2", used_at) is False

    assert book.invite_of(INVITE_DIGEST) == WebInvite(ALICE, NOW, LATER, used_at, "passkey-1")


def test_an_expired_or_unknown_invitation_is_not_used(store: Store) -> None:
    """[STORE-WEB-INVITE] its expiry is exclusive, and using it late leaves it unused."""
    book = WebBook(store)
    book.invite(INVITE_DIGEST, ALICE, expires_at=LATER, now=NOW)

    assert _use_invite(book, INVITE_DIGEST, "passkey-1", LATER) is False
    assert _use_invite(book, INVITE_DIGEST, "passkey-1", LATER + timedelta(hours=1)) is False
    assert _use_invite(book, token_digest("never-issued"), "passkey-1", NOW) is False
    found = book.invite_of(INVITE_DIGEST)
    assert found is not None and (found.used_at, found.kid) == (None, None)


def test_a_persons_invitations_are_listed_oldest_first(store: Store) -> None:
    """[STORE-WEB-INVITE] each of their own, used or not, in the order issued."""
    book = WebBook(store)
    first, second = token_digest("invite-a"), token_digest("invite-b")
    book.invite(
        second, ALICE, expires_at=LATER + timedelta(hours=1), now=NOW + timedelta(minutes=1)
    )
    book.invite(token_digest("invite-bob"), BOB, expires_at=LATER, now=NOW)
    book.invite(first, ALICE, expires_at=LATER, now=NOW)
    _use_invite(book, first, "passkey-1", NOW)

    listed = book.invites(ALICE)

    assert [(i.created_at, i.kid) for i in listed] == [
        (NOW, "passkey-1"),
        (NOW + timedelta(minutes=1), None),
    ]
    assert all(i.human == ALICE for i in listed)
    assert book.invites("human://acme.com/nobody") == []


# -- housekeeping ----------------------------------------------------------


def test_prune_deletes_expired_challenges_and_expired_or_ended_sessions(store: Store) -> None:
    """[STORE-WEB-CHALLENGE] [STORE-WEB-SESSION] what can no longer be spent or signed in
    with goes; what is live stays, and the count says how many went."""
    book = WebBook(store)
    book.issue_challenge("c-expired", ChallengePurpose.SIGN_IN, "", NOW)
    book.issue_challenge("c-live", ChallengePurpose.ENROL, INVITE_DIGEST, LATER)
    expired, ended, live = (token_digest(t) for t in ("s-expired", "s-ended", "s-live"))
    _open(book, expired, expires_at=NOW)
    _open(book, ended)
    kept = _open(book, live)
    assert book.end_session(ended, NOW)

    assert book.prune(NOW) == 3
    assert book.prune(NOW) == 0

    with store.transaction() as conn:
        challenges = conn.execute(sa.text("SELECT challenge FROM hatp_web_challenge")).scalars()
        sessions = conn.execute(sa.text("SELECT token_digest FROM hatp_web_session")).scalars()
        assert (list(challenges), list(sessions)) == (["c-live"], [live])
    assert _spend(book, "c-live", ChallengePurpose.ENROL) == INVITE_DIGEST
    assert book.session(live, NOW) == kept


# -- token digests ---------------------------------------------------------


def test_a_token_is_kept_under_its_hex_sha256() -> None:
    """[STORE-WEB-SESSION] the digest is SHA-256 in hex; different tokens differ."""
    assert token_digest("abc") == hashlib.sha256(b"abc").hexdigest()
    assert token_digest("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert token_digest("abc") != token_digest("abd")
    assert len({token_digest(f"token-{n}") for n in range(100)}) == 100
