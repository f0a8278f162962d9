"""`hatp db upgrade` and `hatp db current` (exit 0, or 2 refused), and `hatp serve`
refusing a database at a revision it does not run on ([STORE-SCHEMA-CLI],
[SERVE-SCHEMA])."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool
from typer.testing import CliRunner

from hatp.cli import app
from hatp.errors import SchemaMismatch
from hatp.http import ServeConfig, open_services
from hatp.store import Outbox, OutboxRow, open_store

runner = CliRunner()
NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def _set_revision(db: Path, revision: str | None) -> None:
    """Record ``revision`` in the database (``None``: record none, as an older hatp)."""
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if revision is None:
                conn.exec_driver_sql("DROP TABLE hatp_schema_version")
            else:
                conn.execute(
                    sa.text("UPDATE hatp_schema_version SET version_num = :r"), {"r": revision}
                )
    finally:
        engine.dispose()


def test_upgrade_brings_a_fresh_database_to_the_newest_and_prints_from_to(tmp_path: Path) -> None:
    """[STORE-SCHEMA-CLI] a fresh database: "none -> 0004"; again: "0004 -> 0004"; exit 0."""
    db = str(tmp_path / "hatp.db")
    first = runner.invoke(app, ["db", "upgrade", "--db", db])
    assert first.exit_code == 0, first.output
    assert first.stdout == "none -> 0004\n"
    again = runner.invoke(app, ["db", "upgrade", "--db", db])
    assert again.exit_code == 0, again.output
    assert again.stdout == "0004 -> 0004\n"
    assert "nothing to do" in again.stderr


def test_current_prints_the_revision_and_changes_nothing(tmp_path: Path) -> None:
    """[STORE-SCHEMA-CLI] an empty file: "none", no table made; after opening: "0004"."""
    db = tmp_path / "hatp.db"
    empty = runner.invoke(app, ["db", "current", "--db", str(db)])
    assert empty.exit_code == 0, empty.output
    assert empty.stdout == "none\n"
    assert "empty" in empty.stderr
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    assert sa.inspect(engine).get_table_names() == []
    engine.dispose()
    open_store(db).close()
    current = runner.invoke(app, ["db", "current", "--db", str(db)])
    assert (current.exit_code, current.stdout) == (0, "0004\n")


def test_upgrade_stamps_a_database_made_before_revisions(tmp_path: Path) -> None:
    """[STORE-SCHEMA-CLI] every baseline table and no revision: "none -> 0004", the rows
    kept."""
    db = tmp_path / "hatp.db"
    open_store(db).close()
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    with engine.begin() as conn:  # made before revisions: no later revision's table
        conn.exec_driver_sql("DROP TABLE hatp_gate_ask")
        conn.exec_driver_sql("DROP TABLE hatp_outbox")
        conn.exec_driver_sql("DROP TABLE hatp_undo_claim")
        conn.exec_driver_sql("ALTER TABLE hatp_branch DROP COLUMN undone_by")
    engine.dispose()
    _set_revision(db, None)
    result = runner.invoke(app, ["db", "upgrade", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "none -> 0004\n"
    assert "unversioned" in result.stderr


def test_upgrade_refuses_a_database_newer_than_this_hatp_exit_2(tmp_path: Path) -> None:
    """[STORE-SCHEMA-CLI] a revision this hatp does not know: SCHEMA_MISMATCH, exit 2,
    the revision left as it was."""
    db = tmp_path / "hatp.db"
    open_store(db).close()
    _set_revision(db, "9999")
    result = runner.invoke(app, ["db", "upgrade", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "SCHEMA_MISMATCH" in result.stderr
    assert "upgrade hatp" in result.stderr
    current = runner.invoke(app, ["db", "current", "--db", str(db)])
    assert (current.exit_code, current.stdout) == (0, "9999\n")
    assert "newer than this hatp" in current.stderr


def test_a_url_that_is_no_database_is_refused_exit_2(tmp_path: Path) -> None:
    """[STORE-URL] the same refusal as every store command: STORE_UNAVAILABLE, exit 2."""
    result = runner.invoke(app, ["db", "current", "--db", "mysql://db/hatp"])
    assert result.exit_code == 2, result.output
    assert "STORE_UNAVAILABLE" in result.stderr


def _serve_demo(tmp_path: Path, db: Path) -> Any:
    """`hatp serve --demo` on ``db``: what it says when it will not start."""
    folder = str(tmp_path / "demo")
    args = ["serve", "--demo", "--demo-folder", folder, "--db", str(db), "--port", "0"]
    return runner.invoke(app, args)


def test_serve_refuses_a_database_newer_than_this_hatp_exit_2(tmp_path: Path) -> None:
    """[SERVE-SCHEMA] `hatp serve` does not start on a database of a newer hatp."""
    db = tmp_path / "hatp.db"
    open_store(db).close()
    _set_revision(db, "9999")
    result = _serve_demo(tmp_path, db)
    assert result.exit_code == 2, result.output
    assert "SCHEMA_MISMATCH" in result.stderr
    assert "this hatp is older than the database: upgrade hatp" in result.stderr


def test_serve_refuses_a_database_behind_naming_the_command_exit_2(tmp_path: Path) -> None:
    """[SERVE-SCHEMA] a database an older hatp left partial: `hatp serve` does not start,
    and says to run `hatp db upgrade --db …`."""
    db = tmp_path / "hatp.db"
    open_store(db).close()
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    with engine.begin() as conn:  # as an older hatp left it: nor a later revision's column
        conn.exec_driver_sql("DROP TABLE hatp_web_invite")
        conn.exec_driver_sql("ALTER TABLE hatp_branch DROP COLUMN undone_by")
    engine.dispose()
    _set_revision(db, None)
    result = _serve_demo(tmp_path, db)
    assert result.exit_code == 2, result.output
    assert "SCHEMA_MISMATCH" in result.stderr
    assert f"run: hatp db upgrade --db sqlite:///{db}" in result.stderr


def test_open_services_refuses_a_database_newer_than_this_hatp(tmp_path: Path) -> None:
    """[SERVE-SCHEMA] what `hatp serve --config` opens refuses it too; a current one is
    served, its revision in the start-up notes."""
    db = tmp_path / "hatp.db"
    open_store(db).close()

    async def notes() -> list[str]:
        async with open_services(ServeConfig(db=str(db), port=0)) as services:
            return services.notes

    assert f"store: {db} (schema revision 0004)" in asyncio.run(notes())
    _set_revision(db, "9999")
    with pytest.raises(SchemaMismatch) as refused:
        asyncio.run(notes())
    assert refused.value.reason == "NEWER"


def test_notices_reports_the_outbox_by_channel_and_state_and_one_asks_notices(
    tmp_path: Path,
) -> None:
    """[OUTBOX] ``hatp db notices``: counts by channel and state; with --ask, each notice
    with its attempts and last failure; a database it cannot use: exit 2."""
    db = tmp_path / "hatp.db"
    store = open_store(db)
    try:
        rows = [
            OutboxRow("ntc_1", "ask-1", "human://acme.com/bob", "webhook", "ask", {}),
            OutboxRow("ntc_2", "ask-1", "human://acme.com/bob", "email", "ask", {}),
        ]
        with store.driver_session() as session:
            Outbox.add(session, rows, NOW)
        Outbox(store).failed("ntc_1", NOW, "REJECTED: HTTP 410")
    finally:
        store.close()
    counts = runner.invoke(app, ["db", "notices", "--db", str(db)])
    assert counts.exit_code == 0, counts.output
    assert counts.stdout.splitlines() == ["email\tpending\t1", "webhook\tfailed\t1"]
    one = runner.invoke(app, ["db", "notices", "--db", str(db), "--ask", "ask-1"])
    assert one.exit_code == 0, one.output
    lines = sorted(one.stdout.splitlines())
    assert lines[0].endswith("webhook\tfailed\t0\tREJECTED: HTTP 410")
    assert "2 notice(s) about ask ask-1" in one.stderr
    refused = runner.invoke(app, ["db", "notices", "--db", str(tmp_path)])
    assert refused.exit_code == 2
