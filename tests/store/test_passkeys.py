"""[STORE-PASSKEY-NONCE] [STORE-PASSKEY-COUNT] the gateway's passkey bookkeeping, written in
the same transaction as the ask it belongs to, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hatp.errors import PasskeyInvalid
from hatp.store import AskKind, AskRow, AskState, AskStore, PasskeyBook, Store, open_store

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
BOB = "human://acme.com/bob"


def _use(
    store: Store, nonce: str, vote_digest: str = "sha256:vote-1", ask_id: str = "ask-1"
) -> None:
    book = PasskeyBook(store)
    with store.transaction() as conn:
        book.use_nonce_txn(conn, nonce, ask_id=ask_id, human=BOB, vote_digest=vote_digest, now=NOW)


def test_a_nonce_is_spent_once_and_again_only_by_the_same_vote(store: Store) -> None:
    """[STORE-PASSKEY-NONCE] a retried write of the same vote is a no-op; any other refused."""
    book = PasskeyBook(store)
    assert not book.is_used("n" * 22)
    _use(store, "n" * 22)
    _use(store, "n" * 22)  # the same vote, written again after a conflict
    assert book.is_used("n" * 22)
    for other in ({"vote_digest": "sha256:vote-2"}, {"ask_id": "ask-2"}):
        with pytest.raises(PasskeyInvalid) as info:
            _use(store, "n" * 22, **other)
        assert info.value.reason == "NONCE_USED"


def test_a_nonce_spent_on_one_store_is_spent_for_another_process(store: Store) -> None:
    """[STORE-PASSKEY-NONCE] two gateway processes on one database."""
    other = open_store(store.url)
    try:
        _use(store, "m" * 22)
        with pytest.raises(PasskeyInvalid):
            _use(other, "m" * 22, vote_digest="sha256:vote-2")
    finally:
        other.close()


def test_the_sign_count_only_goes_up(store: Store) -> None:
    """[STORE-PASSKEY-COUNT] 0 stays allowed until a count above it was seen."""
    book = PasskeyBook(store)

    def advance(count: int) -> None:
        with store.transaction() as conn:
            book.advance_count_txn(conn, BOB, "cred-1", count, NOW)

    advance(0)
    assert book.sign_count(BOB, "cred-1") == 0
    advance(3)
    advance(5)
    assert book.sign_count(BOB, "cred-1") == 5
    for stale in (5, 4, 0):
        with pytest.raises(PasskeyInvalid) as info:
            advance(stale)
        assert info.value.reason == "SIGN_COUNT"
    assert book.sign_count(BOB, "cred-2") == 0


def test_what_the_ask_update_also_writes_rolls_back_with_it(store: Store) -> None:
    """[STORE-PASSKEY-NONCE] a refused spend leaves the ask as it was."""
    asks, book = AskStore(store), PasskeyBook(store)
    row = asks.create(
        AskRow(
            ask_id="ask-1",
            kind=AskKind.APPROVAL,
            txn_id="txn-1",
            group_id="finance",
            plan_digest="sha256:" + "A" * 43,
            state=AskState.OPEN,
            decide_by=NOW + timedelta(hours=1),
            next_due=NOW + timedelta(hours=1),
            doc={"votes": []},
        ),
        NOW,
    )
    _use(store, "k" * 22)

    def spend_again(conn: object) -> None:
        book.use_nonce_txn(
            conn,  # type: ignore[arg-type]
            "k" * 22,
            ask_id="ask-1",
            human=BOB,
            vote_digest="sha256:vote-2",
            now=NOW,
        )

    changed = AskRow(**{**row.__dict__, "doc": {"votes": ["a vote"]}})
    with pytest.raises(PasskeyInvalid):
        asks.update(changed, NOW, also=spend_again)
    assert asks.get("ask-1").doc == {"votes": []} and asks.get("ask-1").version == row.version
