"""Start-up of the ``hatp`` command line against the bare interpreter, measured in the same run.

Run with ``.venv/bin/python benchmarks/cli.py``.

Each figure is the wall clock of a fresh process (``subprocess.run``), the best
of several runs, interleaved with the baseline so that the difference is what
matters, not the machine:

0. ``python -c pass``: the bare interpreter start (the baseline).
1. ``hatp --version``.
2. ``hatp verify --help``.
3. ``hatp verify record.json --keys keyring.json``: a demo trip's record (the
   commit scenario, run with the library in this benchmark's own temp folder).

Targets: 1 and 2 within 0.3 s of the bare start, 3 within 0.5 s; each is labelled
PASS or MISS. Nothing here asserts a timing and the exit status is 0 whatever the
figures (a command that fails is another matter: exit 1). ``--quick`` runs each
once, for a smoke test; ``--json`` prints one JSON object instead of lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _timing import Timing

#: The ``hatp`` console script of the interpreter running this benchmark.
HATP = str(Path(sys.executable).parent / "hatp")


@dataclass(frozen=True)
class Case:
    """One command to time, and how far above the bare start it may be."""

    name: str
    argv: tuple[str, ...]
    target: float | None  # seconds above the bare interpreter; None: the baseline


def cases(folder: Path) -> list[Case]:
    record, keys = str(folder / "record.json"), str(folder / "keyring.json")
    return [
        Case("python -c pass", (sys.executable, "-c", "pass"), None),
        Case("hatp --version", (HATP, "--version"), 0.3),
        Case("hatp verify --help", (HATP, "verify", "--help"), 0.3),
        Case("hatp verify (demo record)", (HATP, "verify", record, "--keys", keys), 0.5),
    ]


def demo_record(folder: Path) -> None:
    """Run the trip's commit scenario in ``folder``; write its record and keyring there."""
    from hatp.demo.scenarios import SCENARIOS, run_scenario

    run = asyncio.run(run_scenario(SCENARIOS["commit"], folder / "world"))
    try:
        for name, doc in (
            ("record.json", run.record),
            ("keyring.json", run.world.keyring.to_json()),
        ):
            (folder / name).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    finally:
        run.world.close()


def once(argv: Sequence[str]) -> float:
    """Seconds of one run of ``argv`` as a fresh process.

    Raises:
        RuntimeError: the command did not exit 0.
    """
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return took


def measure(runs: int, items: list[Case]) -> dict[str, Timing]:
    """Time every case ``runs`` times, interleaved (a warm-up run of each first)."""
    for case in items:
        once(case.argv)  # warm the file cache: the first start reads every .pyc from disk
    samples: dict[str, list[float]] = {case.name: [] for case in items}
    for _ in range(runs):
        for case in items:
            samples[case.name].append(once(case.argv))
    return {name: Timing(tuple(found)) for name, found in samples.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="one run each, for a smoke run")
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (best shown)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    with tempfile.TemporaryDirectory(prefix="hatp-cli-bench-") as tmp:
        folder = Path(tmp)
        demo_record(folder)
        items = cases(folder)
        try:
            timings = measure(runs, items)
        except RuntimeError as exc:
            print(f"hatp cli benchmark: {exc}", file=sys.stderr)
            return 1
    bare = timings[items[0].name].best
    rows = []
    for case in items:
        best = timings[case.name].best
        over = best - bare
        verdict = None if case.target is None else ("PASS" if over <= case.target else "MISS")
        rows.append(
            {
                "command": case.name,
                "best_s": round(best, 4),
                "median_s": round(timings[case.name].median, 4),
                "over_bare_s": round(over, 4),
                "target_over_bare_s": case.target,
                "verdict": verdict,
            }
        )
    if args.json:
        print(json.dumps({"python": platform.python_version(), "runs": runs, "rows": rows}))
        return 0
    print(
        f"hatp cli benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}; each command a fresh process, best of {runs} run(s)"
    )
    for row in rows:
        target = row["target_over_bare_s"]
        against = "baseline" if target is None else f"target +{target:.1f} s  {row['verdict']}"
        print(
            f"{row['command']:<28} {row['best_s']:7.3f} s (median {row['median_s']:.3f})  "
            f"+{row['over_bare_s']:.3f} s over bare start  {against}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
