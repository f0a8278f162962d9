"""``hatp demo --mcp``: the trip across four MCP server processes, then one killed and back."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.evidence import Keyring, load_record, verify_record

runner = CliRunner()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow  # four server processes, one killed and started again
def test_demo_mcp_commits_across_processes_and_survives_a_participant_killed_after_prepare(
    tmp_path: Path,
) -> None:
    """Both transactions commit whole; both records verify; no server process is left."""
    result = runner.invoke(app, ["demo", "--mcp", "--auto", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path)
    output = " ".join(result.output.split())
    assert "stdio" in output and "streamable HTTP at http://127.0.0.1:" in output
    assert "killed with SIGKILL right after it voted yes" in output
    assert output.count("outcome COMMITTED; every ledger shows the whole effect or none") == 2
    for name, must in (("mcp-commit", "txn.committed"), ("mcp-kill", "txn.in-doubt")):
        record = load_record(tmp_path / name / "record.json")
        report = verify_record(record, Keyring.load(tmp_path / name / "keyring.json"))
        assert report.ok, [f for f in report.findings if f.result.value != "pass"]
        kinds = [e["type"] for e in record["events"]]
        outcome = next(e for e in record["events"] if e["type"] == "txn.outcome")
        assert outcome["body"]["state"] == "committed", name
        assert must in kinds, name
        # Every branch committed exactly once, the killed one included.
        assert kinds.count("txn.committed") == 4, name
    # The HTTP servers (both starts of the killed one) are gone once the command returns.
    pids = {int(pid) for pid in re.findall(r"\(process (\d+)\)", output)}
    assert len(pids) == 3, output
    left = [pid for pid in pids if not _gone(pid)]
    for pid in left:  # never leave one running, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == []


def test_list_names_the_mcp_demo() -> None:
    result = runner.invoke(app, ["demo", "--list"])
    assert result.exit_code == 0
    assert "--mcp" in result.stdout
