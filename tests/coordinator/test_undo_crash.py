"""A coordinator killed inside an undo transaction is finished by a new one, whole or not at
all [UNDO-RUN] [COORD-CRASH].

The trip commits in the test process; its undo plan (every step: the seat and room
cancelled on the airline's and hotel's terms, the charge refunded less their fees, the
calendar event removed) is run in a coordinator child process that SIGKILLs itself at
one fault point, as ``test_crash.py`` does for trips. A new coordinator in the test
process recovers it. Whatever the point: the undo ends as its logged decision says
(presumed abort when none was logged); every participant has either taken its step
back (the original judged ``undone``, the undo ``whole``) or left it as it was (the
original ``whole``, the undo ``none``), never a mix, never twice; the journal's claim
follows (undone, or void); both records verify, and the link between them holds.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from coordinator.crashkit import Site, check_verifies, open_site, per_database, recover
from hatp._faults import CRASH_ENV
from hatp.clock import SystemClock
from hatp.demo._child import DECISION_ENV, open_coordinator
from hatp.demo.trip import PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.evidence import verify_undo
from hatp.model import TxnState
from hatp.store import DecisionLog

COMMITTED, ABORTED = TxnState.COMMITTED, TxnState.ABORTED
ORIGINAL = "trip-undone"
UNDONE = dict.fromkeys(PARTICIPANT_IDS, "undone")
WHOLE = dict.fromkeys(PARTICIPANT_IDS, "whole")
NONE = dict.fromkeys(PARTICIPANT_IDS, "none")


@pytest.fixture
def site(tmp_path: pathlib.Path, store_url: str) -> Iterator[Site]:
    """The trip folder; the decision log on SQLite or PostgreSQL."""
    with open_site(tmp_path, store_url) as made:
        yield made


def _committed_then_planned(site: Site) -> pathlib.Path:
    """Commit the trip in this process and write its undo plan (txn id ``site.txn_id``)
    for the child; return the plan file."""

    async def go() -> dict[str, Any]:
        coordinator, log, gateway = open_coordinator(
            site.folder, SystemClock(), log_url=site.log_url, decision="approve"
        )
        gateway.start()
        try:
            decide_by = SystemClock().now() + timedelta(minutes=10)
            outcome = await coordinator.run(trip_plan(ORIGINAL, decide_by=decide_by))
            assert outcome.state is COMMITTED, outcome.reason
            plan = await coordinator.plan_undo(
                ORIGINAL, undo_txn_id=site.txn_id, decide_seconds=600
            )
            return plan.to_wire()
        finally:
            await gateway.stop()
            log.store.close()

    path = site.folder / "undo.json"
    path.write_text(json.dumps(asyncio.run(go())))
    return path


#: (point, switches, the state the undo ends in)
CASES: list[tuple[str, dict[str, str], TxnState]] = [
    ("log.planned", {}, ABORTED),
    ("prepared.after:seat", {}, ABORTED),
    ("participant.prepare.staged", {}, ABORTED),
    ("participant.prepare.done", {}, ABORTED),
    ("log.decided", {}, COMMITTED),
    ("commit.before:charge", {}, COMMITTED),
    ("commit.after:charge", {}, COMMITTED),
    ("participant.commit.staged", {}, COMMITTED),
    ("participant.commit.done", {}, COMMITTED),
    ("commit.after:seat", {}, COMMITTED),
    ("log.outcome", {}, COMMITTED),
    ("participant.abort.done", {DECISION_ENV: "reject"}, ABORTED),
]
#: One of each kind in the quick suite, on SQLite; CI runs every one on both.
QUICK = {"prepared.after:seat", "commit.after:charge", "participant.abort.done"}


@pytest.mark.parametrize(
    ("store_url", "point", "switches", "state"),
    per_database(CASES, QUICK),
    indirect=["store_url"],
)
def test_an_undo_killed_at_any_point_is_finished_whole_or_not_at_all_UNDO_RUN(
    site: Site, point: str, switches: dict[str, str], state: TxnState
) -> None:
    """[UNDO-RUN] [COORD-CRASH] killed at ``point``: recovered to ``state``; the trip is
    taken back at every participant or at none; the journal and both records agree."""
    plan = _committed_then_planned(site)
    world = site.world()
    done = site.run(str(site.folder), str(plan), **{CRASH_ENV: point}, **switches)
    assert done.returncode == -signal.SIGKILL, done.describe()
    log = site.log()
    outcome = recover(world, log, site.txn_id)
    if point == "log.outcome":  # killed once its outcome was durable: nothing left open
        assert outcome is None
    else:
        assert outcome is not None and not outcome.fenced
        assert outcome.state is state, outcome.reason
    _check_ended(world, log, site.txn_id, state)


def _check_ended(world: TripWorld, log: DecisionLog, undo_id: str, state: TxnState) -> None:
    assert log.get(undo_id).state is state
    undone = state is COMMITTED
    assert world.effects(ORIGINAL) == (UNDONE if undone else WHOLE)
    assert world.effects(undo_id) == (WHOLE if undone else NONE)
    claims = log.undo_claims(ORIGINAL)
    assert set(claims) == {"seat", "room", "calendar", "charge"}
    assert all(c.undo_txn_id == undo_id for c in claims.values())
    assert all((c.undone, c.void) == (undone, not undone) for c in claims.values())
    record, original = log.record(undo_id), log.record(ORIGINAL)
    check_verifies(record, world)
    check_verifies(original, world)
    report = verify_undo(record, original, world.keyring)
    failed = [f"{f.rule}: {f.detail}" for f in report.findings if f.result.value != "pass"]
    assert report.ok, failed
