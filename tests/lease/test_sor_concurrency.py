"""Racing writers and killed processes (docs/spec.md §23, [SOR-APPLY]).

Writers that each hold a lease granted at the same epoch apply at once, from
threads sharing one store and from OS processes with stores of their own:
exactly one is applied and every other refused ``MONOTONIC_CAS_FENCING``.
A process killed right after a lease commit (``HATP_CRASH_AT``) leaves it
durable: a grant is stored and usable, an apply is written once and a retry
is replayed. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hatp._faults import CRASH_ENV
from hatp.clock import ManualClock
from hatp.errors import LeaseRefused
from hatp.evidence import digest
from hatp.lease import Applied, RecoveryMode, RecoveryOutcome, SystemOfRecord
from hatp.store import LeaseStatus, Store
from lease.sor_world import CLOSE, RESOURCE, TICKET, grant, leases
from racing import race

WRITERS = 8
PROCESSES = 4
BOUND_SECONDS = 60
TESTS = Path(__file__).resolve().parents[1]


def _assign(n: int) -> dict[str, Any]:
    return {"action": "tickets.update", "params": {"id": 4711, "assignee": f"agent-{n}"}}


def _attempt(sor: SystemOfRecord, doc: dict[str, Any], mutation: dict[str, Any]) -> Any:
    try:
        return sor.apply(doc, resource=RESOURCE, mutation=mutation)
    except LeaseRefused as refused:
        return refused


def _one_winner(sor: SystemOfRecord, outcomes: list[Any]) -> int:
    """Check that exactly one writer won and every other was fenced off; return the winner."""
    winners = [n for n, got in enumerate(outcomes) if isinstance(got, Applied)]
    assert len(winners) == 1, outcomes
    losers = [got for got in outcomes if not isinstance(got, Applied)]
    assert all(isinstance(got, LeaseRefused) for got in losers), outcomes
    assert {got.reason for got in losers} == {"MONOTONIC_CAS_FENCING"}
    winner = winners[0]
    assert sor.state(RESOURCE) == ({**TICKET, "assignee": f"agent-{winner}"}, 1)
    assert len(sor.rejections(RESOURCE)) == len(outcomes) - 1
    statuses = sorted(row.status.value for row in leases(sor.store))
    assert statuses == ["applied"] + ["granted"] * (len(outcomes) - 1)
    return winner


def test_of_writers_racing_on_threads_exactly_one_is_applied(sor: SystemOfRecord) -> None:
    """[SOR-APPLY] [LEASE-FENCE] 8 threads, each with its own lease fenced at epoch 1,
    apply at once: one is applied, the 7 others MONOTONIC_CAS_FENCING; the ticket holds
    exactly the winner's mutation, at the fence."""
    docs = [grant(sor, RecoveryMode.SNAPSHOT_RESTORE, _assign(n)) for n in range(WRITERS)]
    assert {doc["casFenceEpoch"] for doc in docs} == {1}
    calls: list[Callable[[], Any]] = [
        lambda n=n: _attempt(sor, docs[n], _assign(n)) for n in range(WRITERS)
    ]
    outcomes = race(calls)
    winner = _one_winner(sor, outcomes)
    assert outcomes[winner].receipt["epoch"] == 1


def test_racing_apply_and_recover_of_one_lease_settle_either_way(sor: SystemOfRecord) -> None:
    """[SOR-APPLY] [SOR-RECOVER] an apply and a recover of the same lease at once, round
    after round: either the apply ran and was undone, or the lease was voided and its
    apply refused NOT_GRANTED; never an error, never a half state."""
    for _ in range(6):
        doc = grant(sor, RecoveryMode.COMPENSATING_ACTION, CLOSE)
        applied, recovered = race(
            [
                lambda doc=doc: _attempt(sor, doc, CLOSE),
                lambda doc=doc: sor.recover(doc["leaseId"]),
            ]
        )
        state, _ = sor.state(RESOURCE)
        assert state == TICKET
        if recovered.outcome is RecoveryOutcome.VOIDED:
            assert isinstance(applied, LeaseRefused), applied
            assert applied.reason == "NOT_GRANTED"
        else:
            assert isinstance(applied, Applied), applied
            assert recovered.outcome is RecoveryOutcome.RESTORED


# --- OS processes ---------------------------------------------------------------------

CHILD = """
import json, sys
from datetime import datetime
from hatp.clock import ManualClock
from hatp.demo._tickets import ticket_system
from hatp.errors import LeaseRefused
from hatp.lease import RecoveryMode
from hatp.store import open_store
from lease.sor_world import KEY, RESOURCE, WINDOW_MS

url, start = sys.argv[1], datetime.fromisoformat(sys.argv[2])
store = open_store(url)
sor = ticket_system(store, KEY, ManualClock(start))
print("ready", flush=True)
for line in sys.stdin:
    asked = json.loads(line)
    if asked["op"] == "grant":
        mode = RecoveryMode(asked["mode"])
        lease = sor.grant(RESOURCE, asked["mutation"], t_req_ms=WINDOW_MS, mode=mode)
        print(json.dumps({"leaseId": lease["leaseId"]}), flush=True)
        continue
    try:
        got = sor.apply(asked["lease"], resource=RESOURCE, mutation=asked["mutation"])
        print(json.dumps({"applied": got.receipt, "replayed": got.replayed}), flush=True)
    except LeaseRefused as refused:
        print(json.dumps({"refused": refused.reason}), flush=True)
store.close()
"""


class Child:
    """A ticket-system process on the store's database, driven a JSON line at a time."""

    def __init__(self, store: Store, clock: ManualClock, crash_at: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
        if crash_at is not None:
            env[CRASH_ENV] = crash_at
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, store.url, clock.now().isoformat()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        said = self.process.stdout.readline()
        assert said == "ready\n", said + self.finish()[1]

    def send(self, asked: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(asked) + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, self.finish()[1]
        answer: dict[str, Any] = json.loads(line)
        return answer

    def finish(self) -> tuple[int, str]:
        """Close its input and wait (bounded) for it to end; its exit code and stderr."""
        try:
            _, err = self.process.communicate(timeout=BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return self.process.returncode, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def _children(store: Store, clock: ManualClock, count: int, crash_at: str | None = None) -> Any:
    children = [Child(store, clock, crash_at) for _ in range(count)]
    for child in children:
        child.wait_ready()
    return children


def test_of_writers_racing_from_processes_exactly_one_is_applied(
    sor: SystemOfRecord, store: Store, clock: ManualClock
) -> None:
    """[SOR-APPLY] [LEASE-FENCE] 4 OS processes, each with a store of its own on one
    database, are sent their own lease at once: exactly one is applied."""
    docs = [grant(sor, RecoveryMode.SNAPSHOT_RESTORE, _assign(n)) for n in range(PROCESSES)]
    children = _children(store, clock, PROCESSES)
    try:
        for n, child in enumerate(children):
            child.send({"op": "apply", "lease": docs[n], "mutation": _assign(n)})
        answers = [child.answer() for child in children]
        for child in children:
            code, err = child.finish()
            assert code == 0, err
    finally:
        for child in children:
            child.kill()
    winners = [n for n, said in enumerate(answers) if "applied" in said]
    assert len(winners) == 1, answers
    assert [said.get("refused") for n, said in enumerate(answers) if n not in winners] == [
        "MONOTONIC_CAS_FENCING"
    ] * (PROCESSES - 1)
    assert sor.state(RESOURCE) == ({**TICKET, "assignee": f"agent-{winners[0]}"}, 1)
    assert len(sor.rejections(RESOURCE)) == PROCESSES - 1


def _killed(child: Child, point: str) -> None:
    code, err = child.finish()
    if code != -signal.SIGKILL:
        pytest.fail(f"the child was to die at {point}: exit {code}\n{err}")


def test_a_process_killed_right_after_applying_left_it_applied_once(
    sor: SystemOfRecord, store: Store, clock: ManualClock
) -> None:
    """[SOR-APPLY] killed at `lease.applied`, before answering: the mutation is durable,
    the lease `applied`, and the caller's retry of the same lease is replayed, not run
    again (exactly one effect)."""
    doc = grant(sor, RecoveryMode.COMPENSATING_ACTION, CLOSE)
    (child,) = _children(store, clock, 1, crash_at="lease.applied")
    try:
        child.send({"op": "apply", "lease": doc, "mutation": CLOSE})
        _killed(child, "lease.applied")
    finally:
        child.kill()
    assert sor.state(RESOURCE) == ({**TICKET, "status": "closed"}, 1)
    row = sor.lease(doc["leaseId"])
    assert row.status is LeaseStatus.APPLIED
    retry = sor.apply(doc, resource=RESOURCE, mutation=CLOSE)
    assert retry.replayed
    assert retry.receipt == row.commit_receipt
    assert retry.receipt["postImageStateHash"] == digest({**TICKET, "status": "closed"})
    assert sor.state(RESOURCE) == ({**TICKET, "status": "closed"}, 1)
    assert sor.rejections() == []


def test_a_process_killed_right_after_granting_left_a_usable_lease(
    sor: SystemOfRecord, store: Store, clock: ManualClock
) -> None:
    """[SOR-GRANT] killed at `lease.granted`, before answering: the lease is stored
    `granted` and applies."""
    (child,) = _children(store, clock, 1, crash_at="lease.granted")
    try:
        child.send({"op": "grant", "mode": "SNAPSHOT_RESTORE", "mutation": CLOSE})
        _killed(child, "lease.granted")
    finally:
        child.kill()
    (row,) = leases(store)
    assert row.status is LeaseStatus.GRANTED
    assert (row.mutation, row.pre_image) == (CLOSE, TICKET)
    applied = sor.apply(row.lease, resource=RESOURCE, mutation=CLOSE)
    assert not applied.replayed
    assert sor.state(RESOURCE) == ({**TICKET, "status": "closed"}, 1)
