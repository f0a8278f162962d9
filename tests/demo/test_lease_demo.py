"""`hatp demo --lease`: a ticket update under a lease over HTTP, a stale writer, a restore."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from hatp.cli import app
from hatp.clock import ManualClock
from hatp.demo.lease import DATABASE, run_lease
from hatp.evidence import Keyring, digest
from hatp.lease import verify_receipt

runner = CliRunner()
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)

EXPECTED = [
    "GRANTED",  # the triage bot's lease
    "GRANTED",  # the sync bot's, at the same epoch
    "LEASE_REQUIRED",  # an update with no lease
    "APPLIED",
    "LEASE_REFUSED",  # the stale writer: 409 ERR_STALE_FENCE_EPOCH
    "REPLAYED",  # the retry
    "RESTORED",
]


def test_each_step_has_its_outcome_SOR_APPLY_SOR_RECOVER(tmp_path: Path) -> None:
    """[SOR-APPLY] [SOR-RECOVER] [LEASE-FENCE] in the demo's walk, over a real HTTP server."""
    run = run_lease(tmp_path, ManualClock(START))
    assert [step.outcome for step in run.steps] == EXPECTED, run.steps
    assert run.as_expected, (run.steps, run.checks)
    assert "ERR_STALE_FENCE_EPOCH" in run.steps[4].said
    assert run.receipts["commit-close"] == run.receipts["commit-close-retry"]


def test_the_ticket_is_its_pre_image_again_and_written_once(tmp_path: Path) -> None:
    run = run_lease(tmp_path, ManualClock(START))
    with sqlite3.connect(tmp_path / DATABASE) as conn:
        ticket = conn.execute("SELECT status, assignee FROM tickets WHERE id = 4711").fetchone()
        statuses = conn.execute("SELECT status FROM hatp_lease ORDER BY lease_id").fetchall()
        epoch = conn.execute("SELECT epoch FROM hatp_lease_epoch").fetchone()
        rejected = conn.execute("SELECT reason FROM hatp_lease_rejection").fetchall()
    assert ticket == ("open", "dana")  # closed once, restored; the stale reassign never ran
    assert sorted(s for (s,) in statuses) == ["granted", "recovered"]
    assert epoch == (2,)  # 0 → 1 (the close) → 2 (the restore), never back
    assert rejected == [("MONOTONIC_CAS_FENCING",)]
    assert digest(run.ticket) == run.receipts["lease-close"]["preImageStateHash"]


def test_the_files_verify_offline_with_the_keyring_alone(tmp_path: Path) -> None:
    run_lease(tmp_path, ManualClock(START))
    keyring = Keyring.load(tmp_path / "keyring.json")
    kinds = set()
    for name in ("commit-close", "rejection-reassign", "recovery-close"):
        receipt = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
        kinds.add(verify_receipt(receipt, keyring).kind)
    assert kinds == {"lease-commit", "lease-rejection", "lease-recovery"}


def test_hatp_demo_lease_prints_the_walk_and_the_folder(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--lease", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path)
    assert "ERR_STALE_FENCE_EPOCH" in result.output
    assert "--lease" in runner.invoke(app, ["demo", "--list"]).stdout
