"""How soon a stored vote wakes the coordinator waiting for it (issue 24).

The latency measured is from the moment an approving vote that decides its
ask is stored (the ask store's UPDATE committed) to the moment the
coordinator has logged its decision (its observer told ``committing``), on
``time.monotonic``, which is one clock for every process of the machine.

- **In one process**: a coordinator and acme's Human Gateway in process; the
  vote is submitted to that gateway, which wakes its own long poll.
- **In two processes** (PostgreSQL): the coordinator's process runs its
  gateway's loop, listening for other processes' ask writes ([GW-LISTEN]);
  the vote is taken by a gateway in another process (this module run as
  ``python benchmarks/_wakeup.py voter FOLDER ASKS_URL``) on the same
  database. Without LISTEN/NOTIFY it would be seen only at the recheck
  (``recheck_seconds``), which this run sets to :data:`RECHECK_SECONDS`.
  SQLite has no notifications: across processes it polls at that interval.

Each plan runs holds-first, so the ask is made once every step is prepared,
and the vote is the only thing the decision still waits for.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from _trip_rig import ECONOMY, Backend
from hatp.clock import SystemClock
from hatp.demo.trip import CARD, GATEWAY, PARTICIPANT_IDS, TripWorld, trip_plan
from hatp.gateway import HumanGateway, MemoryChannel, Notice, sign_vote
from hatp.gateway._notices import notice as notice_of
from hatp.model import TxnState
from hatp.store import AskRow, AskState, AskStore, DecisionLog, open_store

#: How often a gateway reads a waited ask again for a vote another process took: the
#: fallback LISTEN/NOTIFY makes unnecessary on PostgreSQL, and SQLite's only way.
RECHECK_SECONDS = 2.0
#: The pause between a person being notified and voting, so that the coordinator
#: is waiting in its long poll (not still recording the ask) when the vote comes.
_SETTLE_SECONDS = 0.02


class StampedAsks(AskStore):
    """An ask store that notes, on ``time.monotonic``, when a stored update decided an ask."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.decided_at: dict[str, float] = {}

    def update(self, row: AskRow, now: datetime, **kwargs: Any) -> AskRow:
        stored = super().update(row, now, **kwargs)
        if row.state is AskState.DECIDED:
            self.decided_at.setdefault(row.ask_id, time.monotonic())
        return stored


@dataclass
class DecisionStamps:
    """A coordinator observer noting when each transaction's decision was logged."""

    logged_at: dict[str, float] = field(default_factory=dict)

    def txn_changed(self, txn_id: str, state: TxnState, at: datetime) -> None:
        if state in (TxnState.COMMITTING, TxnState.ABORTING):
            self.logged_at.setdefault(txn_id, time.monotonic())


@dataclass(frozen=True)
class WakeupResult:
    """Vote stored → decision logged, in seconds, one sample per transaction."""

    where: str
    samples: list[float]


class _Coordinating:
    """A coordinator, its gateway (loop running) and an inbox nobody answers by itself."""

    def __init__(self, folder: Path, urls: dict[str, str], asks_url: str, log_url: str) -> None:
        self.clock = SystemClock()
        self.world = TripWorld.open(
            folder, self.clock, rooms=len(ECONOMY), store_urls=urls, seats_free=True
        )
        self.world.edit_card(CARD, "1000000.00")
        self.asks = StampedAsks(open_store(asks_url))
        self.log_store = open_store(log_url)
        self.inbox = MemoryChannel("terminal")
        self.gateway = HumanGateway(
            GATEWAY,
            self.world.keys["gateway"],
            self.world.directory,
            self.asks,
            [self.inbox],
            self.clock,
            recheck_seconds=RECHECK_SECONDS,
        )
        self.stamps = DecisionStamps()
        self.coordinator = self.world.coordinator(DecisionLog(self.log_store), self.gateway)
        self.coordinator.observe(self.stamps)
        self._seats = iter(ECONOMY)
        self._count = 0

    def plan(self) -> dict[str, Any]:
        number, self._count = self._count, self._count + 1
        return trip_plan(
            f"wake-{time.time_ns()}-{number}",
            decide_by=self.clock.now() + timedelta(minutes=10),
            seat=next(self._seats),
            traveller=f"human://acme.com/traveller-wake-{number}",
            mode="holds-first",
        )

    async def notified(self, txn_id: str) -> Notice:
        """The first notice of ``txn_id``'s ask, once one is delivered."""
        while True:
            for human in self.world.people:
                for notice in self.inbox.inbox(human):
                    if notice.payload["txnId"] == txn_id:
                        return notice
            await asyncio.sleep(0.001)

    def close(self) -> None:
        self.world.close()
        self.asks.store.close()
        self.log_store.close()


async def _one_process(rig: _Coordinating, count: int) -> list[float]:
    samples = []
    rig.gateway.start()
    try:
        for _ in range(count):
            plan = rig.plan()
            running = asyncio.create_task(rig.coordinator.run(plan))
            notice = await rig.notified(plan["txnId"])
            await asyncio.sleep(_SETTLE_SECONDS)
            key = rig.world.people[notice.human]
            vote = sign_vote(key, notice.payload, "approve", rig.clock.now())
            await rig.gateway.submit_vote(notice.payload["askId"], vote)
            outcome = await running
            if outcome.state is not TxnState.COMMITTED:
                raise RuntimeError(f"{outcome.txn_id} ended {outcome.state}: {outcome.reason}")
            ask_id = notice.payload["askId"]
            samples.append(rig.stamps.logged_at[plan["txnId"]] - rig.asks.decided_at[ask_id])
    finally:
        await rig.gateway.stop()
    return samples


async def _two_processes(
    rig: _Coordinating, folder: Path, asks_url: str, count: int
) -> list[float]:
    samples = []
    voter = subprocess.Popen(
        [sys.executable, __file__, "voter", str(folder), asks_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert voter.stdin is not None and voter.stdout is not None
    rig.gateway.start()
    try:
        if voter.stdout.readline().strip() != "ready":
            raise RuntimeError("the voting process did not start")
        while not rig.gateway.listening and rig.asks.store.dialect == "postgresql":
            await asyncio.sleep(0.01)
        for _ in range(count):
            plan = rig.plan()
            running = asyncio.create_task(rig.coordinator.run(plan))
            notice = await rig.notified(plan["txnId"])
            await asyncio.sleep(_SETTLE_SECONDS)
            voter.stdin.write(
                json.dumps({"askId": notice.payload["askId"], "human": notice.human}) + "\n"
            )
            voter.stdin.flush()
            stored_at = float(await asyncio.to_thread(voter.stdout.readline))
            outcome = await running
            if outcome.state is not TxnState.COMMITTED:
                raise RuntimeError(f"{outcome.txn_id} ended {outcome.state}: {outcome.reason}")
            samples.append(rig.stamps.logged_at[plan["txnId"]] - stored_at)
    finally:
        await rig.gateway.stop()
        voter.stdin.close()
        voter.wait(timeout=30)
    return samples


def measure(backend: Backend, count: int, *, across: bool) -> WakeupResult:
    """``count`` samples of vote stored → decision logged on a fresh world of ``backend``;
    ``across``: the vote taken by another process."""
    folder, _, urls = backend.fresh(["asks", "log", *PARTICIPANT_IDS])
    participant_urls = {pid: urls[pid] for pid in PARTICIPANT_IDS}
    with _rig(folder, participant_urls, urls["asks"], urls["log"]) as rig:
        if across:
            samples = asyncio.run(_two_processes(rig, folder, urls["asks"], count))
        else:
            samples = asyncio.run(_one_process(rig, count))
    return WakeupResult("two processes" if across else "one process", samples)


@contextmanager
def _rig(
    folder: Path, urls: dict[str, str], asks_url: str, log_url: str
) -> Iterator[_Coordinating]:
    rig = _Coordinating(folder, urls, asks_url, log_url)
    try:
        yield rig
    finally:
        rig.close()


# --------------------------------------------------------------------------- the voter


async def _vote_from_stdin(folder: Path, asks_url: str) -> None:
    """The other process: a gateway on the same asks; for each ``{askId, human}`` line,
    that person's approving vote, and the moment it was stored printed back."""
    clock = SystemClock()
    world = TripWorld.open(folder, clock, rooms=len(ECONOMY))
    asks = StampedAsks(open_store(asks_url))
    gateway = HumanGateway(
        GATEWAY, world.keys["gateway"], world.directory, asks, [MemoryChannel("terminal")], clock
    )
    print("ready", flush=True)
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            asked = json.loads(line)
            row = await asks.store.call(asks.get, asked["askId"])
            entry = next(p for p in row.doc["people"] if p["id"] == asked["human"])
            payload = notice_of(row, entry).payload  # what the person was sent, to sign
            key = world.people[asked["human"]]
            vote = sign_vote(key, payload, "approve", clock.now())
            await gateway.submit_vote(asked["askId"], vote)
            print(repr(asks.decided_at[asked["askId"]]), flush=True)
    finally:
        world.close()
        asks.store.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["voter"]:
        asyncio.run(_vote_from_stdin(Path(sys.argv[2]), sys.argv[3]))
    else:
        raise SystemExit("usage: python benchmarks/_wakeup.py voter FOLDER ASKS_URL")
