"""A participant whose store is full or unreachable is no answer: never a settlement
[COORD-CRASH] [COORD-IN-DOUBT].

Each test runs the trip in a coordinator child process with a participant-side
fault in front of one participant (``HATP_CHILD_FAULTS``,
:mod:`hatp.demo._faulty`): its store full (SQLite's "database or disk is full",
through the store's own mapping) or unreachable, at prepare, commit, abort or
compensate. The child gives up on it after a few sends
(``HATP_CHILD_MAX_ATTEMPTS``) and a recovering coordinator in the test process,
whose participants are healthy, finishes what it left open. Whatever the fault,
every participant ends with the whole effect or none of it, and the record
verifies: a release, undo or commit that was refused because the store failed
did not happen, and counting it as done would leave a hold or a charge behind.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from coordinator.crashkit import Site, check_ended, open_site, per_database, recover
from hatp.demo._child import ATTEMPTS_ENV, DECISION_ENV, EDIT_CARD_ENV, FAULTS_ENV
from hatp.model import TxnState

COMMITTED, ABORTED = TxnState.COMMITTED, TxnState.ABORTED


@pytest.fixture
def site(tmp_path: pathlib.Path, store_url: str) -> Iterator[Site]:
    """The trip folder; the decision log on SQLite or PostgreSQL."""
    with open_site(tmp_path, store_url) as made:
        yield made


REJECT = {DECISION_ENV: "reject"}
UNWIND = {EDIT_CARD_ENV: "4000.00"}  # the capture is refused: the calendar entry is undone
#: (fault spec, other switches, the state the trip ends in)
CASES: list[tuple[str, dict[str, str], TxnState]] = [
    ("payments.prepare=store-full", {}, ABORTED),
    ("hotel.abort=store-full", REJECT, ABORTED),
    ("hotel.abort=store-unavailable", REJECT, ABORTED),
    ("airline.abort=store-unavailable*2", REJECT, ABORTED),
    ("calendar.compensate=store-full", UNWIND, ABORTED),
    ("airline.commit=store-full", {}, COMMITTED),
    ("payments.commit=store-unavailable", {}, COMMITTED),
    ("payments.commit=lost-reply*1", {}, COMMITTED),
]
QUICK = {"hotel.abort=store-full", "airline.commit=store-full"}


@pytest.mark.parametrize(
    ("store_url", "faults", "switches", "state"),
    per_database(CASES, QUICK),
    indirect=["store_url"],
)
def test_a_participant_store_that_fails_leaves_the_trip_whole_or_not_at_all_once_recovered(
    site: Site, faults: str, switches: dict[str, str], state: TxnState
) -> None:
    world = site.world()
    plan = site.plan_file()
    done = site.run(
        str(site.folder), str(plan), **{FAULTS_ENV: faults, ATTEMPTS_ENV: "3"}, **switches
    )
    assert done.returncode == 0, done.describe()
    log = site.log()
    child_events = log.events(site.txn_id)
    recover(world, log, site.txn_id)
    check_ended(world, log, site.txn_id, state, child_events)
