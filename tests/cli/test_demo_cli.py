"""`hatp demo`: the business trip, every scenario, each ending in a record that verifies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.demo.scenarios import SCENARIOS
from hatp.evidence import Keyring, load_record, verify_record

runner = CliRunner()

#: What each scenario must end in, and an event its record must contain.
EXPECTED = {
    "commit": ("committed", "txn.committed"),
    "reject": ("aborted", "txn.aborted"),
    "sold-out": ("aborted", "txn.aborted"),
    "deadline": ("aborted", "txn.aborted"),
    "in-doubt": ("committed", "txn.in-doubt"),
    "crash": ("committed", "txn.taken-over"),
    "slow-approver": ("committed", "txn.mode"),
    "holds-first": ("committed", "txn.terms"),
    "late-answer": ("needs-recovery", "txn.recovery-offered"),
    "price-changed": ("committed", "txn.effect"),
    "undo": ("committed", "txn.committed"),
}


def test_list_names_every_scenario() -> None:
    result = runner.invoke(app, ["demo", "--list"])
    assert result.exit_code == 0, result.output
    for name in EXPECTED:
        assert name in result.stdout
    assert set(SCENARIOS) == set(EXPECTED)


def test_an_unknown_scenario_is_refused_with_the_choices() -> None:
    result = runner.invoke(app, ["demo", "--scenario", "teleport"])
    assert result.exit_code == 2
    assert "teleport" in result.output and "sold-out" in result.output


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_scenario_ends_whole_or_none_with_a_record_that_verifies(
    name: str, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["demo", "--auto", "--scenario", name, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path)
    record = load_record(tmp_path / "record.json")
    report = verify_record(record, Keyring.load(tmp_path / "keyring.json"))
    assert report.ok, [f for f in report.findings if f.result.value != "pass"]
    state, event = EXPECTED[name]
    outcome = next(e for e in record["events"] if e["type"] == "txn.outcome")
    assert outcome["body"]["state"] == state
    assert event in {e["type"] for e in record["events"]}
    output = " ".join(result.output.split())
    assert "every ledger shows the whole effect or none" in output
    assert f"outcome {state.upper()}" in output


def test_the_slow_approver_scenario_lets_the_clock_choose_approval_first(
    tmp_path: Path,
) -> None:
    """[COORD-MODE] bob 15 minutes, carol 15 more: 30 minutes against the 30-minute holds."""
    result = runner.invoke(
        app, ["demo", "--auto", "--scenario", "slow-approver", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    record = load_record(tmp_path / "record.json")
    (mode,) = [e["body"] for e in record["events"] if e["type"] == "txn.mode"]
    assert (mode["requested"], mode["chosen"], mode["worstSeconds"]) == (
        "auto",
        "approval-first",
        1800,
    )
    kinds = [e["type"] for e in record["events"]]
    assert kinds.index("txn.approval") < kinds.index("txn.prepared")
    assert "mode approval-first" in " ".join(result.output.split())


def test_the_late_answer_scenario_escalates_and_offers_recovery(tmp_path: Path) -> None:
    """[COORD-ESCALATE] [COORD-LATE-ANSWER] [COORD-RECOVERY-OFFER] on a simulated clock."""
    result = runner.invoke(
        app, ["demo", "--auto", "--scenario", "late-answer", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    record = load_record(tmp_path / "record.json")
    kinds = [e["type"] for e in record["events"]]
    for kind in ("txn.in-doubt", "txn.escalated", "txn.late-answer", "txn.recovery-offered"):
        assert kind in kinds
    output = " ".join(result.output.split())
    assert "time was simulated" in output and "not whole" in output


def test_demo_without_out_names_the_folder_it_made() -> None:
    result = runner.invoke(app, ["demo", "--auto"])
    assert result.exit_code == 0, result.output
    record = Path(result.stdout.strip().splitlines()[-1]) / "record.json"
    assert load_record(record)["recordId"].startswith("trip-")


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    hatp = Path(sys.executable).parent / "hatp"
    done = subprocess.run(
        [str(hatp), "demo", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    verified = subprocess.run(
        [
            str(hatp),
            "verify",
            str(tmp_path / "record.json"),
            "--keys",
            str(tmp_path / "keyring.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    version = subprocess.run([str(hatp), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("hatp ")
