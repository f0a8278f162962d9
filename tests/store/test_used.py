"""A tool server's used call approvals: one claim of an approval wins, on every database,
across threads, processes and restarts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from hatp.errors import ApprovalUnknown, SchemaMismatch
from hatp.store import (
    Store,
    UsedApproval,
    UsedApprovals,
    UseOutcome,
    open_store,
    upgrade_store,
)
from racing import race

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
EXPIRES = NOW + timedelta(minutes=10)
SERVER = "mcp://payments.example"
RACERS = 8


def claim(used: UsedApprovals, approval_id: str, **changes: Any) -> UsedApproval | None:
    """Claim ``approval_id`` for the payments server's ``pay`` call (or what ``changes`` say)."""
    call: dict[str, Any] = {
        "server": SERVER,
        "tool": "pay",
        "call_digest": "sha-256:call-1",
        "expires_at": EXPIRES,
        "now": NOW,
    }
    return used.claim(approval_id, **{**call, **changes})


def test_the_first_claim_wins_and_later_ones_get_the_stored_row_STORE_USED_ONCE(
    store: Store,
) -> None:
    """[STORE-USED-ONCE] [GATE-ONCE] the first claim of an approval id returns None; a
    second, even for another call, gets the row as the first claim stored it."""
    used = UsedApprovals(store)
    assert used.get("apv-1") is None
    assert claim(used, "apv-1") is None
    stored = UsedApproval(
        approval_id="apv-1",
        server=SERVER,
        tool="pay",
        call_digest="sha-256:call-1",
        used_at=NOW,
        expires_at=EXPIRES,
    )
    assert used.get("apv-1") == stored
    later = NOW + timedelta(seconds=5)
    again = claim(used, "apv-1", tool="refund", call_digest="sha-256:call-2", now=later)
    assert again == stored
    assert used.get("apv-1") == stored
    assert claim(used, "apv-2") is None  # another approval is claimed on its own


def test_a_claim_outlives_a_restart_STORE_USED_ONCE(store_url: str) -> None:
    """[STORE-USED-ONCE] [GATE-ONCE] an approval claimed before the store was closed is
    still claimed when it is opened again (a restarted server refuses it)."""
    first = open_store(store_url)
    try:
        assert claim(UsedApprovals(first), "apv-1") is None
    finally:
        first.close()
    reopened = open_store(store_url)
    try:
        found = claim(UsedApprovals(reopened), "apv-1")
    finally:
        reopened.close()
    assert found is not None
    assert (found.approval_id, found.used_at, found.outcome) == ("apv-1", NOW, None)


def test_a_database_made_before_the_table_gets_it_from_db_upgrade_STORE_USED_ONCE(
    store_url: str,
) -> None:
    """[STORE-USED-ONCE] [STORE-SCHEMA] a database an older hatp made, with hatp's other
    tables but not ``hatp_used_approval`` and no schema revision, is refused by
    ``open_store`` and completed by ``upgrade_store`` (``hatp db upgrade``)."""
    older = open_store(store_url)
    try:
        with older.transaction() as conn:
            conn.exec_driver_sql("DROP TABLE hatp_used_approval")
            conn.exec_driver_sql("DROP TABLE hatp_gate_ask")  # nor later revisions' tables
            conn.exec_driver_sql("DROP TABLE hatp_outbox")
            conn.exec_driver_sql("DROP TABLE hatp_undo_claim")
            conn.exec_driver_sql("ALTER TABLE hatp_branch DROP COLUMN undone_by")
            conn.exec_driver_sql("DROP TABLE hatp_schema_version")
    finally:
        older.close()
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert refused.value.reason == "PARTIAL"
    assert upgrade_store(store_url).after == "0004"
    opened = open_store(store_url)
    try:
        used = UsedApprovals(opened)
        assert claim(used, "apv-1") is None
        assert claim(used, "apv-1") is not None
    finally:
        opened.close()


def test_exactly_one_of_racing_threads_claims_an_approval_GATE_ONCE(
    store: Store, open_more: Callable[[], Store]
) -> None:
    """[GATE-ONCE] [STORE-USED-ONCE] threads on separate connections (as separate servers
    would be) claim one approval at once: exactly one gets None, every other the row."""
    racers = [UsedApprovals(open_more()) for _ in range(RACERS)]
    for round_ in range(5):
        approval_id = f"apv-race-{round_}"
        results = race(
            [
                partial(claim, mine, approval_id, call_digest=f"sha-256:call-{n}")
                for n, mine in enumerate(racers)
            ]
        )
        winners = [n for n, got in enumerate(results) if got is None]
        assert len(winners) == 1, results
        stored = UsedApprovals(store).get(approval_id)
        assert stored is not None
        assert stored.call_digest == f"sha-256:call-{winners[0]}"
        assert all(got == stored for got in results if got is not None)


def test_exactly_one_of_racing_threads_on_one_store_claims_an_approval_GATE_ONCE(
    store: Store,
) -> None:
    """[GATE-ONCE] [STORE-USED-ONCE] threads sharing one store (one server's pool) claim
    one approval at once: exactly one gets None."""
    used = UsedApprovals(store)
    for round_ in range(5):
        results = race([partial(claim, used, f"apv-pool-{round_}") for _ in range(RACERS)])
        assert [got is None for got in results].count(True) == 1, results


_CHILD = """
import json, sys
from datetime import datetime
from hatp.store import UsedApprovals, open_store

url, now = sys.argv[1], datetime.fromisoformat(sys.argv[2])
store = open_store(url)
used = UsedApprovals(store)
print("ready", flush=True)
for line in sys.stdin:  # each line an approval id, sent to both children at once
    got = used.claim(
        line.strip(), server="mcp://payments.example", tool="pay",
        call_digest="sha-256:call-1", expires_at=now, now=now,
    )
    print(json.dumps(got is None), flush=True)
store.close()
"""


def test_exactly_one_of_two_racing_processes_claims_each_approval_GATE_ONCE(
    store: Store, store_url: str
) -> None:
    """[GATE-ONCE] [STORE-USED-ONCE] two OS processes on one database are sent the same
    approval id at once, round after round: each time exactly one of them claims it."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, store_url, EXPIRES.isoformat()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    pipes = [(child.stdin, child.stdout) for child in children]
    rounds = 30
    try:
        for _, said in pipes:
            assert said is not None and said.readline() == "ready\n"
        won = []
        for n in range(rounds):
            for send, _ in pipes:
                assert send is not None
                send.write(f"apv-{n}\n")
                send.flush()
            won.append([json.loads(said.readline()) for _, said in pipes if said is not None])
        for child in children:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert all(sorted(each) == [False, True] for each in won), won
    used = UsedApprovals(store)
    assert all(used.get(f"apv-{n}") is not None for n in range(rounds))


def test_finish_records_the_outcome_once_and_never_flips_it_STORE_USED_ONCE(
    store: Store,
) -> None:
    """[STORE-USED-ONCE] finishing records outcome, detail and time; finishing again
    changes nothing, whatever it names; later claims see the outcome."""
    used = UsedApprovals(store)
    assert claim(used, "apv-1") is None
    assert claim(used, "apv-2") is None
    done = NOW + timedelta(seconds=2)
    used.finish("apv-1", UseOutcome.RAN, "paid 120.00 EUR", done)
    used.finish("apv-2", UseOutcome.FAILED, None, done)
    ran = used.get("apv-1")
    assert ran is not None
    assert (ran.outcome, ran.detail, ran.finished_at) == (UseOutcome.RAN, "paid 120.00 EUR", done)
    used.finish("apv-1", UseOutcome.FAILED, "a retry", done + timedelta(seconds=1))
    used.finish("apv-2", UseOutcome.RAN, "a retry", done + timedelta(seconds=1))
    assert used.get("apv-1") == ran
    failed = used.get("apv-2")
    assert failed is not None
    assert (failed.outcome, failed.detail, failed.finished_at) == (UseOutcome.FAILED, None, done)
    assert claim(used, "apv-1") == ran


def test_finishing_an_approval_never_claimed_is_refused_STORE_USED_ONCE(store: Store) -> None:
    """[STORE-USED-ONCE] an outcome is recorded only for a claimed approval."""
    used = UsedApprovals(store)
    with pytest.raises(ApprovalUnknown, match="never claimed") as raised:
        used.finish("apv-none", UseOutcome.RAN, None, NOW)
    assert raised.value.data == {"approvalId": "apv-none"}
    assert used.get("apv-none") is None


def test_prune_deletes_only_approvals_expired_before_the_time_given_STORE_USED_ONCE(
    store: Store,
) -> None:
    """[STORE-USED-ONCE] prune(before) deletes the rows whose approval expired before
    ``before`` and says how many; the rest stay claimed."""
    used = UsedApprovals(store)
    cut = NOW + timedelta(hours=1)
    for name, expires in (
        ("apv-old", cut - timedelta(milliseconds=1)),
        ("apv-older", cut - timedelta(minutes=30)),
        ("apv-at-cut", cut),
        ("apv-new", cut + timedelta(minutes=1)),
    ):
        assert claim(used, name, expires_at=expires) is None
    assert used.prune(cut) == 2
    assert used.get("apv-old") is None and used.get("apv-older") is None
    assert used.get("apv-at-cut") is not None and used.get("apv-new") is not None
    assert claim(used, "apv-new") is not None
    assert used.prune(cut) == 0


def test_naive_times_are_refused_and_nothing_is_written_STORE_USED_ONCE(store: Store) -> None:
    """[STORE-USED-ONCE] a time without a zone is refused with ValueError naming it."""
    used = UsedApprovals(store)
    naive = NOW.replace(tzinfo=None)
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        claim(used, "apv-1", now=naive)
    with pytest.raises(ValueError, match="expires_at must be timezone-aware"):
        claim(used, "apv-1", expires_at=naive)
    assert used.get("apv-1") is None
    assert claim(used, "apv-1") is None
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        used.finish("apv-1", UseOutcome.RAN, None, naive)
    with pytest.raises(ValueError, match="before must be timezone-aware"):
        used.prune(naive)
    stored = used.get("apv-1")
    assert stored is not None and stored.outcome is None
