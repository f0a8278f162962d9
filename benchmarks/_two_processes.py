"""Throughput of two coordinator processes on one database, against one (issue 24).

The same committed trips as the in-flight batch of ``benchmarks/coordinator.py``
(:class:`~_trip_rig.Rig`, :func:`~_trip_rig.in_flight`), run by child processes
of the project's own Python, each this module run as
``python benchmarks/_two_processes.py trips``:

- **one process**: one child, ``width`` transactions in flight;
- **two processes**: two children at once, each with ``width`` in flight.

Each batch of a child runs on a fresh world of its own
(:meth:`~_trip_rig.Backend.fresh`: its participants' and its decision log's
schemas, and txnIds tagged by world), so the processes share only the database
server. Two children do it all: the first runs the one-process batch, then its
half of the two-process batch on its second world, while the second child runs
the other half (one interpreter fewer to start than three children: the smoke
run stays short). A child reads its job as one JSON line on stdin (not argv:
the URLs may carry a password), opens each of its worlds and warms it up,
prints ``ready``, and for each world waits for a start time on
``time.monotonic`` (one clock for every process of the machine), which the
parent gives every child of a batch at once: start-up, imports and warm-up are
not timed. It prints each :class:`~_trip_rig.Batch` as one JSON line, and
closes that world (its connections) before the next batch. A batch's
throughput is its committed transactions / (the last child's end - the first
child's start).

A transaction that does not commit ends its child with its traceback on stderr,
and :func:`measure` raises :class:`RuntimeError`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _trip_rig import LOG, Backend, Batch, Rig, in_flight
from hatp.demo.trip import PARTICIPANT_IDS

#: How far ahead of now a batch's start time is set: time for every child to read it.
_LEAD_SECONDS = 0.05
#: How long a child may take to open, warm up, or finish its batch.
_TIMEOUT_SECONDS = 300.0


class _Child:
    """One child process running ``batches`` batches, each on a fresh world of ``backend``."""

    def __init__(self, backend: Backend, batches: int, width: int, count: int, warmup: int) -> None:
        worlds = []
        for _ in range(batches):
            folder, tag, urls = backend.fresh([LOG, *PARTICIPANT_IDS])
            worlds.append({"folder": str(folder), "tag": tag, "urls": urls})
        job = {"worlds": worlds, "width": width, "count": count, "warmup": warmup}
        # stderr is inherited: a child's traceback shows in the benchmark's report.
        self._process = subprocess.Popen(
            [sys.executable, __file__, "trips"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._say(json.dumps(job))

    def _say(self, line: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def _hear(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait(timeout=_TIMEOUT_SECONDS)
            raise RuntimeError(f"a coordinator process ended (exit status {code}); see above")
        return line.strip()

    def ready(self) -> None:
        """Wait until the child has opened and warmed up its worlds."""
        if (said := self._hear()) != "ready":
            raise RuntimeError(f"a coordinator process said {said!r}, not 'ready'")

    def start(self, at: float) -> None:
        self._say(repr(at))

    def batch(self) -> Batch:
        """The child's batch, once it has run."""
        return Batch(**json.loads(self._hear()))

    def close(self) -> None:
        """Let the child end (a child waiting for a start time ends without running)."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()  # only this child, by its own handle
            self._process.wait()
        self._process.stdout.close()


def _release(children: list[_Child]) -> Batch:
    """Start every child's batch at one moment; their batches as one."""
    at = time.monotonic() + _LEAD_SECONDS
    for child in children:
        child.start(at)
    batches = [child.batch() for child in children]
    return Batch(
        [latency for batch in batches for latency in batch.latencies],
        min(batch.started for batch in batches),
        max(batch.ended for batch in batches),
    )


def measure(backend: Backend, width: int, count: int, warmup: int) -> tuple[Batch, Batch]:
    """One process's batch, then two processes' at once; ``count`` transactions each,
    ``width`` at a time, after ``warmup`` per world.

    Both children open and warm up all their worlds before anything is timed.
    """
    first, second = (_Child(backend, n, width, count, warmup) for n in (2, 1))
    children = [first, second]
    try:
        for child in children:
            child.ready()
        one = _release([first])
        two = _release(children)
    finally:
        for child in children:
            child.close()
    for batch, processes in ((one, 1), (two, 2)):
        if len(batch.latencies) != processes * count:  # each child's transactions all committed
            raise RuntimeError(f"{processes} process(es) committed {len(batch.latencies)}")
    return one, two


# --------------------------------------------------------------------------- a child


async def _trips(job: dict[str, Any]) -> None:
    """Open and warm up the job's worlds, say ready, and run a batch on each in turn,
    each when told to; print each batch, and close its world before the next."""
    rigs: list[Rig] = []
    try:
        for world in job["worlds"]:
            rigs.append(Rig(Path(world["folder"]), world["urls"], world["tag"]))
            await rigs[-1].warm_up(job["warmup"])
        print("ready", flush=True)
        while rigs:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:  # the parent gave up (another child failed)
                return
            await asyncio.sleep(max(0.0, float(line) - time.monotonic()))
            batch = await in_flight(rigs[0], job["count"], job["width"])
            rigs.pop(0).close()
            print(json.dumps(asdict(batch)), flush=True)
    finally:
        for rig in rigs:
            rig.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["trips"]:
        asyncio.run(_trips(json.loads(sys.stdin.readline())))
    else:
        raise SystemExit("usage: python benchmarks/_two_processes.py trips  (a job on stdin)")
