"""The benchmarks run and print their ratios (no timing is asserted: machines are noisy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[1] / "benchmarks" / "evidence.py"


def test_evidence_benchmark_quick_run_prints_every_ratio() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    for row in ("sign(plan)", "verify(signed plan)", "verify_record", "ratio"):
        assert row in done.stdout, row
