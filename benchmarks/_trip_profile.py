"""A cProfile listing of the coordinator benchmark's sequential transactions on SQLite.

CPU time (``time.thread_time``) of the event loop and of the participants' worker
threads, by own time and, for hatp's functions, by cumulative time. Used by
``benchmarks/coordinator.py --profile``.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hatp
from _trip_rig import ECONOMY, Backend, Rig

_WARM_UP = 2
# Each world has len(ECONOMY) seats: a batch and its warm-up must fit in one world.
_MOST = len(ECONOMY) - _WARM_UP


def profile_sqlite(folder: Path, count: int) -> None:
    """cProfile ``count`` sequential transactions on SQLite, CPU time of every thread."""
    backend = Backend("sqlite", folder / "profile")
    profilers: list[cProfile.Profile] = []

    def start_thread_profile() -> None:
        profiler = cProfile.Profile(time.thread_time)
        profilers.append(profiler)
        profiler.enable()

    async def batch(rig: Rig, size: int) -> None:
        executor = ThreadPoolExecutor(initializer=start_thread_profile)
        asyncio.get_running_loop().set_default_executor(executor)
        loop_profile.enable()
        for _ in range(size):
            await rig.commit_one()
        loop_profile.disable()

    loop_profile = cProfile.Profile(time.thread_time)
    done, wall = 0, 0.0
    while done < count:
        size = min(count - done, _MOST)
        with backend.rig() as rig:
            asyncio.run(rig.warm_up(_WARM_UP))
            started = time.perf_counter()
            asyncio.run(batch(rig, size))  # shuts the executor down: its threads are done
            wall += time.perf_counter() - started
        done += size
    stats = pstats.Stats(loop_profile)
    for profiler in profilers:
        stats.add(profiler)
    cpu = stats.get_stats_profile().total_tt
    print(
        f"\n--- cProfile: {count} sequential transactions on SQLite, CPU time (time.thread_time) "
        f"of the event loop and the participants' worker threads: {cpu / count * 1e3:.1f} ms "
        f"CPU per transaction ({wall / count * 1e3:.1f} ms wall under the profiler); "
        "waits (fsync, locks, the GIL) are not CPU and not in it. cProfile's cost per call "
        "inflates code made of many small calls (deepcopy, SQLAlchemy) several-fold: read it "
        "for what calls what; the instrumented split above has the wall time ---"
    )
    for title, order, limit in (
        ("by own time", "tottime", (30,)),
        ("hatp's functions by cumulative time", "cumulative", (_own_code(), 40)),
    ):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(*limit)
        print(f"\n{title}:")
        print(out.getvalue().split("\n", 4)[-1].rstrip())


def _own_code() -> str:
    return re.escape(str(Path(hatp.__file__).parent))
