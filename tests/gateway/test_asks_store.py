"""The gateway's durable asks: one per subject, versioned updates, what is due."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from hatp.errors import AskConflict, AskUnknown
from hatp.store import AskKind, AskRow, AskState, AskStore, Store, open_store

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def row(ask_id: str = "ask-aaaaaaaa", txn_id: str = "txn-1", due: int = 900) -> AskRow:
    return AskRow(
        ask_id=ask_id,
        kind=AskKind.APPROVAL,
        txn_id=txn_id,
        group_id="finance",
        plan_digest="sha256:x",
        state=AskState.OPEN,
        decide_by=NOW + timedelta(hours=1),
        next_due=NOW + timedelta(seconds=due),
        doc={"people": [{"id": "human://acme.com/bob", "n": 1}], "ok": True},
    )


def test_create_then_get_gives_back_what_was_stored(store: Store) -> None:
    asks = AskStore(store)
    stored = asks.create(row(), NOW)
    assert stored == row()
    assert asks.get("ask-aaaaaaaa") == stored
    assert asks.find(AskKind.APPROVAL, "txn-1", "finance", "sha256:x") == stored
    assert asks.find(AskKind.QUESTION, "txn-1", "finance", "sha256:x") is None


def test_asking_about_the_same_subject_twice_keeps_the_first_ask(store: Store) -> None:
    """[GW-ASK-ONCE]"""
    asks = AskStore(store)
    asks.create(row(), NOW)
    assert asks.create(row("ask-bbbbbbbb"), NOW).ask_id == "ask-aaaaaaaa"
    with pytest.raises(AskConflict):
        asks.create(row("ask-aaaaaaaa", txn_id="txn-2"), NOW)


def test_an_update_from_a_stale_read_is_refused(store: Store) -> None:
    """[STORE-ASK-VERSION] two gateways that read version 1 cannot both write."""
    asks = AskStore(store)
    read = asks.create(row(), NOW)
    first = asks.update(replace(read, doc={"by": "first"}), NOW)
    assert first.version == 2
    with pytest.raises(AskConflict) as info:
        asks.update(replace(read, doc={"by": "second"}), NOW)
    assert info.value.data["current"] == 2
    assert asks.get(read.ask_id).doc == {"by": "first"}
    with pytest.raises(AskUnknown):
        asks.update(replace(read, ask_id="ask-zzzzzzzz"), NOW)
    with pytest.raises(AskUnknown):
        asks.get("ask-zzzzzzzz")


def test_a_second_process_on_the_same_database_sees_every_open_ask(store_url: str) -> None:
    """[GW-DURABLE]"""
    one, two = open_store(store_url), open_store(store_url)
    try:
        AskStore(one).create(row(), NOW)
        AskStore(one).create(row("ask-bbbbbbbb", txn_id="txn-2", due=60), NOW)
        assert [r.ask_id for r in AskStore(two).open_asks()] == ["ask-aaaaaaaa", "ask-bbbbbbbb"]
    finally:
        one.close()
        two.close()


def test_due_and_next_due_follow_the_open_asks(store: Store) -> None:
    asks = AskStore(store)
    assert asks.next_due() is None
    a = asks.create(row(), NOW)
    asks.create(row("ask-bbbbbbbb", txn_id="txn-2", due=60), NOW)
    assert asks.next_due() == NOW + timedelta(seconds=60)
    assert [r.ask_id for r in asks.due(NOW + timedelta(seconds=60))] == ["ask-bbbbbbbb"]
    assert [r.ask_id for r in asks.due(NOW + timedelta(hours=2))] == [
        "ask-bbbbbbbb",
        "ask-aaaaaaaa",
    ]
    asks.update(replace(a, state=AskState.DECIDED, next_due=None), NOW)
    assert [r.ask_id for r in asks.due(NOW + timedelta(hours=2))] == ["ask-bbbbbbbb"]
    assert [r.ask_id for r in asks.open_asks()] == ["ask-bbbbbbbb"]
