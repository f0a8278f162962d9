"""The business-trip world: four real participants driven through the participant SDK.

Every test opens a world in a temporary folder (SQLite stores), drives the
participants exactly as the coordinator would (prepare, commit, abort,
compensate) and checks their ledgers and what each transaction left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from hatp.clock import ManualClock, parse_time
from hatp.demo import (
    AIRLINE,
    CALENDAR,
    COORDINATOR,
    FINANCE_ADDRESS,
    GATEWAY,
    HOTEL,
    PARTICIPANT_IDS,
    PAYMENTS,
    TripWorld,
    trip_plan,
)
from hatp.demo._airline import BookSeat
from hatp.demo._hotel import HoldRoom
from hatp.demo.trip import CARD, LOW_LIMIT_CARD
from hatp.errors import OutcomeConflict, PreconditionChanged
from hatp.evidence import digest, verify
from hatp.model import COMMIT_ORDER, Plan, Preconditions, parse_plan
from hatp.participant import Operation, Prepared, Work

ALL_WHOLE = dict.fromkeys(PARTICIPANT_IDS, "whole")
ALL_NONE = dict.fromkeys(PARTICIPANT_IDS, "none")


@pytest.fixture
def urls(store_url: str) -> dict[str, str] | None:
    """Where the stores live: a SQLite file each (the default), or one PostgreSQL schema."""
    return None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)


@pytest.fixture
def world(tmp_path: Path, clock: ManualClock, urls: dict[str, str] | None) -> Iterator[TripWorld]:
    with TripWorld.open(tmp_path / "trip", clock, store_urls=urls) as opened:
        yield opened


class Trip:
    """One transaction on the world, driven branch by branch at fence 1."""

    def __init__(self, world: TripWorld, txn_id: str, **options: Any) -> None:
        self.world = world
        decide_by = world.clock.now() + timedelta(hours=1)
        self.plan: Plan = parse_plan(trip_plan(txn_id, decide_by=decide_by, **options))
        self.digest = digest(self.plan.to_wire())
        self.prepared: dict[str, dict[str, Any]] = {}
        self.committed: dict[str, dict[str, Any]] = {}

    def server(self, branch_id: str) -> Any:
        return self.world.participants[self.plan.branch(branch_id).participant]

    def prepare(self, branch_id: str) -> dict[str, Any]:
        receipt: dict[str, Any] = asyncio.run(
            self.server(branch_id).prepare(self.plan, branch_id, 1)
        )
        self.prepared[branch_id] = receipt
        return receipt

    def commit(self, branch_id: str) -> dict[str, Any]:
        seen = self.prepared[branch_id].get("preconditions")
        preconditions = None if seen is None else Preconditions.model_validate(seen)
        receipt: dict[str, Any] = asyncio.run(
            self.server(branch_id).commit(
                self.plan.txn_id, branch_id, 1, self.digest, preconditions
            )
        )
        self.committed[branch_id] = receipt
        return receipt

    def abort(self, branch_id: str) -> dict[str, Any]:
        return dict(asyncio.run(self.server(branch_id).abort(self.plan.txn_id, branch_id, 1)))

    def compensate(self, branch_id: str) -> dict[str, Any]:
        token = self.committed[branch_id]["undoToken"]
        return dict(
            asyncio.run(self.server(branch_id).compensate(self.plan.txn_id, branch_id, 1, token))
        )

    def prepare_all(self) -> None:
        for branch in self.plan.branches:
            assert self.prepare(branch.branch_id)["vote"] == "yes", self.prepared

    def commit_all(self) -> None:
        for tier in COMMIT_ORDER:
            for branch in self.plan.branches:
                if branch.tier is tier:
                    assert self.commit(branch.branch_id)["outcome"] == "committed"


def kinds(world: TripWorld, participant: str, txn_id: str | None = None) -> list[str]:
    return [line.kind for line in world.ledger(participant) if line.txn_id == txn_id]


def run_sql(world: TripWorld, participant: str, sql: str, **params: Any) -> None:
    with world.stores[participant].transaction() as conn:
        conn.execute(text(sql), params)


# -- the plan --------------------------------------------------------------------------------


def test_trip_plan_parses_with_four_branches_and_one_finance_approval(clock: ManualClock) -> None:
    plan = parse_plan(trip_plan("txn-plan", decide_by=clock.now() + timedelta(hours=1)))
    assert [(b.branch_id, b.participant, b.operation, b.tier.value) for b in plan.branches] == [
        ("seat", AIRLINE, "book_seat", "hold"),
        ("room", HOTEL, "hold_room", "hold"),
        ("calendar", CALENDAR, "add_event", "compensate"),
        ("charge", PAYMENTS, "charge", "final"),
    ]
    amounts = {b.branch_id: None if b.amount is None else str(b.amount) for b in plan.branches}
    assert amounts == {
        "seat": "420.00 USD",
        "room": "310.00 USD",
        "calendar": None,
        "charge": "730.00 USD",
    }
    assert plan.branch("charge").settles == ["seat", "room"]
    assert plan.totals() == {"USD": Decimal("730.00")}  # seat and room are paid by the charge
    (group,) = plan.approvals
    assert (group.group_id, group.address, group.requirement.action) == (
        "finance",
        FINANCE_ADDRESS,
        "approve.spend",
    )
    assert group.requirement.tolerance == "0"
    assert plan.on_behalf_of == "human://acme.com/alice"
    assert plan.agent_text is not None and "730.00 USD" in plan.agent_text.summary


# -- the whole trip, and none of it ----------------------------------------------------------


def test_committing_every_branch_leaves_the_whole_trip_PART_SIGNED(world: TripWorld) -> None:
    trip = Trip(world, "txn-whole")
    trip.prepare_all()
    trip.commit_all()
    assert world.effects("txn-whole") == ALL_WHOLE
    assert kinds(world, AIRLINE, "txn-whole") == ["held", "ticketed"]
    assert kinds(world, HOTEL, "txn-whole") == ["held", "booked"]
    assert kinds(world, CALENDAR, "txn-whole") == ["added"]
    assert kinds(world, PAYMENTS, "txn-whole") == ["authorized", "captured"]
    for branch_id, receipt in {**trip.prepared, **trip.committed}.items():
        assert verify(receipt, world.keyring).issuer == trip.plan.branch(branch_id).participant
    assert trip.prepared["seat"]["cost"] == {"value": "420.00", "currency": "USD"}
    assert trip.prepared["room"]["cost"] == {"value": "310.00", "currency": "USD"}
    assert trip.prepared["charge"]["cost"] == {"value": "730.00", "currency": "USD"}
    assert trip.committed["calendar"]["undoToken"]


def test_aborting_every_branch_leaves_nothing_and_frees_the_inventory(world: TripWorld) -> None:
    trip = Trip(world, "txn-abort")
    trip.prepare_all()
    for branch in trip.plan.branches:
        assert trip.abort(branch.branch_id)["outcome"] == "aborted"
    assert world.effects("txn-abort") == ALL_NONE
    assert kinds(world, AIRLINE, "txn-abort") == ["held", "released"]
    assert kinds(world, HOTEL, "txn-abort") == ["held", "released"]
    assert kinds(world, CALENDAR, "txn-abort") == []  # a dry run placed nothing
    assert kinds(world, PAYMENTS, "txn-abort") == ["authorized", "voided"]
    # The seat is free and the credit back: the same trip can be held again.
    again = Trip(world, "txn-again")
    again.prepare_all()


def test_a_compensated_event_leaves_nothing_PART_UNDO(world: TripWorld) -> None:
    trip = Trip(world, "txn-undo")
    trip.prepare("calendar")
    trip.commit("calendar")
    assert world.effects("txn-undo")[CALENDAR] == "whole"
    assert trip.compensate("calendar")["outcome"] == "compensated"
    assert world.effects("txn-undo")[CALENDAR] == "none"
    assert kinds(world, CALENDAR, "txn-undo") == ["added", "removed"]
    details = [line.detail for line in world.ledger(CALENDAR)]
    assert details[-1].endswith("(version 2)")  # the add and the removal both bumped it


def test_a_transaction_that_never_happened_left_nothing(world: TripWorld) -> None:
    assert world.effects("txn-never") == ALL_NONE


def test_ledger_lines_carry_participant_branch_and_clock_time(
    world: TripWorld, clock: ManualClock
) -> None:
    trip = Trip(world, "txn-lines")
    trip.prepare("seat")
    clock.advance(60)
    trip.commit("seat")
    held, ticketed = world.ledger(AIRLINE)
    assert (held.participant, held.txn_id, held.branch_id) == (AIRLINE, "txn-lines", "seat")
    assert held.detail == "seat 14C on LH400, fare Y"
    assert ticketed.time - held.time == timedelta(seconds=60)
    assert held.time == clock.now() - timedelta(seconds=60)


# -- holds -----------------------------------------------------------------------------------


def test_airline_hold_lease_is_20_minutes_within_a_30_minute_horizon_PART_HOLD(
    world: TripWorld, clock: ManualClock
) -> None:
    receipt = Trip(world, "txn-lease").prepare("seat")
    assert parse_time(receipt["leaseExpiresAt"]) == clock.now() + timedelta(seconds=1200)
    assert parse_time(receipt["holdHorizon"]) == clock.now() + timedelta(seconds=1800)


def test_an_expired_seat_hold_is_swept_back_to_free_PART_HOLD(
    world: TripWorld, clock: ManualClock
) -> None:
    Trip(world, "txn-expire").prepare("seat")
    clock.advance(1201)
    swept = asyncio.run(world.participants[AIRLINE].sweep())
    assert swept == [("txn-expire", "seat")]
    assert kinds(world, AIRLINE, "txn-expire") == ["held", "released"]
    assert world.effects("txn-expire")[AIRLINE] == "none"
    assert Trip(world, "txn-next").prepare("seat")["vote"] == "yes"


# -- refusals --------------------------------------------------------------------------------


def test_a_sold_out_flight_refuses_the_seat(
    tmp_path: Path, clock: ManualClock, urls: dict[str, str] | None
) -> None:
    with TripWorld.open(tmp_path / "full", clock, seats_free=False, store_urls=urls) as world:
        receipt = Trip(world, "txn-full").prepare("seat")
        assert receipt["vote"] == "no"
        assert receipt["reason"].startswith("SOLD_OUT: seat 14C on LH400 is taken")
        assert world.ledger(AIRLINE) == []
        assert world.effects("txn-full") == ALL_NONE


def test_a_seat_held_by_another_transaction_is_sold_out(world: TripWorld) -> None:
    assert Trip(world, "txn-first").prepare("seat")["vote"] == "yes"
    second = Trip(world, "txn-second").prepare("seat")
    assert (second["vote"], second["reason"].split(":")[0]) == ("no", "SOLD_OUT")
    assert Trip(world, "txn-other-seat", seat="15A").prepare("seat")["vote"] == "yes"


def test_the_last_room_goes_to_one_transaction_only(
    tmp_path: Path, clock: ManualClock, urls: dict[str, str] | None
) -> None:
    with TripWorld.open(tmp_path / "small", clock, rooms=1, store_urls=urls) as world:
        first = Trip(world, "txn-r1")
        assert first.prepare("room")["vote"] == "yes"
        refused = Trip(world, "txn-r2").prepare("room")
        assert refused["vote"] == "no"
        assert refused["reason"] == (
            "SOLD_OUT: midtown-lodge has no room free on 2026-12-14, 2026-12-15"
        )
        first.abort("room")
        assert Trip(world, "txn-r3").prepare("room")["vote"] == "yes"
        assert world.effects("txn-r2")[HOTEL] == "none"


def test_a_stay_with_one_full_night_is_refused_and_takes_none_of_its_nights(
    tmp_path: Path, clock: ManualClock, urls: dict[str, str] | None
) -> None:
    with TripWorld.open(tmp_path / "small", clock, rooms=1, store_urls=urls) as world:
        assert Trip(world, "txn-r1").prepare("room")["vote"] == "yes"  # the 14th and 15th
        longer = Trip(world, "txn-r2")
        longer.plan = parse_plan(
            _edited("room", checkIn="2026-12-15", nights=3)(longer.plan.to_wire())
        )
        refused = longer.prepare("room")
        assert refused["reason"] == "SOLD_OUT: midtown-lodge has no room free on 2026-12-15"
        # The 16th and 17th, taken by the refused UPDATE, were given back with the refusal.
        after = Trip(world, "txn-r3")
        after.plan = parse_plan(_edited("room", checkIn="2026-12-16")(after.plan.to_wire()))
        assert after.prepare("room")["vote"] == "yes"
        assert world.effects("txn-r2")[HOTEL] == "none"


@pytest.mark.parametrize(("branch_id", "operation"), [("seat", BookSeat), ("room", HoldRoom)])
def test_a_hold_committed_without_the_cost_its_prepare_reported_is_refused(
    world: TripWorld, branch_id: str, operation: type[Operation]
) -> None:
    trip = Trip(world, f"txn-{branch_id}-uncosted")
    assert trip.prepare(branch_id)["vote"] == "yes"
    participant = trip.plan.branch(branch_id).participant
    with (
        pytest.raises(OutcomeConflict) as refused,
        world.stores[participant].transaction() as conn,
    ):
        work = Work(
            conn,
            participant,
            trip.plan.txn_id,
            trip.plan.branch(branch_id),
            trip.plan,
            trip.digest,
            world.clock.now(),
            Prepared(),
        )
        operation().commit(work)
    assert refused.value.data["requested"] == "commit"
    assert "holds no cost from its prepare" in refused.value.message
    # Nothing of the refused commit was kept: the hold is still there to commit.
    assert trip.commit(branch_id)["outcome"] == "committed"


def test_a_card_without_the_credit_declines_the_charge(world: TripWorld) -> None:
    receipt = Trip(world, "txn-low", card=LOW_LIMIT_CARD).prepare("charge")
    assert receipt["vote"] == "no"
    assert receipt["reason"] == "DECLINED: card corp-0005 has 500.00 USD available"
    assert world.ledger(PAYMENTS) == []


def test_a_seat_dearer_than_the_plan_says_votes_no_and_is_released_PART_COST(
    world: TripWorld,
) -> None:
    receipt = Trip(world, "txn-dear", seat="2A").prepare("seat")  # business: 2140.00 USD
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("COST_UNDERSTATED")
    assert world.effects("txn-dear")[AIRLINE] == "none"
    assert (
        Trip(world, "txn-dear-2", seat="2A")
        .prepare("seat")["reason"]
        .startswith("COST_UNDERSTATED")
    )  # the seat was not left held


def _edited(branch_id: str, **args: Any) -> Any:
    def edit(doc: dict[str, Any]) -> dict[str, Any]:
        for branch in doc["branches"]:
            if branch["branchId"] == branch_id:
                branch["args"] = {**branch["args"], **args}
        return doc

    return edit


@pytest.mark.parametrize(
    ("branch_id", "args", "reason"),
    [
        ("seat", {"seat": "99Z"}, "NO_SUCH_SEAT"),
        ("seat", {"flight": 400}, "BAD_ARGS"),
        ("room", {"hotel": "nowhere-inn"}, "NO_SUCH_HOTEL"),
        ("room", {"nights": "two"}, "BAD_ARGS"),
        ("room", {"nights": 0}, "BAD_ARGS"),
        ("room", {"checkIn": "14/12/2026"}, "BAD_ARGS"),
        ("room", {"checkIn": "2027-06-01"}, "SOLD_OUT"),  # not on sale yet
        ("calendar", {"title": ""}, "BAD_ARGS"),
        ("charge", {"card": "corp-9999"}, "UNKNOWN_CARD"),
        ("charge", {"amount": {"value": "730.00", "currency": "EUR"}}, "DECLINED"),
        ("charge", {"amount": 730}, "BAD_ARGS"),
    ],
)
def test_bad_or_unservable_arguments_are_refused(
    world: TripWorld, branch_id: str, args: dict[str, Any], reason: str
) -> None:
    trip = Trip(world, "txn-args")
    trip.plan = parse_plan(_edited(branch_id, **args)(trip.plan.to_wire()))
    trip.digest = digest(trip.plan.to_wire())
    receipt = trip.prepare(branch_id)
    assert receipt["vote"] == "no"
    assert receipt["reason"].split(":")[0] == reason
    assert world.effects("txn-args") == ALL_NONE


# -- preconditions ---------------------------------------------------------------------------


def test_a_calendar_edited_after_the_dry_run_refuses_the_commit_PART_PRECONDITION(
    world: TripWorld,
) -> None:
    trip = Trip(world, "txn-cal")
    receipt = trip.prepare("calendar")
    owner = "human://acme.com/alice"
    assert receipt["preconditions"] == {
        "versions": {f"calendar:{owner}": "0"},
        "scope": f"calendar.write:{owner}",
    }
    assert world.edit_calendar(owner) == 1
    with pytest.raises(PreconditionChanged) as caught:
        trip.commit("calendar")
    assert f"calendar:{owner}" in caught.value.data["changed"]
    assert kinds(world, CALENDAR, "txn-cal") == []
    assert world.effects("txn-cal")[CALENDAR] == "none"
    assert [line.kind for line in world.ledger(CALENDAR)] == ["edited"]


def test_a_card_changed_after_authorization_refuses_the_capture_PART_PRECONDITION(
    world: TripWorld,
) -> None:
    trip = Trip(world, "txn-card")
    receipt = trip.prepare("charge")
    assert receipt["preconditions"] == {
        "versions": {f"card:{CARD}": "1"},
        "scope": f"charge:{CARD}",
    }
    assert world.edit_card(CARD, "9000.00") == 2
    with pytest.raises(PreconditionChanged):
        trip.commit("charge")
    trip.abort("charge")
    assert kinds(world, PAYMENTS, "txn-card") == ["authorized", "voided"]
    assert world.effects("txn-card")[PAYMENTS] == "none"


def test_editing_an_unknown_card_is_refused(world: TripWorld) -> None:
    with pytest.raises(KeyError):
        world.edit_card("corp-9999", "1.00")


# -- broken effects, planted by hand on the tables -------------------------------------------


def test_a_ticketed_seat_freed_behind_the_ledger_is_broken(world: TripWorld) -> None:
    trip = Trip(world, "txn-b1")
    trip.prepare("seat")
    trip.commit("seat")
    run_sql(
        world, AIRLINE, "UPDATE airline_seats SET status = 'free' WHERE txn_id = :t", t="txn-b1"
    )
    assert world.effects("txn-b1")[AIRLINE].startswith(
        "broken: the ledger says ticketed but the seats show"
    )


def test_a_charge_captured_twice_is_broken(world: TripWorld) -> None:
    trip = Trip(world, "txn-b2")
    trip.prepare("charge")
    trip.commit("charge")
    run_sql(
        world,
        PAYMENTS,
        "INSERT INTO payments_ledger (participant, txn_id, branch_id, kind, detail, time_ms) "
        "VALUES (:p, 'txn-b2', 'charge', 'captured', 'again', 0)",
        p=PAYMENTS,
    )
    assert world.effects("txn-b2")[PAYMENTS] == "broken: captured 2 times"


def test_a_hold_left_in_place_is_broken(world: TripWorld) -> None:
    trip = Trip(world, "txn-b3")
    trip.prepare("room")
    trip.prepare("charge")
    effects = world.effects("txn-b3")
    assert effects[HOTEL] == "broken: reservation held with nothing booked in the ledger"
    assert effects[PAYMENTS].startswith("broken: an authorization is still open")


def test_an_event_back_after_its_removal_is_broken(world: TripWorld) -> None:
    trip = Trip(world, "txn-b4")
    trip.prepare("calendar")
    trip.commit("calendar")
    trip.compensate("calendar")
    run_sql(
        world,
        CALENDAR,
        "INSERT INTO calendar_events (event_id, owner, txn_id, branch_id, title, starts, ends) "
        "VALUES ('evt-planted', 'x', 'txn-b4', 'calendar', 't', 's', 'e')",
    )
    assert world.effects("txn-b4")[CALENDAR] == (
        "broken: the ledger leaves 0 event(s) but the calendar shows 1"
    )


def test_a_room_booked_and_released_is_broken(world: TripWorld) -> None:
    trip = Trip(world, "txn-b5")
    trip.prepare("room")
    trip.commit("room")
    run_sql(
        world,
        HOTEL,
        "INSERT INTO hotel_ledger (participant, txn_id, branch_id, kind, detail, time_ms) "
        "VALUES (:p, 'txn-b5', 'room', 'released', 'planted', 0)",
        p=HOTEL,
    )
    assert world.effects("txn-b5")[HOTEL] == "broken: booked and also released"


# -- opening and reopening -------------------------------------------------------------------


def test_reopening_the_folder_reuses_keys_and_keeps_inventory_and_ledgers(
    tmp_path: Path, clock: ManualClock, urls: dict[str, str] | None
) -> None:
    folder = tmp_path / "trip"
    with TripWorld.open(folder, clock, store_urls=urls) as first:
        publics = {holder: key.public.raw for holder, key in first.keys.items()}
        Trip(first, "txn-keep").prepare("seat")
    with TripWorld.open(folder, clock, rooms=0, seats_free=False, store_urls=urls) as second:
        assert {holder: key.public.raw for holder, key in second.keys.items()} == publics
        assert kinds(second, AIRLINE, "txn-keep") == ["held"]
        # Not restocked: 14C is still held by txn-keep, and 15A still free.
        assert Trip(second, "txn-other").prepare("seat")["reason"].startswith("SOLD_OUT")
        assert Trip(second, "txn-15a", seat="15A").prepare("seat")["vote"] == "yes"
        assert Trip(second, "txn-room").prepare("room")["vote"] == "yes"  # still 3 a night
    assert sorted(p.name for p in (folder / "keys").iterdir()) == [
        "airline.jwk",
        "calendar.jwk",
        "coordinator.jwk",
        "directory.jwk",
        "gateway.jwk",
        "hotel.jwk",
        "payments.jwk",
        "people",
    ]


def test_the_keyring_trusts_every_party_under_its_own_issuer(world: TripWorld) -> None:
    expected = {*PARTICIPANT_IDS, COORDINATOR, GATEWAY, "https://directory.acme.com"}
    issuers = {entry["issuer"] for entry in world.keyring.to_json()["keys"]}
    assert issuers == expected
    assert set(world.keyring.to_json()["trustedIssuers"]) == expected
    assert set(world.keys) == {*PARTICIPANT_IDS, "coordinator", "gateway"}
    assert world.participant_ids == (AIRLINE, HOTEL, CALENDAR, PAYMENTS)
    assert set(world.participants) == set(PARTICIPANT_IDS)


def test_unknown_participants_are_refused(tmp_path: Path, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="unknown participants"):
        TripWorld.open(tmp_path / "x", clock, store_urls={"mcp://bank.example": "sqlite://"})
    with pytest.raises(ValueError, match="negative"):
        TripWorld.open(tmp_path / "x", clock, rooms=-1)
    with TripWorld.open(tmp_path / "y", clock) as world, pytest.raises(ValueError):
        world.ledger("mcp://bank.example")


def test_racing_transactions_get_one_seat_one_yes(world: TripWorld) -> None:
    trips = [Trip(world, f"txn-race-{n}") for n in range(6)]
    with ThreadPoolExecutor(max_workers=len(trips)) as pool:
        votes = list(pool.map(lambda trip: trip.prepare("seat")["vote"], trips))
    assert sorted(votes) == ["no"] * 5 + ["yes"]
    assert sum(kinds(world, AIRLINE, t.plan.txn_id) == ["held"] for t in trips) == 1


def test_the_package_exports_only_what_it_names() -> None:
    import hatp.demo

    for name in hatp.demo.__all__:
        assert hasattr(hatp.demo, name), name
    public = {n for n in dir(hatp.demo) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(hatp.demo, n), type(hatp.demo))}
    assert public - modules == set(hatp.demo.__all__)
