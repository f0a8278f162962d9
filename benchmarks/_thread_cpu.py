"""CPU time of this process's threads, by what they do (Linux: ``/proc/self/task``).

A committed trip runs on three kinds of thread: the event loop (the
coordinator, the gateway, the record writer, the vetting of what comes back),
the loop's executor threads (the in-process participants' calls, handed off
so that a participant's database cannot freeze the loop), and each store's
workers (the decision log's and the gateway's store calls). Splitting a trip's
CPU between them says which layer a saving has to come from.

Each thread's time on a CPU is read from ``/proc/self/task/<tid>/schedstat``
(nanoseconds, the kernel's work for the thread included: a commit's writes
and flush, the futexes of a hand-off), not from ``getrusage``, whose
per-thread figures tick in hundredths of a second. Used by
``benchmarks/coordinator.py``; on a system without ``/proc`` nothing is split.
"""

from __future__ import annotations

import threading
from pathlib import Path

LOOP = "event loop"
PARTICIPANTS = "participants' calls"
STORES = "store workers"
OTHER = "other threads"
#: The roles, in the order they are printed.
ROLES = (LOOP, PARTICIPANTS, STORES, OTHER)

_TASKS = Path("/proc/self/task")
# The threads hatp's stores start (hatp.store._offloop.Workers) and the ones
# asyncio's default executor starts (ThreadPoolExecutor's thread_name_prefix).
_STORE_PREFIX = "hatp-store-"
_EXECUTOR_PREFIX = "asyncio_"


def snapshot() -> dict[int, int] | None:
    """Nanoseconds on a CPU of each live thread of this process, by native thread id;
    ``None`` where ``/proc`` does not say."""
    if not _TASKS.is_dir():
        return None
    found: dict[int, int] = {}
    for task in _TASKS.iterdir():
        try:
            found[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended as it was read
    return found


def split(before: dict[int, int] | None, after: dict[int, int] | None) -> dict[str, float]:
    """Seconds on a CPU between two snapshots, by role (:data:`ROLES`), for threads alive
    at ``after``; one started in between counts from zero. Call it from the loop's own
    thread (the one :func:`snapshot`'s caller runs the event loop on)."""
    if before is None or after is None:
        return {}
    spent = dict.fromkeys(ROLES, 0.0)
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    loop = threading.get_native_id()
    for tid, nanoseconds in after.items():
        spent[_role(tid, names.get(tid, ""), loop)] += (nanoseconds - before.get(tid, 0)) / 1e9
    return spent


def _role(tid: int, name: str, loop: int) -> str:
    if tid == loop:
        return LOOP
    if name.startswith(_STORE_PREFIX):
        return STORES
    if name.startswith(_EXECUTOR_PREFIX):
        return PARTICIPANTS
    return OTHER
