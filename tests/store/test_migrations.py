"""[STORE-SCHEMA] the store's schema revisions: a database changes schema without losing a
row, and a store refuses a database at a revision it does not run on.

hatp's own revisions are ``0001`` (the baseline), ``0002`` (adds ``hatp_gate_ask``),
``0003`` (adds ``hatp_outbox``) and ``0004`` (adds ``hatp_undo_claim`` and
``hatp_branch.undone_by``).
After them comes the tests' own (``revisions/t0003_txn_note.py``): it copies
``hatp_txn`` (SQLite's batch mode) and adds an index to ``hatp_ask``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.pool import NullPool

import hatp.store
from hatp.clock import ManualClock
from hatp.demo import GATEWAY, PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.errors import SchemaMismatch, StoreUnavailable
from hatp.gateway import HumanGateway
from hatp.model import BranchState, TxnState
from hatp.store import (
    AskStore,
    BranchStore,
    ChallengePurpose,
    DecisionLog,
    Found,
    GateAsks,
    LeaseBook,
    Migrations,
    Outbox,
    OutboxRow,
    UsedApprovals,
    WebBook,
    open_store,
    schema_status,
    upgrade_store,
)
from racing import race

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
WITH_T0003_DIRS = (Path(__file__).with_name("revisions"),)
WITH_T0003 = Migrations(*WITH_T0003_DIRS)
HEAD = "0004"
BASELINE_TABLES = 14
HEAD_TABLES = BASELINE_TABLES + 3  # 0002: hatp_gate_ask; 0003: hatp_outbox; 0004: hatp_undo_claim
GATE_CALL = {
    "server": "s",
    "call_digest": "sha256:c",
    "agent": "agent://acme.com/bot",
    "on_behalf_of": "human://acme.com/dana",
}
CALENDAR = "mcp://calendar.example"
UNDO_PLAN = {"hatpVersion": "0.1", "planId": "undo-1", "branches": [{"id": "calendar"}]}
UNDO_CALENDAR = ("trip-1", ["calendar"])


@pytest.fixture
def engine(store_url: str) -> Iterator[sa.Engine]:
    """A plain engine on the test's database, to look at it as hatp would not."""
    plain = sa.create_engine(store_url, poolclass=NullPool)
    yield plain
    plain.dispose()


def fill(url: str, folder: Path) -> None:
    """Fill every kind of state the store holds, through the public API: a trip run to
    commit (the log, the gateway's asks, and each participant's branch, the participants
    keeping theirs in the same database), an undo of its calendar step logged with its
    claim and marked on the calendar's branch, a used approval, web-book rows, leases, a
    tool server's gate ask, and a notice in the gateway's outbox."""
    clock = ManualClock(NOW)
    store = open_store(url)
    world = TripWorld.open(folder, clock, store_urls=dict.fromkeys(PARTICIPANT_IDS, url))
    try:

        async def book() -> TxnState:
            people = world.scripted_people("approve")
            gateway = HumanGateway(
                GATEWAY, world.keys["gateway"], world.directory, AskStore(store), [people], clock
            )
            coordinator = world.coordinator(DecisionLog(store), gateway)
            plan = trip_plan("trip-1", decide_by=NOW + timedelta(minutes=15))
            return (await coordinator.run(plan)).state

        assert asyncio.run(book()) is TxnState.COMMITTED
        DecisionLog(store).create(
            "undo-1", UNDO_PLAN, "sha-256:u", "coord-a", NOW, 30, [], claims=UNDO_CALENDAR
        )
        branches = BranchStore(store)
        with store.transaction() as conn:
            step = branches.lock(conn, CALENDAR, "trip-1", "calendar")
            branches.save(conn, replace(step, undone_by="undo-1/calendar"), locked=step)
        later = NOW + timedelta(hours=1)
        UsedApprovals(store).claim(
            "apv-1", server="s", tool="t", call_digest="sha-256:c", expires_at=later, now=NOW
        )
        web = WebBook(store)
        web.issue_challenge("ch-1", ChallengePurpose.SIGN_IN, "", later)
        web.invite("inv-1", "human://acme.com/alice", expires_at=later, now=NOW)
        leases = LeaseBook(store)
        leases.mark_escrow_told("lease-1", at=1)
        leases.add_rejection({"resource": "r", "leaseId": None, "reason": "SHAPE"}, at=2)
        GateAsks(store).start(tool="t", decide_by=later, now=NOW, **GATE_CALL)
        notice = OutboxRow("ntc_1", "ask-1", "human://acme.com/alice", "email", "ask", {"n": 1})
        with store.driver_session() as session:
            Outbox.add(session, [notice], NOW)
        Outbox(store).retry("ntc_1", NOW, later, "CONNECT: down")
    finally:
        world.close()
        store.close()


def contents(engine: sa.Engine, *, baseline: bool = False) -> dict[str, tuple[int, str]]:
    """Each table's row count and a digest of its rows, in key order: the head's tables
    (the code's columns), or with ``baseline`` the baseline's (its columns)."""
    if baseline:
        tables = hatp.store.Migrations().baseline.sorted_tables
    else:
        tables = hatp.store._schema.metadata.sorted_tables
    found: dict[str, tuple[int, str]] = {}
    with engine.connect() as conn:
        for table in tables:
            query = sa.select(*table.columns).order_by(*table.primary_key.columns)
            rows = conn.execute(query).all()
            text = "\n".join(repr(tuple(row)) for row in rows)
            found[table.name] = (len(rows), hashlib.sha256(text.encode()).hexdigest())
    return found


def test_a_revision_copying_a_table_keeps_every_row_STORE_SCHEMA(
    store_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """[STORE-SCHEMA] a database at hatp's head, filled through the public API, upgraded
    to a revision that copies hatp_txn: every row of every table is still there, equal."""
    fill(store_url, tmp_path / "world")
    before = contents(engine)
    assert before["hatp_txn"][0] == 2  # the trip and its undo
    assert before["hatp_record_event"][0] > 3
    assert before["hatp_ask"][0] >= 1
    assert before["hatp_branch"][0] == len(PARTICIPANT_IDS)
    assert before["hatp_gate_ask"][0] == 1
    assert before["hatp_outbox"][0] == 1
    assert before["hatp_undo_claim"][0] == 1
    assert sum(count for count, _ in before.values()) > 10

    status = upgrade_store(store_url, migrations=WITH_T0003)

    assert (status.found, status.before, status.after) == (Found.BEHIND, HEAD, "t0003")
    assert contents(engine) == before
    columns = {c["name"] for c in sa.inspect(engine).get_columns("hatp_txn")}
    assert "note" in columns
    opened = open_store(store_url, migrations=WITH_T0003)
    try:
        assert DecisionLog(opened).get("trip-1").state is TxnState.COMMITTED
    finally:
        opened.close()


def test_0002_adds_gate_asks_to_a_filled_database_at_0001_keeping_every_row_STORE_SCHEMA(
    store_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """[STORE-SCHEMA] [STORE-GATE-ASK-ONE] a filled database taken back to 0001 (0002's
    downgrade drops hatp_gate_ask) is refused as BEHIND; ``upgrade_store`` brings it to
    0002 with every row of every baseline table equal, the new table as the code declares
    it, and gate asks working."""
    fill(store_url, tmp_path / "world")
    with engine.begin() as conn:
        command.downgrade(Migrations().config(conn), "0001")
    assert "hatp_gate_ask" not in sa.inspect(engine).get_table_names()
    before = contents(engine, baseline=True)
    assert sum(count for count, _ in before.values()) > 10
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert refused.value.code == "SCHEMA_MISMATCH"
    assert refused.value.reason == "BEHIND"
    assert (refused.value.data["revision"], refused.value.data["head"]) == ("0001", HEAD)

    status = upgrade_store(store_url)

    assert (status.found, status.before, status.after) == (Found.BEHIND, "0001", HEAD)
    assert contents(engine, baseline=True) == before
    assert len(hatp_tables(engine)) == HEAD_TABLES + 1
    assert schema_diffs(engine) == []
    opened = open_store(store_url)
    try:
        assert DecisionLog(opened).get("trip-1").state is TxnState.COMMITTED
        asks = GateAsks(opened)
        ask = asks.start(tool="t", decide_by=NOW, now=NOW, **GATE_CALL)
        assert (ask.seq, ask.open) == (1, True)
        assert asks.current(**GATE_CALL) == ask
    finally:
        opened.close()


def test_0003_adds_the_outbox_to_a_filled_database_at_0002_keeping_every_row_STORE_SCHEMA(
    store_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """[STORE-SCHEMA] [OUTBOX] a filled database taken back to 0002 (0003's downgrade drops
    hatp_outbox) is refused as BEHIND; ``upgrade_store`` brings it to 0003 with every row
    of every other table equal, the outbox as the code declares it, and working."""
    fill(store_url, tmp_path / "world")
    with engine.begin() as conn:
        command.downgrade(Migrations().config(conn), "0002")
    assert "hatp_outbox" not in sa.inspect(engine).get_table_names()
    dropped = ("hatp_outbox", "hatp_undo_claim", "hatp_branch.undone_by")  # by 0003 and 0004
    before = contents_at(engine, *dropped)
    assert before["hatp_gate_ask"][0] == 1
    assert before["hatp_branch"][0] == len(PARTICIPANT_IDS)
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert (refused.value.reason, refused.value.data["revision"]) == ("BEHIND", "0002")

    status = upgrade_store(store_url)

    assert (status.found, status.before, status.after) == (Found.BEHIND, "0002", HEAD)
    assert contents_at(engine, *dropped) == before
    assert schema_diffs(engine) == []
    opened = open_store(store_url)
    try:
        notice = OutboxRow("ntc_2", "ask-2", "human://acme.com/bob", "webhook", "ask", {})
        with opened.driver_session() as session:
            Outbox.add(session, [notice], NOW)
        (claimed,) = Outbox(opened).claim(NOW, NOW + timedelta(seconds=30), 5)
        assert (claimed.notice_id, claimed.attempts) == ("ntc_2", 1)
    finally:
        opened.close()


def test_0004_adds_the_undo_journal_to_a_filled_database_at_0003_keeping_every_row_STORE_SCHEMA(
    store_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """[STORE-SCHEMA] [UNDO-CLAIM] a filled database (an undo's claim and the branch it
    marked among its rows) taken back to 0003 (0004's downgrade drops hatp_undo_claim and
    hatp_branch.undone_by) is refused as BEHIND; ``upgrade_store`` brings it to 0004 with
    every row of every other table equal, every branch row equal but for ``undone_by``,
    null in each, and the journal as the code declares it, and working."""
    fill(store_url, tmp_path / "world")
    marked = {step: by for step, by in undone_by(engine).items() if by is not None}
    assert marked == {("trip-1", "calendar"): "undo-1/calendar"}
    with engine.begin() as conn:
        command.downgrade(Migrations().config(conn), "0003")
    assert "hatp_undo_claim" not in sa.inspect(engine).get_table_names()
    assert "undone_by" not in {c["name"] for c in sa.inspect(engine).get_columns("hatp_branch")}
    dropped = ("hatp_undo_claim", "hatp_branch.undone_by")
    before = contents_at(engine, *dropped)
    assert before["hatp_branch"][0] == len(PARTICIPANT_IDS)
    assert (before["hatp_txn"][0], before["hatp_outbox"][0]) == (2, 1)
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert refused.value.reason == "BEHIND"
    assert (refused.value.data["revision"], refused.value.data["head"]) == ("0003", HEAD)

    status = upgrade_store(store_url)

    assert (status.found, status.before, status.after) == (Found.BEHIND, "0003", HEAD)
    assert contents_at(engine, *dropped) == before
    assert len(undone_by(engine)) == len(PARTICIPANT_IDS)
    assert set(undone_by(engine).values()) == {None}
    assert schema_diffs(engine) == []
    opened = open_store(store_url)
    try:
        log = DecisionLog(opened)
        assert log.undo_claims("trip-1") == {}  # the downgrade dropped the claim
        plan = {**UNDO_PLAN, "planId": "undo-2"}
        log.create("undo-2", plan, "sha-256:u2", "coord-a", NOW, 30, [], claims=UNDO_CALENDAR)
        claim = log.undo_claims("trip-1")["calendar"]
        assert (claim.undo_txn_id, claim.state) == ("undo-2", TxnState.ACTIVE)
        branches = BranchStore(opened)
        with opened.transaction() as conn:
            step = branches.lock(conn, CALENDAR, "trip-1", "calendar")
            assert (step.state, step.undone_by) == (BranchState.COMMITTED, None)
            branches.save(conn, replace(step, undone_by="undo-2/calendar"), locked=step)
        marked = branches.get(CALENDAR, "trip-1", "calendar")
        assert marked is not None and marked.undone_by == "undo-2/calendar"
    finally:
        opened.close()


def undone_by(engine: sa.Engine) -> dict[tuple[str, str], str | None]:
    """Each branch row's ``undone_by``, by transaction and step."""
    query = sa.text("SELECT txn_id, branch_id, undone_by FROM hatp_branch")
    with engine.connect() as conn:
        return {(row[0], row[1]): row[2] for row in conn.execute(query)}


def schema_diffs(engine: sa.Engine) -> list[Any]:
    """What Alembic finds different between hatp's tables in the database and the code's
    (the tables of the demo participants sharing the database are not hatp's)."""

    def hatps(name: str | None, kind: str, parent: Any) -> bool:
        return kind != "table" or (name or "").startswith("hatp_")

    with engine.connect() as conn:
        opts = {"version_table": "hatp_schema_version", "include_name": hatps}
        context = MigrationContext.configure(conn, opts=opts)
        diffs: list[Any] = compare_metadata(context, hatp.store._schema.metadata)
    return diffs


def hatp_tables(engine: sa.Engine) -> list[str]:
    """hatp's tables in the database (the demo participants sharing it add their own)."""
    return [name for name in sa.inspect(engine).get_table_names() if name.startswith("hatp_")]


def contents_at(engine: sa.Engine, *without: str) -> dict[str, tuple[int, str]]:
    """:func:`contents` of the code's tables but ``without`` (what a downgrade dropped: a
    table by name, a column as ``table.column``)."""
    kept = [t for t in hatp.store._schema.metadata.sorted_tables if t.name not in without]
    found: dict[str, tuple[int, str]] = {}
    with engine.connect() as conn:
        for table in kept:
            columns = [c for c in table.columns if f"{table.name}.{c.name}" not in without]
            query = sa.select(*columns).order_by(*table.primary_key.columns)
            rows = conn.execute(query).all()
            text = "\n".join(repr(tuple(row)) for row in rows)
            found[table.name] = (len(rows), hashlib.sha256(text.encode()).hexdigest())
    return found


def test_a_fresh_database_is_created_at_the_head_as_the_code_declares_STORE_SCHEMA(
    store_url: str, engine: sa.Engine
) -> None:
    """[STORE-SCHEMA] opening an empty database runs the revisions; what they build is
    exactly the tables the code declares (no difference Alembic can see)."""
    store = open_store(store_url)
    store.close()
    assert (store.schema.found, store.schema.before, store.schema.after) == (
        Found.EMPTY,
        None,
        HEAD,
    )
    assert schema_diffs(engine) == []


def test_a_database_made_before_revisions_is_stamped_with_the_baseline_STORE_SCHEMA(
    store_url: str, engine: sa.Engine
) -> None:
    """[STORE-SCHEMA] every baseline table and no revision recorded (nor a later table):
    with the head past the baseline, open refuses it as BEHIND the baseline; upgrade stamps
    the baseline, then upgrades, keeping the rows."""
    store = open_store(store_url)
    UsedApprovals(store).claim(
        "apv-1", server="s", tool="t", call_digest="c", expires_at=NOW, now=NOW
    )
    store.close()
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE hatp_gate_ask")
        conn.exec_driver_sql("DROP TABLE hatp_outbox")
        conn.exec_driver_sql("DROP TABLE hatp_undo_claim")
        conn.exec_driver_sql("ALTER TABLE hatp_branch DROP COLUMN undone_by")
        conn.exec_driver_sql("DROP TABLE hatp_schema_version")
    assert schema_status(store_url).found is Found.UNVERSIONED
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert refused.value.reason == "BEHIND"
    assert (refused.value.data["revision"], refused.value.data["head"]) == ("0001", HEAD)
    status = upgrade_store(store_url)
    assert (status.found, status.before, status.after) == (Found.UNVERSIONED, None, HEAD)
    assert schema_status(store_url).found is Found.CURRENT
    assert contents(engine)["hatp_used_approval"][0] == 1


def test_a_database_behind_is_refused_until_upgraded_STORE_SCHEMA(store_url: str) -> None:
    """[STORE-SCHEMA] a hatp whose head is newer refuses the database and names the
    command; after ``upgrade_store`` it opens."""
    open_store(store_url).close()
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url, migrations=WITH_T0003)
    assert refused.value.reason == "BEHIND"
    assert "run: hatp db upgrade --db " in refused.value.message
    assert (refused.value.data["revision"], refused.value.data["head"]) == (HEAD, "t0003")
    upgrade_store(store_url, migrations=WITH_T0003)
    open_store(store_url, migrations=WITH_T0003).close()


def test_a_database_newer_than_this_hatp_is_refused_STORE_SCHEMA(store_url: str) -> None:
    """[STORE-SCHEMA] a revision this hatp does not know: refused, by open and by upgrade."""
    upgrade_store(store_url, migrations=WITH_T0003)
    for attempt in (open_store, upgrade_store):
        with pytest.raises(SchemaMismatch) as refused:
            attempt(store_url)
        assert refused.value.reason == "NEWER"
        assert "this hatp is older than the database: upgrade hatp" in refused.value.message
    assert schema_status(store_url).found is Found.NEWER


def test_a_partial_database_is_refused_and_completed_by_upgrade_STORE_SCHEMA(
    store_url: str, engine: sa.Engine
) -> None:
    """[STORE-SCHEMA] some of hatp's tables, no revision: refused naming the command;
    ``upgrade_store`` creates the missing ones and keeps the rows of the others."""
    store = open_store(store_url)
    UsedApprovals(store).claim(
        "apv-1", server="s", tool="t", call_digest="c", expires_at=NOW, now=NOW
    )
    store.close()
    with engine.begin() as conn:  # as an older hatp left it: no later table either
        conn.exec_driver_sql("DROP TABLE hatp_web_invite")
        conn.exec_driver_sql("DROP TABLE hatp_gate_ask")
        conn.exec_driver_sql("DROP TABLE hatp_outbox")
        conn.exec_driver_sql("DROP TABLE hatp_undo_claim")
        conn.exec_driver_sql("ALTER TABLE hatp_branch DROP COLUMN undone_by")
        conn.exec_driver_sql("DROP TABLE hatp_schema_version")
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert refused.value.reason == "PARTIAL"
    assert "run: hatp db upgrade --db " in refused.value.message
    status = upgrade_store(store_url)
    assert (status.found, status.before, status.after) == (Found.PARTIAL, None, HEAD)
    assert len(sa.inspect(engine).get_table_names()) == HEAD_TABLES + 1
    assert contents(engine)["hatp_used_approval"][0] == 1


def test_a_table_of_hatps_name_that_is_not_hatps_is_refused_STORE_SCHEMA(
    store_url: str, engine: sa.Engine
) -> None:
    """[STORE-SCHEMA] a foreign hatp_txn: refused by open and by upgrade, nothing made."""
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE hatp_txn (id INTEGER PRIMARY KEY, name TEXT)")
    for attempt in (open_store, upgrade_store):
        with pytest.raises(SchemaMismatch) as refused:
            attempt(store_url)
        assert (refused.value.reason, refused.value.data["table"]) == ("DIFFERENT", "hatp_txn")
    assert sa.inspect(engine).get_table_names() == ["hatp_txn"]


def test_stores_upgrading_one_database_at_once_upgrade_it_once_STORE_SCHEMA(
    store_url: str, engine: sa.Engine
) -> None:
    """[STORE-SCHEMA] several upgrades of one database at the same moment (as several
    processes would): one upgrades it, the others find it done; no row is lost."""
    store = open_store(store_url)
    UsedApprovals(store).claim(
        "apv-1", server="s", tool="t", call_digest="c", expires_at=NOW, now=NOW
    )
    store.close()
    before = contents(engine)
    statuses = race([lambda: upgrade_store(store_url, migrations=WITH_T0003)] * 4)
    assert sorted(status.found for status in statuses) == sorted(
        [Found.BEHIND, Found.CURRENT, Found.CURRENT, Found.CURRENT]
    )
    assert {status.after for status in statuses} == {"t0003"}
    assert contents(engine) == before


def test_an_upgrade_that_fails_leaves_the_database_as_it_was_STORE_SCHEMA(
    store_url: str, engine: sa.Engine
) -> None:
    """[STORE-SCHEMA] every revision of one upgrade runs in one transaction: when the
    last fails, the one before it (which copied hatp_txn) is undone too."""
    store = open_store(store_url)
    UsedApprovals(store).claim(
        "apv-1", server="s", tool="t", call_digest="c", expires_at=NOW, now=NOW
    )
    store.close()
    before = contents(engine)
    failing = Migrations(*WITH_T0003_DIRS, Path(__file__).with_name("revisions_failing"))
    with pytest.raises(StoreUnavailable):
        upgrade_store(store_url, migrations=failing)
    assert schema_status(store_url).before == HEAD
    assert "note" not in {c["name"] for c in sa.inspect(engine).get_columns("hatp_txn")}
    assert contents(engine) == before
