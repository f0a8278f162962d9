"""Racing calls against each other, on threads released at the same moment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls at once, each on its own thread, released together; return results."""
    gate = threading.Barrier(len(calls), timeout=30)

    def run(call: Callable[[], Any]) -> Any:
        gate.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        return [f.result(timeout=60) for f in futures]
