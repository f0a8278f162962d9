"""Races between processes sharing one database (separate stores on separate threads)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa

from hatp.store import DecisionLog, Store, open_store
from racing import race

RACERS = 4


def test_exactly_one_of_racing_coordinators_acquires_STORE_LEASE(
    log: DecisionLog, new_txn: Callable[..., Any], open_more: Callable[[], Store]
) -> None:
    """[STORE-LEASE] coordinators on separate connections race to take over an expired
    lease: exactly one gets the next fence, every other gets None."""
    logs = [DecisionLog(open_more()) for _ in range(RACERS)]
    for round_ in range(5):
        txn = new_txn(f"txn-{round_}")
        fence = txn.create(log, owner="coord-dead", lease_seconds=10)
        after = txn.start + timedelta(seconds=11)
        results = race(
            [
                partial(mine.acquire, txn.txn_id, f"coord-{n}", after, 30)
                for n, mine in enumerate(logs)
            ]
        )
        winners = [n for n, got in enumerate(results) if got is not None]
        assert len(winners) == 1, results
        assert results[winners[0]] == fence + 1
        row = log.get(txn.txn_id)
        assert (row.owner, row.fence) == (f"coord-{winners[0]}", fence + 1)


def test_stores_opening_a_new_database_at_once_all_succeed_STORE_URL(store_url: str) -> None:
    """[STORE-URL] table creation is safe when several processes open a new database
    at the same moment."""
    stores: list[Store] = race([lambda: open_store(store_url) for _ in range(RACERS)])
    try:
        for opened in stores:
            assert DecisionLog(opened).open_transactions() == []
        with stores[0].transaction() as conn:
            names = sa.inspect(conn).get_table_names()
        assert {"hatp_txn", "hatp_record_event", "hatp_branch"} <= set(names)
    finally:
        for opened in stores:
            opened.close()
