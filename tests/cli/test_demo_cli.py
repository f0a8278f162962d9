"""`hatp demo`: walks the evidence layer and leaves a record that verifies offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from hatp.cli import app
from hatp.evidence import Keyring, load_record, verify_record

runner = CliRunner()


def test_demo_writes_a_record_and_keyring_that_verify(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    record = load_record(tmp_path / "record.json")
    report = verify_record(record, Keyring.load(tmp_path / "keyring.json"))
    assert report.ok
    assert record["events"][-1]["type"] == "record.sealed"
    # The walk shows tampering caught, naming the rule and the event.
    assert "INVALID" in result.output
    assert "REC-SIG: event 0" in result.output.replace("\n", " ")
    verified = runner.invoke(
        app, ["verify", str(tmp_path / "record.json"), "--keys", str(tmp_path / "keyring.json")]
    )
    assert verified.exit_code == 0, verified.output


def test_demo_without_out_names_the_folder_it_made() -> None:
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    record = Path(result.stdout.strip()) / "record.json"
    assert json.loads(record.read_text())["recordId"] == "txn-trip-0001"


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    hatp = Path(sys.executable).parent / "hatp"
    done = subprocess.run(
        [str(hatp), "demo", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    version = subprocess.run([str(hatp), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("hatp ")
