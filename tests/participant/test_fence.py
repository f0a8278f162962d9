"""A request from a superseded coordinator does nothing [PART-FENCE]."""

from __future__ import annotations

import pytest

from hatp.errors import StaleFence
from hatp.evidence import digest
from hatp.model import BranchState
from hatp.participant import ParticipantServer
from hatp.store import Store
from participant.ops import charge_count, plan, run, seat, seen


def test_stale_fence_prepare_is_refused_and_holds_nothing_PART_FENCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    run(airline.abort("txn-1", "event", 5))  # fence 5 seen for another branch only
    run(airline.prepare(plan(), "seat", 1))
    run(airline.abort("txn-1", "seat", 4))
    with pytest.raises(StaleFence) as caught:
        run(airline.prepare(plan(), "seat", 3))
    assert (caught.value.data["fence"], caught.value.data["current"]) == (3, 4)
    assert seat(ledgers) == ("free", None)


def test_stale_fence_commit_and_abort_do_nothing_PART_FENCE(
    airline: ParticipantServer, ledgers: Store
) -> None:
    p = plan()
    plan_digest = digest(p.to_wire())
    run(airline.prepare(p, "charge", 2))
    run(airline.prepare(p, "seat", 2))
    with pytest.raises(StaleFence):
        run(airline.commit("txn-1", "charge", 1, plan_digest, None))
    with pytest.raises(StaleFence):
        run(airline.abort("txn-1", "seat", 1))
    assert charge_count(ledgers) == 0
    assert seat(ledgers) == ("held", "txn-1/seat")
    assert run(airline.status("txn-1", "charge")).state is BranchState.PREPARED


def test_stale_fence_compensate_undoes_nothing_PART_FENCE(airline: ParticipantServer) -> None:
    p = plan()
    voted = run(airline.prepare(p, "event", 3))
    token = run(airline.commit("txn-1", "event", 3, digest(p.to_wire()), seen(voted)))
    with pytest.raises(StaleFence):
        run(airline.compensate("txn-1", "event", 2, str(token["undoToken"])))
    assert run(airline.status("txn-1", "event")).state is BranchState.COMMITTED


def test_higher_fence_is_remembered_even_on_a_repeat_PART_FENCE(
    airline: ParticipantServer,
) -> None:
    p = plan()
    first = run(airline.prepare(p, "seat", 1))
    assert run(airline.prepare(p, "seat", 7)) == first  # the stored vote, fence 1 inside
    assert run(airline.status("txn-1", "seat")).fence == 7
    with pytest.raises(StaleFence):
        run(airline.commit("txn-1", "seat", 6, digest(p.to_wire()), None))
    receipt = run(airline.commit("txn-1", "seat", 7, digest(p.to_wire()), None))
    assert receipt["fence"] == 7


def test_status_reports_the_highest_fence_seen_PART_FENCE(
    airline: ParticipantServer,
) -> None:
    assert run(airline.status("txn-9", "seat")).fence == 0
    run(airline.abort("txn-9", "seat", 4))
    with pytest.raises(StaleFence):
        run(airline.abort("txn-9", "seat", 3))
    assert run(airline.status("txn-9", "seat")).fence == 4
