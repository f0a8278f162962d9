"""Process CPU per committed trip, for comparing two versions of hatp in one sitting.

Run with ``.venv/bin/python benchmarks/trip_cpu.py`` (SQLite, and PostgreSQL on
``--postgres`` when a server answers). It runs the coordinator benchmark's
trip (:class:`~_trip_rig.Rig`) in batches of sequential transactions on one
world and prints, per database, the process CPU (``time.process_time``, the
participants' threads included) per transaction of each batch and the least
of them: on a shared machine the least batch is the one the least disturbed.

To measure a change, run it from two checkouts (each puts its own ``src`` first
with ``PYTHONPATH=<checkout>/src``) in turns, several times, and compare the
least figures; ``docs/design-notes.md`` records figures taken so. ``--quick``
runs one short batch, for a smoke test. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import hatp
from _trip_rig import ECONOMY, Backend, Rig, create_database, drop_database

_WARM_UP = 2


def _batch(rig: Rig, count: int) -> float:
    """CPU seconds per transaction of ``count`` sequential ones."""

    async def run() -> None:
        for _ in range(count):
            await rig.commit_one()

    started = time.process_time()
    asyncio.run(run())
    return (time.process_time() - started) / count


def measure(backend: Backend, batches: int, count: int) -> list[float]:
    """Milliseconds of CPU per transaction of each batch, on one world."""
    if _WARM_UP + batches * count > len(ECONOMY):
        raise ValueError(f"one world holds {len(ECONOMY)} transactions")
    with backend.rig() as rig:
        asyncio.run(rig.warm_up(_WARM_UP))
        return [_batch(rig, count) * 1e3 for _ in range(batches)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one batch of 3, for a smoke run")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--count", type=int, default=40, help="transactions per batch")
    parser.add_argument(
        "--postgres",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="server to create a database on (dropped at the end)",
    )
    args = parser.parse_args(argv)
    batches, count = (1, 3) if args.quick else (args.batches, args.count)
    print(f"hatp from {Path(hatp.__file__).parent}; {batches} batches of {count}")
    with tempfile.TemporaryDirectory(prefix="hatp-trip-cpu-") as folder:
        url, said = create_database(args.postgres)
        backends = [Backend("sqlite", Path(folder) / "sqlite")]
        if url is not None:
            backends.append(Backend("postgresql", Path(folder) / "postgresql", url))
        try:
            for backend in backends:
                figures = measure(backend, batches, count)
                shown = " ".join(f"{ms:.2f}" for ms in figures)
                print(f"{backend.name:<11} cpu ms/txn {shown}  least {min(figures):.2f}")
        finally:
            if url is not None:
                drop_database(args.postgres, url)
        if url is None:
            print(f"postgresql  skipped: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
