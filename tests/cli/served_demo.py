"""A running ``hatp serve --demo`` for the ``hatp txn`` tests: a process of its own, over
TCP (the fixtures ``demo`` and ``demo_sqlite`` are in this folder's conftest)."""

from __future__ import annotations

import asyncio
import json
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hatp.http import CoordinatorClient

#: How long starting the server, a transaction's run, and stopping may each take, at most.
BOUND = 60.0
SERVE = "from hatp.cli import main; main()"


class Demo:
    """A running ``hatp serve --demo``: its URL and its world's folder."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder

    def plan(self, txn_id: str, seat: str = "14C") -> dict[str, Any]:
        """The demo's trip plan under another ``txnId``, for ``seat`` (one seat, one plan)."""
        plan = json.loads((self.folder / "trip-plan.json").read_text(encoding="utf-8"))["plan"]
        for branch in plan["branches"]:
            if branch["branchId"] == "seat":
                branch["args"]["seat"] = seat
        return {**plan, "txnId": txn_id}

    def plan_file(self, txn_id: str, to: Path) -> Path:
        """The demo's trip plan under another ``txnId``, written to ``to``."""
        to.write_text(json.dumps(self.plan(txn_id)), encoding="utf-8")
        return to

    def finished(self, *txn_ids: str) -> dict[str, str]:
        """Wait (bounded) until each transaction is committed or aborted; their states."""

        async def go() -> dict[str, str]:
            async with CoordinatorClient(self.url) as client:
                start = time.monotonic()
                while True:
                    states = {t: (await client.state(t))["state"] for t in txn_ids}
                    if all(s in ("committed", "aborted") for s in states.values()):
                        return states
                    if time.monotonic() - start > BOUND:
                        raise AssertionError(f"not finished within {BOUND:g} s: {states}")
                    await asyncio.sleep(0.05)

        return asyncio.run(go())


def serving(folder: Path, db: str) -> Iterator[Demo]:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--demo", "--port", "0",
         "--demo-folder", str(folder / "demo"), "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], BOUND)
        url = process.stdout.readline().decode().strip() if ready else ""
        assert url.startswith("http://127.0.0.1:"), f"hatp serve did not start: {url!r}"
        yield Demo(url, folder / "demo")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(BOUND)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
