"""`hatp demo --writes`: approved, run once, a replay writes nothing, drift is refused."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from hatp import _checks
from hatp.cli import app
from hatp.clock import ManualClock
from hatp.demo.writes import LEDGER, run_writes, signed_in
from hatp.gateway import WRITE_PREVIEW_LABEL

runner = CliRunner()
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)

EXPECTED = [
    "REQUIRE_APPROVAL",  # the recount is proposed; the policy wants a person
    "NOT_APPROVED",  # executed before the approval
    "APPROVER_REFUSED",  # the bot approves its own plan
    "APPROVED",  # erin, signed in, approves it
    "EXECUTED",
    "ALREADY_EXECUTED",  # the double click
    "REQUIRE_APPROVAL",  # the unit change is proposed
    "APPROVED",
    "DRIFT_DETECTED",  # a clerk changed the row after the approval
]


def _rows(folder: Path, sql: str) -> list[tuple[object, ...]]:
    """Read the demo's SQLite file directly, not through hatp."""
    with sqlite3.connect(folder / LEDGER) as conn:
        return conn.execute(sql).fetchall()


def test_each_step_has_its_outcome_WRITE_ONCE_WRITE_DRIFT(tmp_path: Path) -> None:
    """[WRITE-APPROVED] [WRITE-HUMAN] [WRITE-ONCE] [WRITE-DRIFT] in the demo's walk."""
    run = run_writes(tmp_path, ManualClock(START))
    assert [step.outcome for step in run.steps] == EXPECTED, run.steps
    assert run.as_expected
    assert all(held for _, held in run.checks), run.checks
    assert "the table is unchanged" in run.steps[5].said
    # The approver reads hatp's exact preview, then the policy, then the agent's unchecked note.
    assert run.steps[0].shown[:2] == (
        WRITE_PREVIEW_LABEL,
        "Certainty: exact (will do exactly this)",
    )
    assert run.steps[0].shown[-1].startswith("note (written by the agent, not checked): ")
    assert run.steps[4].said.split(":")[:2] == run.steps[5].said.split(":")[:2]  # same key


def test_the_table_and_the_journal_agree(tmp_path: Path) -> None:
    run_writes(tmp_path, ManualClock(START))
    table = {
        sku: (on_hand, unit, version)
        for sku, on_hand, unit, version in _rows(
            tmp_path, "SELECT sku, on_hand, unit, version FROM inventory ORDER BY sku"
        )
    }
    # The recount applied once (10 - 3, not 10 - 6); the drifted row keeps the clerk's write.
    assert table == {"SKU-1": (7, "each", 2), "SKU-2": (4, "case", 2), "SKU-3": (38, "each", 2)}
    journal = _rows(
        tmp_path, "SELECT plan_id, version, approver, source, result FROM hatp_write_journal"
    )
    assert len(journal) == 1
    plan_id, version, approver, source, result = journal[0]
    assert (plan_id, version, source) == ("recount-2026-12-02", 1, "direct")
    assert json.loads(str(approver)) == [signed_in().id]
    recorded = json.loads(str(result))["records"]
    assert recorded == {
        f"inventory/{sku}": {
            "on_hand": table[sku][0],
            "unit": table[sku][1],
            "version": table[sku][2],
        }
        for sku in ("SKU-1", "SKU-2")
    }
    keys = _rows(tmp_path, "SELECT plan_id, state FROM hatp_write_key ORDER BY plan_id")
    assert keys == [("recount-2026-12-02", "completed"), ("unit-sku-3", "failed")]
    saved = json.loads((tmp_path / "journal.json").read_text(encoding="utf-8"))
    assert [entry["planId"] for entry in saved] == ["recount-2026-12-02"]
    steps = json.loads((tmp_path / "steps.json").read_text(encoding="utf-8"))
    assert [step["outcome"] for step in steps] == EXPECTED
    assert (tmp_path / "plan-recount-2026-12-02-v1.json").is_file()


def test_a_second_run_in_the_same_folder_starts_a_fresh_ledger(tmp_path: Path) -> None:
    run_writes(tmp_path, ManualClock(START))
    assert run_writes(tmp_path, ManualClock(START)).as_expected


def test_with_WRITE_DRIFT_off_the_walk_misbehaves_and_says_so(tmp_path: Path) -> None:
    """The demo's own verdict is not a rubber stamp: a broken check fails it.

    WRITE-VERIFY goes off too: the postcondition alone would catch this drift.
    """
    with _checks.unsafe_switched_off("WRITE-DRIFT", "WRITE-VERIFY"):
        run = run_writes(tmp_path, ManualClock(START))
    assert run.steps[-1].outcome == "EXECUTED"
    assert not run.as_expected
    assert not all(held for _, held in run.checks)


def test_the_cli_walks_the_writes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--writes", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        WRITE_PREVIEW_LABEL,
        "Certainty: exact (will do exactly this)",
        "| - inventory/SKU-1: update, on_hand 10 → 7",
        '| - inventory/SKU-2: update, unit "box" → "case"',
        "policy: require-approval (adjust_stock: size 3 above the 2 allowed",
        "NOT_APPROVED",
        "EXECUTED: key",
        "ALREADY_EXECUTED",
        "the table is unchanged",
        "DRIFT_DETECTED",
        "#1 recount-2026-12-02 v1",
        "its recorded records are the table's rows now",
    ):
        assert text in out, text
    assert "✗" not in out
    assert result.stdout.strip().endswith(str(tmp_path))


def test_the_cli_exits_1_when_a_step_misbehaves(tmp_path: Path) -> None:
    with _checks.unsafe_switched_off("WRITE-ONCE"):
        result = runner.invoke(app, ["demo", "--writes", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "expected ALREADY_EXECUTED" in result.output


def test_list_names_the_writes_walk() -> None:
    result = runner.invoke(app, ["demo", "--list"])
    assert "--writes" in result.stdout
