"""Named fault points: where a test may kill or freeze the process to prove crash safety.

Protocol code calls :func:`fault_point` at every boundary where a crash
matters (after each durable log write, before and after each phase-2 step).
When the environment variable ``HATP_CRASH_AT`` names that point, the process
sends itself SIGKILL there: no cleanup, no flush, exactly like a power cut as
far as the process is concerned. ``HATP_PAUSE_AT`` sends SIGSTOP instead: the
process freezes (a long GC pause, a suspended VM) until someone sends SIGCONT,
which is how a test shows that a stale owner is fenced off. Unset (always,
outside tests), a fault point costs two dictionary lookups.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "HATP_CRASH_AT"
PAUSE_ENV = "HATP_PAUSE_AT"


def fault_point(name: str) -> None:
    """Die here if ``HATP_CRASH_AT`` names this point; freeze here if ``HATP_PAUSE_AT`` does."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_ENV) == name:
        os.kill(os.getpid(), signal.SIGSTOP)
