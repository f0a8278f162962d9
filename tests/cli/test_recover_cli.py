"""`hatp recover`: what is open, and finishing it (exit 0 nothing open, 1 open, 2 unusable).

Finishing with ``--config`` against real participant processes is in
``tests/http/test_serve_recovery.py``; here the report, and the refusals.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from hatp.cli import app
from hatp.clock import ManualClock
from hatp.demo import trip_plan
from hatp.evidence import RecordWriter, SigningKey, digest
from hatp.model import TxnState, parse_plan
from hatp.store import DecisionLog, open_store

runner = CliRunner()
KEY = SigningKey.from_seed(bytes([7]) * 32, "coordinator-1")


def _logged(
    db: Path, txn_id: str, owner: str, lease_seconds: float, *, finish: bool = False
) -> None:
    """Log a transaction as a coordinator does when it begins it (owned by ``owner`` for
    ``lease_seconds`` from now: negative, a lease already ended)."""
    now = datetime.now(UTC)
    plan = parse_plan(trip_plan(txn_id, decide_by=now + timedelta(minutes=15)))
    wire = plan.to_wire()
    writer = RecordWriter(txn_id, ManualClock(now))
    writer.append("txn.planned", {"planDigest": digest(wire), "plan": wire, "fence": 1}, KEY)
    store = open_store(db)
    try:
        log = DecisionLog(store)
        start = now + timedelta(seconds=min(0.0, lease_seconds) - 1)
        fence = log.create(
            txn_id, wire, digest(wire), owner, start, abs(lease_seconds), writer.events()
        )
        if finish:
            log.append(txn_id, fence, [], state=TxnState.ABORTED, release=True)
    finally:
        store.close()


def test_the_report_lists_what_is_open_and_whether_its_owner_stopped(tmp_path: Path) -> None:
    """[COORD-RECOVER] --db alone reads the log: each open transaction, its state and owner,
    and whether recover would take it over now; exit 1 while anything is open."""
    db = tmp_path / "hatp.db"
    _logged(db, "trip-stopped", "host/1/dead", -1.0)
    _logged(db, "trip-alive", "host/2/alive", 600.0)
    _logged(db, "trip-done", "host/3/done", 600.0, finish=True)
    result = runner.invoke(app, ["recover", "--db", str(db)])
    assert result.exit_code == 1, result.output
    lines = sorted(result.stdout.splitlines())
    assert lines[0].startswith("trip-alive\tactive\thost/2/alive\towned until ")
    assert lines[1] == "trip-stopped\tactive\thost/1/dead\tits owner stopped: recover takes it over"
    assert len(lines) == 2
    as_json = json.loads(runner.invoke(app, ["recover", "--db", str(db), "--json"]).stdout)
    assert as_json["open"] == 2
    claimable = {row["txnId"]: row["claimable"] for row in as_json["transactions"]}
    assert claimable == {"trip-stopped": True, "trip-alive": False}


def test_nothing_open_exits_zero(tmp_path: Path) -> None:
    result = runner.invoke(app, ["recover", "--db", str(tmp_path / "empty.db")])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""


def test_without_a_log_or_settings_it_says_what_to_give_and_exits_2() -> None:
    result = runner.invoke(app, ["recover"])
    assert result.exit_code == 2
    assert "CONFIG_INVALID" in result.stderr and "--config FILE" in result.stderr


def test_settings_without_a_coordinator_are_refused_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "hatp.toml").write_text('[server]\ndb = "x.db"\n', encoding="utf-8")
    result = runner.invoke(app, ["recover", "--config", str(tmp_path / "hatp.toml")])
    assert result.exit_code == 2
    assert "CONFIG_INVALID" in result.stderr


def test_an_unusable_log_url_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["recover", "--db", "mysql://nowhere/db"])
    assert result.exit_code == 2
    assert "STORE_UNAVAILABLE" in result.stderr
