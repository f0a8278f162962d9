"""A killed coordinator is finished by a new one, whole or not at all [COORD-CRASH].

Each test runs the trip in a coordinator child process that SIGKILLs itself
at one fault point (``HATP_CRASH_AT``), then a new coordinator in the test
process opens the same world and the same decision log (SQLite, PostgreSQL),
waits out the dead one's 2 s lease and recovers. Whatever the point: the
outcome follows the logged decision (presumed abort when none was logged),
every participant holds the whole effect or none of it (never a mix, never
twice), and the record continues the chain the child began and verifies offline.
"""

from __future__ import annotations

import pathlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from coordinator.crashkit import Site, check_ended, event_types, open_site, recover
from databases import DATABASES
from hatp._faults import CRASH_ENV
from hatp.demo._child import DECISION_ENV, EDIT_CARD_ENV
from hatp.model import TxnState

COMMITTED, ABORTED = TxnState.COMMITTED, TxnState.ABORTED


@pytest.fixture
def site(tmp_path: pathlib.Path, store_url: str) -> Iterator[Site]:
    """The trip folder; the decision log on SQLite or PostgreSQL."""
    with open_site(tmp_path, store_url) as made:
        yield made


@dataclass(frozen=True)
class Route:
    """One way through the coordinator: how the child is set up and where it ends."""

    name: str
    state: TxnState
    why: str  # what the reason of the logged decision says
    switches: tuple[tuple[str, str], ...] = ()
    rooms: int = 3
    marks: tuple[str, ...] = ()  # events the record must hold besides the usual


COMMIT = Route("commit", COMMITTED, "every branch voted yes")
REJECT = Route("reject", ABORTED, "approval finance", ((DECISION_ENV, "reject"),))
SOLD_OUT = Route("sold-out", ABORTED, "room: ", rooms=0)
# The bank edits the card after the dry run: the final step is refused and the
# calendar entry already made is compensated.
UNWIND = Route(
    "unwind",
    ABORTED,
    "every branch voted yes",
    ((EDIT_CARD_ENV, "4000.00"),),
    marks=("txn.unwinding", "txn.compensated"),
)

#: Every fault point each route passes, in the order the coordinator passes them.
POINTS: list[tuple[Route, str]] = [
    (COMMIT, "log.planned"),
    (COMMIT, "log.decided"),
    *(
        (COMMIT, f"commit.{when}:{branch}")
        for branch in ("calendar", "charge", "seat", "room")  # compensate, final, holds
        for when in ("before", "after")
    ),
    (COMMIT, "log.outcome"),
    *(
        (REJECT, point)
        for point in (
            "log.decided",
            *(f"aborted.after:{b}" for b in ("seat", "room", "calendar", "charge")),  # plan order
            "log.outcome",
        )
    ),
    *(
        (SOLD_OUT, point)
        for point in (
            "log.decided",
            *(f"aborted.after:{b}" for b in ("seat", "room", "calendar", "charge")),
            "log.outcome",
        )
    ),
    *(
        (UNWIND, point)
        for point in (
            "log.unwinding",
            *(f"aborted.after:{b}" for b in ("room", "seat", "charge")),  # reverse commit order
            "compensated.after:calendar",
            "log.outcome",
        )
    ),
]


def expected(route: Route, point: str) -> tuple[TxnState, str]:
    """The state the transaction must end in, and what its decision's reason says."""
    if point == "log.planned":  # killed before any decision was logged
        return ABORTED, "presumed abort"
    return route.state, route.why


#: One point of each route runs in the quick suite, on SQLite; CI runs all of them on both.
QUICK = {
    ("commit", "log.planned"),
    ("commit", "commit.after:charge"),
    ("reject", "aborted.after:room"),
    ("sold-out", "log.decided"),
    ("unwind", "compensated.after:calendar"),
}
SLOW = pytest.mark.slow  # a child start and a lease to wait out, ~2.5 s each
CASES = [
    pytest.param(
        database,
        route,
        point,
        id=f"{database}-{route.name}-{point}",
        marks=[] if database == "sqlite" and (route.name, point) in QUICK else [SLOW],
    )
    for database in DATABASES
    for route, point in POINTS
]


@pytest.mark.parametrize(("store_url", "route", "point"), CASES, indirect=["store_url"])
def test_a_coordinator_killed_at_any_fault_point_is_finished_whole_or_not_at_all_COORD_CRASH(
    site: Site, route: Route, point: str
) -> None:
    world = site.world(rooms=route.rooms)  # stocks the hotel before the child opens it
    site.crash(point, **dict(route.switches))
    log = site.log()
    child_events = log.events(site.txn_id)
    outcome = recover(world, log, site.txn_id)
    state, why = expected(route, point)
    if point == "log.outcome":
        # The outcome was durable before the kill: nothing is left to recover.
        assert outcome is None
        assert "txn.taken-over" not in event_types(log.record(site.txn_id))
    else:
        assert outcome is not None and not outcome.fenced
        assert outcome.state is state, outcome.reason
        assert outcome.record == log.record(site.txn_id)
        assert event_types(outcome.record).count("txn.taken-over") == 1
    record = check_ended(world, log, site.txn_id, state, child_events)
    (decided,) = [e["body"] for e in record["events"] if e["type"] == "txn.decided"]
    assert why in decided["reason"], decided
    assert set(route.marks) <= set(event_types(record))
    if route is UNWIND:
        (unwinding,) = [e["body"] for e in record["events"] if e["type"] == "txn.unwinding"]
        assert (unwinding["branchId"], unwinding["error"]["code"]) == (
            "charge",
            "PRECONDITION_CHANGED",
        )


@pytest.mark.parametrize(
    "store_url", [pytest.param("sqlite"), pytest.param("postgresql", marks=SLOW)], indirect=True
)
def test_a_coordinator_killed_while_recovering_is_recovered_again_COORD_CRASH(site: Site) -> None:
    """Killed mid-commit, then the recovering process killed too: a third one ends it whole."""
    site.crash("commit.after:seat")
    log = site.log()
    child_events = log.events(site.txn_id)
    # A second coordinator process takes over once the lease has ended, and dies in its turn.
    second = site.run("--recover", str(site.folder), **{CRASH_ENV: "commit.after:room"})
    assert second.returncode == -signal.SIGKILL, second.describe()
    assert log.get(site.txn_id).fence == 2  # it did take the transaction over
    assert log.events(site.txn_id) == child_events  # and died before logging anything
    world = site.world()
    outcome = recover(world, log, site.txn_id)
    assert outcome is not None and outcome.state is COMMITTED, outcome
    record = check_ended(world, log, site.txn_id, COMMITTED, child_events)
    (taken,) = [e for e in record["events"] if e["type"] == "txn.taken-over"]
    assert taken["body"]["fence"] == 3
