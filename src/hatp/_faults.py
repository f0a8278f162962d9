"""Named fault points: where a test may kill or freeze the process to prove crash safety.

Protocol code calls :func:`fault_point` at every boundary where a crash
matters (after each durable log write, before and after each phase-2 step).
When the environment variable ``HATP_CRASH_AT`` names that point, the process
sends itself SIGKILL there: no cleanup, no flush, exactly like a power cut as
far as the process is concerned. ``HATP_PAUSE_AT`` sends SIGSTOP instead: the
process freezes (a long GC pause, a suspended VM) until someone sends SIGCONT,
which is how a test shows that a stale owner is fenced off. Both are read
once, when this module is imported: a test sets them in the environment of
the process it starts. Unset (always, outside tests), a fault point costs
two comparisons.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "HATP_CRASH_AT"
PAUSE_ENV = "HATP_PAUSE_AT"
# Read once: a fault point is on every transaction's path, and an environment read
# (a key encoded, a value decoded) costs more than the comparison.
_CRASH_AT = os.environ.get(CRASH_ENV)
_PAUSE_AT = os.environ.get(PAUSE_ENV)


def fault_point(name: str) -> None:
    """Die here if ``HATP_CRASH_AT`` names this point; freeze here if ``HATP_PAUSE_AT`` does."""
    if name == _CRASH_AT:
        os.kill(os.getpid(), signal.SIGKILL)
    if name == _PAUSE_AT:
        os.kill(os.getpid(), signal.SIGSTOP)
