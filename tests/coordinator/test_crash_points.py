"""The fault points inside phase 1, after the phase-2 log writes and inside participants
[COORD-CRASH].

Each test runs the trip in a coordinator child process (its participants in
process with it) that SIGKILLs itself at one fault point, then recovers in
the test process, as ``test_crash.py`` does for the points of the plain
routes. These are the points those routes do not pass: a branch prepared
and nothing decided; a final step in doubt (``log.in-doubt``), answered
after all (``log.committing``), or escalated to a person
(``log.escalated``), which needs a participant that does not answer
(``HATP_CHILD_FAULTS``, :mod:`hatp.demo._faulty`); and a participant's own
call with its work written and not yet committed (``participant.<call>.staged``)
or committed and not yet answered (``participant.<call>.done``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.crashkit import Site, check_ended, event_types, open_site, per_database, recover
from hatp.demo._child import DECISION_ENV, FAULTS_ENV
from hatp.model import TxnState

COMMITTED, ABORTED = TxnState.COMMITTED, TxnState.ABORTED
#: The escalation lead is longer than any hold lasts: an in-doubt final step escalates at once.
ESCALATE_AT_ONCE = {"escalation": {"address": None, "leadSeconds": 3600}}


@pytest.fixture
def site(tmp_path: pathlib.Path, store_url: str) -> Iterator[Site]:
    """The trip folder; the decision log on SQLite or PostgreSQL."""
    with open_site(tmp_path, store_url) as made:
        yield made


#: (point, switches, extra plan members, the state it ends in, events the record must hold)
CASES: list[tuple[str, dict[str, str], dict[str, Any] | None, TxnState, tuple[str, ...]]] = [
    *(
        (f"prepared.after:{branch}", {}, None, ABORTED, ())
        for branch in ("seat", "room", "calendar", "charge")
    ),
    # The capture goes unanswered once: in doubt, logged, then killed.
    (
        "log.in-doubt",
        {FAULTS_ENV: "payments.commit=unreachable*1"},
        None,
        COMMITTED,
        ("txn.in-doubt",),
    ),
    # The capture took effect and its reply was lost; the resend answers; killed after that write.
    (
        "log.committing",
        {FAULTS_ENV: "payments.commit=lost-reply*1"},
        None,
        COMMITTED,
        ("txn.in-doubt",),
    ),
    # In doubt, and a person brought in at once: killed after the escalation is logged.
    (
        "log.escalated",
        {FAULTS_ENV: "payments.commit=unreachable*1"},
        ESCALATE_AT_ONCE,
        COMMITTED,
        ("txn.in-doubt", "txn.escalated"),
    ),
    # Inside a participant (in process with the coordinator: both die).
    ("participant.prepare.staged", {}, None, ABORTED, ()),
    ("participant.prepare.done", {}, None, ABORTED, ()),
    ("participant.commit.staged", {}, None, COMMITTED, ()),
    ("participant.commit.done", {}, None, COMMITTED, ()),
    ("participant.abort.staged", {DECISION_ENV: "reject"}, None, ABORTED, ()),
    ("participant.abort.done", {DECISION_ENV: "reject"}, None, ABORTED, ()),
]
#: One of each kind in the quick suite, on SQLite; CI runs every one on both.
QUICK = {"prepared.after:room", "log.in-doubt", "log.escalated", "participant.commit.done"}


@pytest.mark.parametrize(
    ("store_url", "point", "switches", "extra", "state", "marks"),
    per_database(CASES, QUICK),
    indirect=["store_url"],
)
def test_a_coordinator_killed_at_a_phase_one_in_doubt_or_participant_point_is_finished_COORD_CRASH(
    site: Site,
    point: str,
    switches: dict[str, str],
    extra: dict[str, Any] | None,
    state: TxnState,
    marks: tuple[str, ...],
) -> None:
    world = site.world()
    site.crash(point, extra=extra, **switches)
    log = site.log()
    child_events = log.events(site.txn_id)
    logged = log.get(site.txn_id).state
    outcome = recover(world, log, site.txn_id)
    assert outcome is not None and not outcome.fenced
    assert outcome.state is state, outcome.reason
    record = check_ended(world, log, site.txn_id, state, child_events)
    assert set(marks) <= set(event_types(child_events_record(child_events)))
    assert event_types(record).count("txn.taken-over") == 1
    if point.startswith(("prepared.", "participant.prepare.")):
        # Killed with a vote in and nothing decided: only the plan was durable.
        assert (logged, event_types(child_events_record(child_events))) == (
            TxnState.ACTIVE,
            ["txn.planned"],
        )
        (decided,) = [e["body"] for e in record["events"] if e["type"] == "txn.decided"]
        assert decided["reason"].startswith("presumed abort")


def child_events_record(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The events the dead child made durable, shaped as a record for :func:`event_types`."""
    return {"events": events}
