"""Recovery: a key whose worker died is classified by the live records, never guessed.

A reserved key whose lease ran out means its worker died (or stalled)
between the reservation and the commit. Still the snapshot: not applied,
run it. Already the postcondition: applied, record it and write nothing.
Anything else: a person decides (``RECOVERY_REQUIRED``). The first tests set
each case up by hand (a reservation and the live rows); the last ones kill
a real worker process at the fault points ``writes.reserved`` and
``writes.committed``, then recover in the test process after its lease.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from hatp import _checks
from hatp._faults import CRASH_ENV
from hatp.clock import ManualClock
from hatp.errors import ConcurrentExecution, DriftDetected, RecoveryRequired
from hatp.store import Store
from hatp.store._schema import lease_end
from hatp.writes import ExecutionStatus, KeyState, Writes, _book, derive_key
from hatp.writes import _executor as executor_module
from writes.executor_world import LEASE_SECONDS, approved, journal_rows, key_row
from writes.inventory import live, touch

KEY = derive_key("fix-1", 1)
BOUND_SECONDS = 30.0


def dead_worker(store: Store, clock: ManualClock) -> None:
    """A worker reserved fix-1 v1's key, then died: its lease has just run out."""
    until = lease_end(clock.now(), LEASE_SECONDS)
    with store.transaction() as conn:
        assert _book.reserve_key_txn(conn, KEY, "fix-1", 1, "worker-dead", until, clock.now())
    clock.advance(LEASE_SECONDS + 1)


def test_an_expired_reservation_on_the_snapshot_is_run_once_WRITE_RECOVER(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    dead_worker(store, clock)

    outcome = writes.execute("fix-1", 1, "worker-b")

    assert outcome.status is ExecutionStatus.RECOVERED
    assert outcome.result["recovered"] == "not-applied"
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert len(journal_rows(store)) == 1
    row = key_row(store, KEY)
    assert row is not None
    assert (row.state, row.fence) == ("completed", 2)  # taken over: the dead worker is fenced
    assert writes.execute("fix-1", 1, "worker-c").status is ExecutionStatus.ALREADY_EXECUTED


def test_an_expired_reservation_on_the_postcondition_is_recorded_not_rerun_WRITE_RECOVER(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    dead_worker(store, clock)
    touch(store, "SKU-1", on_hand=15, version=2)  # the records already hold the postcondition

    outcome = writes.execute("fix-1", 1, "worker-b")

    assert outcome.status is ExecutionStatus.RECOVERED
    assert outcome.result["recovered"] == "applied"
    assert live(store)["SKU-1"] == (15, "each", 2)  # not applied a second time
    [entry] = writes.journal()
    assert entry.result == outcome.result
    assert writes.status("fix-1", 1).key.state is KeyState.COMPLETED  # type: ignore[union-attr]
    assert writes.execute("fix-1", 1, "worker-c").status is ExecutionStatus.ALREADY_EXECUTED


def test_an_expired_reservation_on_other_records_goes_to_a_person_WRITE_RECOVER(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    dead_worker(store, clock)
    touch(store, "SKU-1", on_hand=12)  # neither 10 (snapshot) nor 15 (postcondition)

    for _ in range(2):  # asked again, it says the same: no lease was taken
        with pytest.raises(RecoveryRequired) as caught:
            writes.execute("fix-1", 1, "worker-b")
    assert caught.value.data["records"]["inventory/SKU-1"]["live"]["on_hand"] == 12
    assert live(store)["SKU-1"] == (12, "each", 1)
    assert journal_rows(store) == []
    row = key_row(store, KEY)
    assert row is not None
    assert (row.state, row.owner, row.fence) == ("reserved", "worker-dead", 1)


def test_with_WRITE_RECOVER_off_an_ambiguous_key_is_retried_blindly(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    dead_worker(store, clock)
    touch(store, "SKU-1", on_hand=12)

    with _checks.unsafe_switched_off("WRITE-RECOVER"), pytest.raises(DriftDetected):
        writes.execute("fix-1", 1, "worker-b")  # only the drift check still stands in the way


def test_with_WRITE_ONCE_off_a_completed_key_runs_again(writes: Writes, store: Store) -> None:
    approved(writes, store)
    writes.execute("fix-1", 1, "worker-a")
    with _checks.unsafe_switched_off("WRITE-ONCE"), pytest.raises(DriftDetected):
        writes.execute("fix-1", 1, "worker-a")  # not answered from the key: run, and refused


def test_a_stalled_worker_fenced_out_by_a_takeover_writes_nothing(
    writes: Writes, store: Store, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    approved(writes, store)
    taken_over: list[ExecutionStatus] = []
    stalled: list[str] = []

    def stall(name: str) -> None:
        # The first worker stalls right after reserving; its lease runs out and another
        # worker takes the key over and finishes the plan before it wakes.
        if name == "writes.reserved" and not stalled:
            stalled.append(name)
            clock.advance(LEASE_SECONDS + 1)
            taken_over.append(writes.execute("fix-1", 1, "worker-b").status)

    monkeypatch.setattr(executor_module, "fault_point", stall)
    woken = writes.execute("fix-1", 1, "worker-a")

    assert taken_over == [ExecutionStatus.RECOVERED]
    assert woken.status is ExecutionStatus.ALREADY_EXECUTED
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert len(journal_rows(store)) == 1


# --- a real worker, killed ----------------------------------------------------

CHILD = """
import sys
from datetime import datetime
from hatp.clock import ManualClock
from hatp.store import open_store
from writes.executor_world import make_writes

url, plan_id, version, start = sys.argv[1:5]
store = open_store(url)
writes = make_writes(store, ManualClock(datetime.fromisoformat(start)))
print(writes.execute(plan_id, int(version), "worker-child").status.value)
"""
TESTS = Path(__file__).resolve().parents[1]


def run_worker(store: Store, now: datetime, crash_at: str) -> subprocess.CompletedProcess[str]:
    """Execute fix-1 v1 in a child process that SIGKILLs itself at ``crash_at``."""
    env = {
        **{k: v for k, v in os.environ.items() if k != CRASH_ENV},
        CRASH_ENV: crash_at,
        "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, store.url, "fix-1", "1", now.isoformat()],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND_SECONDS,
        check=False,
    )
    if done.returncode != -signal.SIGKILL:
        pytest.fail(f"the worker was to die at {crash_at}: {done.returncode} {done.stderr}")
    return done


def test_a_worker_killed_after_reserving_is_recovered_and_runs_once(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    run_worker(store, clock.now(), "writes.reserved")

    row = key_row(store, KEY)
    assert row is not None
    assert (row.state, row.owner) == ("reserved", "worker-child")
    assert live(store)["SKU-1"] == (10, "each", 1)
    with pytest.raises(ConcurrentExecution):  # its lease is still live
        writes.execute("fix-1", 1, "worker-b")

    clock.advance(LEASE_SECONDS + 1)
    outcome = writes.execute("fix-1", 1, "worker-b")

    assert outcome.status is ExecutionStatus.RECOVERED
    assert outcome.result["recovered"] == "not-applied"
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert len(journal_rows(store)) == 1


def test_a_worker_killed_after_committing_left_an_executed_key(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    run_worker(store, clock.now(), "writes.committed")

    assert live(store)["SKU-1"] == (15, "each", 2)
    [entry] = journal_rows(store)
    clock.advance(LEASE_SECONDS + 1)
    outcome = writes.execute("fix-1", 1, "worker-b")

    assert outcome.status is ExecutionStatus.ALREADY_EXECUTED
    assert outcome.journal_seq == entry.seq
    assert live(store)["SKU-1"] == (15, "each", 2)
    assert len(journal_rows(store)) == 1
