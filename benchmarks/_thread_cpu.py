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


#: A snapshot: each live thread's role and nanoseconds on a CPU, by native thread id.
Snapshot = dict[int, tuple[str, int]]


def snapshot() -> Snapshot | None:
    """Each live thread of this process: its role (:data:`ROLES`, told when the snapshot is
    taken, while the thread is alive to be named) and its nanoseconds on a CPU; ``None``
    where ``/proc`` does not say. Take it on the event loop's thread: the caller is the
    loop."""
    if not _TASKS.is_dir():
        return None
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    loop = threading.get_native_id()
    found: Snapshot = {}
    for task in _TASKS.iterdir():
        try:
            tid = int(task.name)
            nanoseconds = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended as it was read
        found[tid] = (_role(tid, names.get(tid, ""), loop), nanoseconds)
    return found


def split(before: Snapshot | None, after: Snapshot | None) -> dict[str, float]:
    """Seconds on a CPU between two snapshots, by role (:data:`ROLES`), for the threads
    alive at ``after``; one started in between counts from zero (a thread that ended in
    between is not counted)."""
    if before is None or after is None:
        return {}
    spent = dict.fromkeys(ROLES, 0.0)
    for tid, (role, nanoseconds) in after.items():
        earlier = before.get(tid, (role, 0))[1]
        if earlier > nanoseconds:  # the id of a thread that ended, taken by a new one
            earlier = 0
        spent[role] += (nanoseconds - earlier) / 1e9
    return spent


def _role(tid: int, name: str, loop: int) -> str:
    if tid == loop:
        return LOOP
    if name.startswith(_STORE_PREFIX):
        return STORES
    if name.startswith(_EXECUTOR_PREFIX):
        return PARTICIPANTS
    return OTHER
