"""A paused coordinator is fenced off once another has taken over [COORD-FENCE].

A coordinator child freezes itself (SIGSTOP) at a fault point while it owns
the trip under fence 1. Once its 2 s lease has ended, a coordinator in the
test process takes the transaction over (fence 2) and commits it. Then the
child is woken (SIGCONT) and carries on with fence 1: the participant refuses
its commit, or the log refuses its write, with STALE_FENCE; it stops with
``fenced`` set and nothing happens twice. Two coordinator processes racing to
recover the same transaction: exactly one drives it.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from collections.abc import Iterator

import pytest

from coordinator.crashkit import (
    ALL_WHOLE,
    Site,
    check_ended,
    event_types,
    finish,
    open_site,
    recover,
    wait_for,
)
from hatp._faults import PAUSE_ENV
from hatp.demo import AIRLINE, HOTEL, PAYMENTS, TripWorld
from hatp.model import TxnState


@pytest.fixture
def site(tmp_path: pathlib.Path, store_url: str) -> Iterator[Site]:
    """The trip folder; the decision log on SQLite or PostgreSQL."""
    with open_site(tmp_path, store_url) as made:
        yield made


def wait_stopped(child: subprocess.Popen[str]) -> None:
    """Wait (bounded) until the child has frozen itself; fail if it ended instead."""
    ended: list[int] = []

    def stopped() -> bool:
        # WUNTRACED reports a stop without reaping; an exit is reaped, so remember it.
        pid, status = os.waitpid(child.pid, os.WNOHANG | os.WUNTRACED)
        if pid and not os.WIFSTOPPED(status):
            ended.append(status)
        return bool(ended) or (pid != 0 and os.WIFSTOPPED(status))

    wait_for(f"child {child.pid} to freeze itself", stopped)
    if ended:
        child.returncode = os.waitstatus_to_exitcode(ended[0])  # already reaped above
        _, stderr = child.communicate()
        pytest.fail(f"the child ended (exit {child.returncode}) instead of freezing: {stderr}")


def kinds(world: TripWorld, participant: str, txn_id: str) -> list[str]:
    return [line.kind for line in world.ledger(participant) if line.txn_id == txn_id]


@pytest.mark.parametrize(
    ("pause_at", "refused_by"),
    [
        # Frozen before capturing the charge: its capture reaches the participant,
        # which has seen fence 2.
        ("commit.before:charge", "fence 2 was already seen for branch 'charge'"),
        # Frozen after committing the last hold: its next act is logging the
        # outcome, and the log is at fence 2.
        ("commit.after:room", "it is at fence 2"),
    ],
    ids=["refused-by-participant", "refused-by-log"],
)
def test_a_paused_coordinator_is_fenced_off_once_another_took_over_COORD_FENCE(
    site: Site, pause_at: str, refused_by: str
) -> None:
    child = site.start(str(site.folder), str(site.plan_file()), **{PAUSE_ENV: pause_at})
    try:
        wait_stopped(child)
        log = site.log()
        child_events = log.events(site.txn_id)
        assert log.get(site.txn_id).fence == 1
        world = site.world()
        outcome = recover(world, log, site.txn_id)  # once the frozen child's lease has ended
        assert outcome is not None and outcome.state is TxnState.COMMITTED, outcome
        assert log.get(site.txn_id).fence == 2
        committed = log.record(site.txn_id)
        os.kill(child.pid, signal.SIGCONT)
        woken = finish(child)
    finally:
        if child.returncode is None:  # a failure above: do not leave a frozen process behind
            child.kill()
            child.communicate()
    assert woken.returncode == 0, woken.describe()
    (said,) = woken.outcomes()
    assert said["fenced"] is True, said
    assert said["state"] == "committing"  # where it was when it was stopped, never an end
    assert said["reason"].startswith("fenced off: ") and refused_by in said["reason"], said
    # The fenced child changed nothing: not the log, and no effect twice.
    assert log.record(site.txn_id) == committed
    assert log.get(site.txn_id).state is TxnState.COMMITTED
    assert world.effects(site.txn_id) == ALL_WHOLE
    assert kinds(world, PAYMENTS, site.txn_id).count("captured") == 1
    assert kinds(world, AIRLINE, site.txn_id).count("ticketed") == 1
    assert kinds(world, HOTEL, site.txn_id).count("booked") == 1
    check_ended(world, log, site.txn_id, TxnState.COMMITTED, child_events)


def test_two_processes_racing_to_recover_one_transaction_exactly_one_drives_it_COORD_FENCE(
    site: Site,
) -> None:
    site.crash("commit.after:charge")
    log = site.log()
    child_events = log.events(site.txn_id)
    # Both start while the dead owner's lease is still live and pounce when it ends.
    racers = [site.start("--recover", str(site.folder)) for _ in range(2)]
    results = [finish(racer) for racer in racers]
    for result in results:
        assert result.returncode == 0, result.describe()
    said = [line for result in results for line in result.outcomes()]
    assert said, "neither process recovered the transaction"
    assert all(line["state"] == "committed" and not line["fenced"] for line in said), said
    world = site.world()
    record = check_ended(world, log, site.txn_id, TxnState.COMMITTED, child_events)
    assert event_types(record).count("txn.taken-over") == 1
    assert event_types(record).count("txn.committed") == 4
    assert kinds(world, PAYMENTS, site.txn_id).count("captured") == 1
