"""Kit for the crash and fencing tests: coordinator processes, and what is checked after them.

A :class:`Site` is one test's trip world (participants on SQLite files in a
folder) and its decision log (SQLite or PostgreSQL, from the ``store_url``
fixture). Coordinators run in child processes (``python -m hatp.demo._child``)
that kill or freeze themselves at a named fault point; the test process then
opens the same world and log, waits until the dead owner's lease has ended,
recovers in-process and judges the result from the participants' ledgers and
the record in the log. Every wait here waits on a condition, bounded by
:data:`BOUND_SECONDS`; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hatp._faults import CRASH_ENV, PAUSE_ENV
from hatp.clock import SystemClock
from hatp.coordinator import Coordinator, Outcome
from hatp.demo._child import (
    ATTEMPTS_ENV,
    CHILD_LEASE_SECONDS,
    DECISION_ENV,
    EDIT_CARD_ENV,
    FAULTS_ENV,
    LOG_URL_ENV,
)
from hatp.demo.trip import COORDINATOR, PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.evidence import verify_record
from hatp.model import Result, TxnState
from hatp.store import DecisionLog, Store, open_store

#: The longest any single wait in these tests may last (a child run, a lease, a stop).
BOUND_SECONDS = 15.0
#: How often a waiting test looks again.
POLL_SECONDS = 0.05

ALL_WHOLE = dict.fromkeys(PARTICIPANT_IDS, "whole")
ALL_NONE = dict.fromkeys(PARTICIPANT_IDS, "none")
CHILD = [sys.executable, "-m", "hatp.demo._child"]
_SWITCHES = (
    CRASH_ENV,
    PAUSE_ENV,
    DECISION_ENV,
    EDIT_CARD_ENV,
    FAULTS_ENV,
    ATTEMPTS_ENV,
    LOG_URL_ENV,
)


@dataclass
class Finished:
    """A child process that has ended: its exit code (-9: SIGKILL) and what it printed."""

    returncode: int
    stdout: str
    stderr: str

    def outcomes(self) -> list[dict[str, Any]]:
        """The outcome lines the child printed (``txnId``, ``state``, ``fenced``, ``reason``)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def describe(self) -> str:
        return f"exit {self.returncode}; stdout {self.stdout!r}; stderr {self.stderr[-2000:]}"


@dataclass
class Site:
    """One test's trip folder and decision-log URL, and the stores the test opened on them."""

    folder: Path
    log_url: str
    txn_id: str = "trip-crash"
    clock: SystemClock = field(default_factory=SystemClock)
    _opened: list[Store | TripWorld] = field(default_factory=list)

    def world(self, **options: Any) -> TripWorld:
        """Open (or reopen) the trip world in the folder, as every child does."""
        opened = TripWorld.open(self.folder, self.clock, **options)
        self._opened.append(opened)
        return opened

    def log(self) -> DecisionLog:
        """Open the decision log the children write."""
        store = open_store(self.log_url)
        self._opened.append(store)
        return DecisionLog(store)

    def plan_file(self, extra: dict[str, Any] | None = None, **options: Any) -> Path:
        """Write the trip plan (``trip_plan`` options, then the members of ``extra``) for
        the children; return its path."""
        decide_by = self.clock.now() + timedelta(minutes=10)
        path = self.folder / f"{self.txn_id}.json"
        plan = {**trip_plan(self.txn_id, decide_by=decide_by, **options), **(extra or {})}
        path.write_text(json.dumps(plan))
        return path

    def start(self, *args: str, **switches: str) -> subprocess.Popen[str]:
        """Start a coordinator child (``_child`` args); ``switches`` are extra env vars."""
        base = {k: v for k, v in os.environ.items() if k not in _SWITCHES}
        env = {**base, LOG_URL_ENV: self.log_url, **switches}
        return subprocess.Popen(
            [*CHILD, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, **switches: str) -> Finished:
        """Run a coordinator child to its end (or its death)."""
        return finish(self.start(*args, **switches))

    def crash(
        self, crash_at: str, *, extra: dict[str, Any] | None = None, **switches: str
    ) -> Finished:
        """Run the plan (with ``extra`` members) in a child that must die by SIGKILL at
        ``crash_at``."""
        plan = self.plan_file(extra)
        done = self.run(str(self.folder), str(plan), **{CRASH_ENV: crash_at}, **switches)
        if done.returncode != -signal.SIGKILL:
            pytest.fail(f"the child was to be killed at {crash_at!r}: {done.describe()}")
        return done

    def close(self) -> None:
        for opened in reversed(self._opened):
            opened.close()


def finish(child: subprocess.Popen[str]) -> Finished:
    """Wait (bounded) for a child to end; kill it if it does not."""
    try:
        stdout, stderr = child.communicate(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, stderr = child.communicate()
        pytest.fail(f"the coordinator child did not end within {BOUND_SECONDS:g} s: {stderr}")
    return Finished(child.returncode, stdout, stderr)


@contextmanager
def open_site(tmp_path: Path, log_url: str) -> Iterator[Site]:
    """A trip folder in ``tmp_path`` whose decision log is at ``log_url``; closed on exit."""
    made = Site(tmp_path / "trip", log_url)
    made.folder.mkdir()
    try:
        yield made
    finally:
        made.close()


def wait_for(what: str, condition: Any) -> None:
    """Poll ``condition()`` until it is true; fail after :data:`BOUND_SECONDS`."""
    give_up = time.monotonic() + BOUND_SECONDS
    while not condition():
        if time.monotonic() > give_up:
            pytest.fail(f"waited {BOUND_SECONDS:g} s for {what}")
        time.sleep(POLL_SECONDS)


def wait_lease_ended(log: DecisionLog, txn_id: str, clock: SystemClock) -> None:
    """Wait until no one holds a live lease on ``txn_id`` (a dead child's lasts 2 s)."""

    def ended() -> bool:
        row = log.get(txn_id)
        return row.owner is None or row.lease_until is None or row.lease_until <= clock.now()

    wait_for(f"the {CHILD_LEASE_SECONDS:g} s lease on {txn_id} to end", ended)


def recovering_coordinator(world: TripWorld, log: DecisionLog) -> Coordinator:
    """A recovering coordinator in the test process (it never asks for approvals)."""
    gateway = world.gateway(world.scripted_people("never"))  # recovery asks nobody
    return Coordinator(
        coordinator_id=COORDINATOR,
        key=world.keys["coordinator"],
        log=log,
        participants=world.participants,
        gateway=gateway,
        keyring=world.keyring,
        clock=world.clock,
        retry_delay=0.01,
    )


def recover(world: TripWorld, log: DecisionLog, txn_id: str) -> Outcome | None:
    """Once the lease has ended, run ``recover()`` in-process; its outcome for ``txn_id``."""
    wait_lease_ended(log, txn_id, SystemClock())
    outcomes = asyncio.run(recovering_coordinator(world, log).recover())
    return next((o for o in outcomes if o.txn_id == txn_id), None)


def per_database(cases: Sequence[tuple[Any, ...]], quick: set[str]) -> list[Any]:
    """Each case once per database (its id ``<database>-<first member>``): the cases named
    in ``quick`` on SQLite run in every suite, the others are marked slow."""
    from databases import DATABASES

    return [
        pytest.param(
            database,
            *case,
            id=f"{database}-{case[0]}",
            marks=[] if database == "sqlite" and case[0] in quick else [pytest.mark.slow],
        )
        for database in DATABASES
        for case in cases
    ]


def event_types(record: dict[str, Any]) -> list[str]:
    return [event["type"] for event in record["events"]]


def check_verifies(record: dict[str, Any], world: TripWorld) -> None:
    """The record verifies offline: every finding of every rule is a pass."""
    report = verify_record(record, world.keyring)
    failed = [
        f"{f.rule}: {f.result.value} {f.detail}"
        for f in report.findings
        if f.result is not Result.PASS
    ]
    assert report.ok and not failed, failed


def check_ended(
    world: TripWorld,
    log: DecisionLog,
    txn_id: str,
    state: TxnState,
    child_events: list[dict[str, Any]],
) -> dict[str, Any]:
    """The transaction ended in ``state`` everywhere and the record shows it; return the record.

    Every participant holds the whole effect (committed) or none of it
    (aborted): never a mix, never twice. The record continues the chain the
    dead child began (its events are the record's first ones, unchanged),
    ends in exactly one outcome, and verifies offline.
    """
    assert log.get(txn_id).state is state
    assert world.effects(txn_id) == (ALL_WHOLE if state is TxnState.COMMITTED else ALL_NONE)
    record = log.record(txn_id)
    assert child_events, "the child logged nothing"
    assert record["events"][: len(child_events)] == child_events
    types = event_types(record)
    assert types.count("txn.outcome") == 1
    assert types[-1] == "record.sealed"
    outcome = next(e for e in record["events"] if e["type"] == "txn.outcome")
    assert outcome["body"]["state"] == state.value
    check_verifies(record, world)
    return record
