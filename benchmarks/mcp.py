"""Benchmark of hatp over MCP (stdio) against the same transactions in process, same run.

Run with ``.venv/bin/python benchmarks/mcp.py``.

The workload is the demo's business trip (:mod:`hatp.demo.trip`), as in
``benchmarks/coordinator.py``: a 4-branch plan and one approval group approved
at once, each transaction its own txnId, seat and traveller, every one
committed. One world (SQLite files) serves both ways of reaching it:

- in process: the coordinator calls the four ``ParticipantServer`` objects;
- over MCP: each participant is a server process of its own
  (``python -m hatp.demo._mcp_server ... --stdio`` on the same store), reached
  through an MCP client and :func:`hatp.mcp._participant_client.mcp_participant`.

The two are interleaved, one transaction each in turn, so both see the same
machine. A committed transaction makes two participant calls per branch
(prepare, commit), so the transport's cost per branch is
``(p50 over MCP - p50 in process) / 4``. Also shown: one ``status`` call, the
smallest round trip, each way.

Nothing here asserts a timing and the exit status is 0 whatever the figures.
``--quick`` shrinks every count so a test can smoke-run the script.
"""

# ruff: noqa: E402
from __future__ import annotations

import sys
from pathlib import Path

# This script is named mcp.py: run as a script, its folder comes first on sys.path
# and would hide the mcp SDK. Look there last (for _timing and _trip_rig).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, TextIO

from mcp import Client

from _timing import Timing
from _trip_rig import LOG, Rig
from hatp.demo._mcp_process import log_file, stdio_client_for
from hatp.demo.trip import PARTICIPANT_IDS, PAYMENTS
from hatp.mcp import McpLink
from hatp.participant import Participant
from hatp.store import DecisionLog

BRANCHES = 4


@dataclass(frozen=True)
class Settings:
    warm_up: int
    transactions: int
    status_calls: int


FULL = Settings(warm_up=5, transactions=60, status_calls=300)
QUICK = Settings(warm_up=1, transactions=3, status_calls=20)


def percentile(samples: Sequence[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def store_urls(folder: Path) -> dict[str, str]:
    """A SQLite file for the log and each participant, as the benchmark rig names them."""
    return {
        owner: f"sqlite:///{folder / f's{n}.db'}" for n, owner in enumerate([LOG, *PARTICIPANT_IDS])
    }


class McpSide:
    """The same world's participants, each a stdio MCP server process on its store."""

    def __init__(self, rig: Rig, urls: dict[str, str], errlog: TextIO) -> None:
        folder = rig.world.folder
        self.links = {
            pid: McpLink(
                pid, _stdio(folder, pid, errlog, urls[pid]), rig.world.keyring, timeout=30.0
            )
            for pid in PARTICIPANT_IDS
        }
        gateway = rig.world.gateway(rig.world.scripted_people("approve"))
        reach: dict[str, Participant] = dict(self.links)
        self.coordinator = rig.world.coordinator(
            DecisionLog(rig.log_store), gateway, links=reach, call_timeout=60.0
        )

    async def start(self) -> None:
        await asyncio.gather(*(link.connect() for link in self.links.values()))

    async def close(self) -> None:
        await asyncio.gather(*(link.aclose() for link in self.links.values()))


def _stdio(folder: Path, participant_id: str, errlog: TextIO, store: str) -> Callable[[], Client]:
    return lambda: stdio_client_for(folder, participant_id, errlog, store=store)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def run(folder: Path, settings: Settings) -> tuple[Timing, Timing, Timing, Timing]:
    """Interleaved transactions, then status calls; return (inproc, mcp) txn and call timings."""
    urls = store_urls(folder)
    rig = Rig(folder, urls, "mcp")
    errlog = log_file(folder, "servers")
    side = McpSide(rig, urls, errlog)
    try:
        await side.start()

        for _ in range(settings.warm_up):
            await rig.commit_one()
            await commit_over(rig, side)
        inproc, mcp = [], []
        txn_id = ""
        for _ in range(settings.transactions):
            inproc.append((await rig.commit_one())[0])
            elapsed, txn_id = await commit_over(rig, side)
            mcp.append(elapsed)
        # A committed branch to ask about: the smallest request and answer there is.
        local, remote = rig.world.participants[PAYMENTS], side.links[PAYMENTS]
        calls_in, calls_mcp = [], []
        for _ in range(settings.status_calls):
            calls_in.append(await timed(lambda: local.status(txn_id, "charge")))
            calls_mcp.append(await timed(lambda: remote.status(txn_id, "charge")))
        return (
            Timing(tuple(inproc)),
            Timing(tuple(mcp)),
            Timing(tuple(calls_in)),
            Timing(tuple(calls_mcp)),
        )
    finally:
        await side.close()
        errlog.close()
        rig.close()


async def commit_over(rig: Rig, side: McpSide) -> tuple[float, str]:
    """One transaction through the MCP links; its latency in seconds, and its txnId."""
    plan = rig.plan()
    started = time.perf_counter()
    outcome = await side.coordinator.run(plan)
    elapsed = time.perf_counter() - started
    if outcome.state.value != "committed":
        raise RuntimeError(f"{outcome.txn_id} ended {outcome.state}: {outcome.reason}")
    return elapsed, outcome.txn_id


def row(name: str, timing: Timing) -> str:
    samples = timing.samples
    return (
        f"{name:<22} p50 {timing.median * 1e3:8.2f} ms  "
        f"p90 {percentile(samples, 0.9) * 1e3:8.2f} ms  "
        f"best {timing.best * 1e3:8.2f} ms  ({len(samples)} samples)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    print(
        f"hatp MCP benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}, mcp {version('mcp')}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; SQLite files; SystemClock"
    )
    print(
        "workload: the demo trip, 4 branches (seat hold, room hold, calendar compensate, card "
        "charge final) + 1 approval group approved at once; in process vs each participant a "
        f"stdio MCP server process; interleaved, {settings.transactions} committed transactions "
        f"each way after {settings.warm_up} warm-up"
    )
    with tempfile.TemporaryDirectory(prefix="hatp-mcp-bench-") as tmp:
        inproc, mcp, call_in, call_mcp = asyncio.run(run(Path(tmp), settings))
    overhead = (mcp.median - inproc.median) / BRANCHES
    print()
    print(row("in process: txn", inproc))
    print(row("MCP (stdio): txn", mcp))
    print(row("in process: status", call_in))
    print(row("MCP (stdio): status", call_mcp))
    print()
    print(
        f"transport overhead per branch (p50, (MCP - in process) / {BRANCHES}): "
        f"{overhead * 1e3:.2f} ms; ratio MCP / in process {mcp.median / inproc.median:.2f}x"
    )
    print(
        f"one status round trip (p50): MCP {call_mcp.median * 1e3:.3f} ms vs in process "
        f"{call_in.median * 1e3:.3f} ms (+{(call_mcp.median - call_in.median) * 1e3:.3f} ms); "
        f"a committed branch makes 2 calls (prepare, commit)"
    )
    if statistics.median(mcp.samples) < statistics.median(inproc.samples):
        print("note: MCP measured faster than in process: noise; rerun without --quick")
    return 0


if __name__ == "__main__":
    sys.exit(main())
