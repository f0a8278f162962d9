"""The benchmarks run and print their ratios (no timing is asserted: machines are noisy)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def quick_run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_evidence_benchmark_quick_run_prints_every_ratio() -> None:
    out = quick_run("evidence.py")
    for row in ("sign(plan)", "verify(signed plan)", "verify_record", "ratio"):
        assert row in out, row


def test_coordinator_benchmark_quick_run_prints_the_ratio_to_its_floor() -> None:
    """SQLite always; PostgreSQL measured or reported skipped with the reason."""
    out = quick_run("coordinator.py")
    lines = out.splitlines()
    assert any(line.startswith("sqlite      sequential") and "x " in line for line in lines), out
    assert any(line.startswith("postgresql  ") for line in lines), out
    for text in ("Ed25519 signs", "ratio = ", "where the time goes"):
        assert text in out, text
    assert "floor: crypto" in out
    assert "the protocol's own floor, for context: crypto + the 8 durable commits" in out
    # Commits that wrote are told apart from read-only ones (which flush nothing).
    counts = {
        name: int(match.group(1))
        for name in ("durable commits", "read-only commits")
        if (match := re.search(rf"^  {name} +(\d+) ", out, re.MULTILINE))
    }
    assert counts.keys() == {"durable commits", "read-only commits"}, out
    assert counts["durable commits"] >= 8  # the protocol's serial ones alone (design notes)


def test_gate_benchmark_quick_run_prints_its_ratios() -> None:
    """SQLite always; PostgreSQL when a server answers (CI has one)."""
    out = quick_run("gate.py")
    assert "check (no store) vs 1 verify" in out
    assert any(
        line.startswith("sqlite: check + use vs verify + insert") and "ratio" in line
        for line in out.splitlines()
    )
    assert any(  # the floor the rules imply, for context
        line.startswith("sqlite: check + use vs 2 verifies + insert") and "context" in line
        for line in out.splitlines()
    )
    assert "postgresql:" in out


def test_mcp_benchmark_quick_run_prints_the_overhead_per_branch_and_per_gated_call() -> None:
    """The trip over stdio vs in process; the gated vs the ungated tool over streamable
    HTTP, on one session, in the same run."""
    out = quick_run("mcp.py")
    for text in ("in process: txn", "MCP (stdio): txn", "transport overhead per branch", "ratio"):
        assert text in out, text
    lines = out.splitlines()
    for name in ("HTTP: ungated call", "HTTP: gated call", "HTTP: stock retry"):
        assert any(line.startswith(name) and " p50 " in line for line in lines), name
    added = re.search(
        r"^added cost per gated call \(p50, gated - ungated\): (-?\d+\.\d+) ms; "
        r"ratio gated / ungated (\d+\.\d+)x$",
        out,
        re.MULTILINE,
    )
    assert added is not None, out
    assert "claims its single use durably" in out
    assert re.search(r"^a stock client's call again once approved \(p50\): \d+\.\d+ ms", out, re.M)


def test_writes_benchmark_quick_run_prints_the_ratio_to_the_bare_write() -> None:
    """SQLite always; PostgreSQL measured or reported skipped with the reason."""
    out = quick_run("writes.py")
    lines = out.splitlines()
    assert any(line.startswith("sqlite ") and "ratio" in line for line in lines), out
    assert any(line.startswith("postgresql ") for line in lines), out
    for text in ("bare write", "<=1.5x", "where the time goes", "txn 1:", "outside any"):
        assert text in out, text


def test_cli_benchmark_quick_run_prints_every_command_against_the_bare_start() -> None:
    out = quick_run("cli.py")
    for row in ("python -c pass", "hatp --version", "hatp verify --help", "hatp verify (demo"):
        assert row in out, row
    verdicts = [line for line in out.splitlines() if "target +" in line]
    assert len(verdicts) == 3 and all(("PASS" in v) != ("MISS" in v) for v in verdicts), out


def test_cli_benchmark_json_is_one_object_with_a_verdict_per_target() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "cli.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["verdict"] in ("PASS", "MISS") for row in report["rows"]] == [
        False,
        True,
        True,
        True,
    ]
