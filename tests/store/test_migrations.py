"""[STORE-SCHEMA] the store's schema revisions: a database changes schema without losing a
row, and a store refuses a database at a revision it does not run on.

hatp's own revisions are ``0001`` (the baseline), ``0002`` (adds ``hatp_gate_ask``) and
``0003`` (adds ``hatp_outbox``).
After them comes the tests' own (``revisions/t0003_txn_note.py``): it copies
``hatp_txn`` (SQLite's batch mode) and adds an index to ``hatp_ask``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.pool import NullPool

import hatp.store
from hatp.clock import ManualClock
from hatp.demo import GATEWAY, TripWorld, trip_plan
from hatp.errors import SchemaMismatch, StoreUnavailable
from hatp.gateway import HumanGateway
from hatp.model import TxnState
from hatp.store import (
    AskStore,
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
HEAD = "0003"
BASELINE_TABLES = 14
HEAD_TABLES = BASELINE_TABLES + 2  # 0002: hatp_gate_ask; 0003: hatp_outbox
GATE_CALL = {
    "server": "s",
    "call_digest": "sha256:c",
    "agent": "agent://acme.com/bot",
    "on_behalf_of": "human://acme.com/dana",
}


@pytest.fixture
def engine(store_url: str) -> Iterator[sa.Engine]:
    """A plain engine on the test's database, to look at it as hatp would not."""
    plain = sa.create_engine(store_url, poolclass=NullPool)
    yield plain
    plain.dispose()


def fill(url: str, folder: Path) -> None:
    """Fill every kind of state the store holds, through the public API: a trip run to
    commit (the log and the gateway's asks), a used approval, web-book rows, leases, a
    tool server's gate ask, and a notice in the gateway's outbox."""
    clock = ManualClock(NOW)
    store = open_store(url)
    world = TripWorld.open(folder, clock)
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
    assert before["hatp_txn"][0] == 1
    assert before["hatp_record_event"][0] > 3
    assert before["hatp_ask"][0] >= 1
    assert before["hatp_gate_ask"][0] == 1
    assert before["hatp_outbox"][0] == 1
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
    assert len(sa.inspect(engine).get_table_names()) == HEAD_TABLES + 1
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": "hatp_schema_version"})
        assert compare_metadata(context, hatp.store._schema.metadata) == []
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
    before = {k: v for k, v in contents_at(engine, "hatp_outbox").items()}
    assert before["hatp_gate_ask"][0] == 1
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert (refused.value.reason, refused.value.data["revision"]) == ("BEHIND", "0002")

    status = upgrade_store(store_url)

    assert (status.found, status.before, status.after) == (Found.BEHIND, "0002", HEAD)
    assert contents_at(engine, "hatp_outbox") == before
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": "hatp_schema_version"})
        assert compare_metadata(context, hatp.store._schema.metadata) == []
    opened = open_store(store_url)
    try:
        notice = OutboxRow("ntc_2", "ask-2", "human://acme.com/bob", "webhook", "ask", {})
        with opened.driver_session() as session:
            Outbox.add(session, [notice], NOW)
        (claimed,) = Outbox(opened).claim(NOW, NOW + timedelta(seconds=30), 5)
        assert (claimed.notice_id, claimed.attempts) == ("ntc_2", 1)
    finally:
        opened.close()


def contents_at(engine: sa.Engine, *without: str) -> dict[str, tuple[int, str]]:
    """:func:`contents` of the code's tables but ``without`` (tables a downgrade dropped)."""
    kept = [t for t in hatp.store._schema.metadata.sorted_tables if t.name not in without]
    found: dict[str, tuple[int, str]] = {}
    with engine.connect() as conn:
        for table in kept:
            query = sa.select(*table.columns).order_by(*table.primary_key.columns)
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
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": "hatp_schema_version"})
        diffs = compare_metadata(context, hatp.store._schema.metadata)
    assert diffs == []


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
