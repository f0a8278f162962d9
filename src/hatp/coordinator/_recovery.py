"""Keeping a served coordinator's work finished: recovery at start, then a loop.

A process that holds the coordinator role (``hatp serve``) may die with
transactions open; so may any of several processes on one log. Every such
process runs a :class:`Recovery`: at start, and then every ``every`` seconds
on the coordinator's clock, it claims each open transaction whose owner's
lease has ended (:meth:`DecisionLog.claimable`) and finishes it from the log
in a task of its own ([COORD-RECOVER]): presumed abort if nothing was
decided, otherwise phase 2 by the logged decision. A transaction this
process already drives is never claimed twice; one another process claims
first is left to it (the log's lease decides, fenced). A store that fails is
logged and tried again at the next turn: the loop never ends on an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

from hatp.coordinator._coordinator import Coordinator, Outcome
from hatp.errors import HatpError

__all__ = ["Recovery", "RecoveryStats"]

_log = logging.getLogger(__name__)


@dataclass
class RecoveryStats:
    """What a :class:`Recovery` has done so far, for status pages and metrics."""

    #: Turns of the loop (the start-up one included).
    runs: int = 0
    #: Transactions claimed from an owner whose lease had ended.
    takeovers: int = 0
    #: Claimed transactions that ended (committed, aborted, needs-*) by this process.
    finished: int = 0
    #: Claimed transactions left open again (a participant still silent).
    left_open: int = 0
    #: Turns, or takeovers, that failed (the store did not answer, say).
    failures: int = 0
    #: The outcome of each transaction this process finished, by txn id (last 100).
    outcomes: dict[str, Outcome] = field(default_factory=dict)


class Recovery:
    """Finishes, in the background, every transaction a dead or stuck owner left open.

    Args:
        coordinator: claims and drives the transactions; its ``lease_seconds``
            says how soon an owner that stopped renewing loses one.
        every: seconds between two looks at the log (default: a third of the
            coordinator's lease), on the coordinator's clock.

    Use ``async with recovery.running():`` around the life of the process; or
    :meth:`turn` to look once.
    """

    def __init__(self, coordinator: Coordinator, *, every: float | None = None) -> None:
        self._coordinator = coordinator
        self._every = every if every is not None else max(0.1, coordinator.lease_seconds / 3)
        if self._every <= 0:
            raise ValueError("every must be a positive number of seconds")
        self._driving: dict[str, asyncio.Task[Outcome | None]] = {}
        self.stats = RecoveryStats()

    @property
    def every(self) -> float:
        """Seconds between two looks at the log."""
        return self._every

    @property
    def summary(self) -> str:
        """One line for a start-up banner: how soon a stopped owner's work is taken over."""
        return (
            "recovery: open transactions of a stopped owner taken over within "
            f"{self._coordinator.lease_seconds:g} s (looked for every {self._every:g} s)"
        )

    @property
    def driving(self) -> frozenset[str]:
        """The transactions this recovery is finishing now."""
        return frozenset(self._driving)

    async def turn(self) -> list[str]:
        """Look once: claim every open transaction whose owner's lease ended and that this
        recovery is not finishing already, each in a task of its own; return their ids.

        Raises:
            StoreUnavailable: the log could not be read; nothing was claimed.
        """
        coordinator = self._coordinator
        log = coordinator.log
        self.stats.runs += 1
        open_ids = await log.store.call(log.claimable, coordinator.clock.now())
        started = [txn_id for txn_id in open_ids if txn_id not in self._driving]
        for txn_id in started:
            task = asyncio.get_running_loop().create_task(self._finish(txn_id))
            self._driving[txn_id] = task
        return started

    async def settle(self) -> list[Outcome]:
        """Wait for every transaction claimed so far to be driven as far as it goes now;
        return the outcomes of those this process drove (not those another took)."""
        tasks = list(self._driving.values())
        done = await asyncio.gather(*tasks, return_exceptions=True)
        return [outcome for outcome in done if isinstance(outcome, Outcome)]

    async def run(self) -> None:
        """Look at start, then every :attr:`every` seconds, until cancelled."""
        clock = self._coordinator.clock
        while True:
            try:
                started = await self.turn()
            except HatpError as exc:  # StoreUnavailable above all: look again next turn
                self.stats.failures += 1
                _log.warning("recovery: the log could not be read: %s", exc)
            else:
                if started:
                    _log.info("recovery: claiming %s", ", ".join(started))
            await clock.sleep_until(clock.now() + timedelta(seconds=self._every))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Recovery]:
        """Run :meth:`run` in the background inside the ``with`` block; at its end stop
        looking and cancel what is still being finished (its lease then runs out, and
        the next owner takes the transaction up)."""
        loop = asyncio.get_running_loop().create_task(self.run(), name="hatp-recovery")
        try:
            yield self
        finally:
            loop.cancel()
            tasks = [loop, *self._driving.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _finish(self, txn_id: str) -> Outcome | None:
        try:
            outcome = await self._coordinator.resume(txn_id)
        except HatpError as exc:
            self.stats.failures += 1
            _log.warning("recovery: %s could not be taken over now: %s", txn_id, exc)
            return None
        except Exception:  # a bug must not end the loop: logged, tried again next turn
            self.stats.failures += 1
            _log.exception("recovery: taking over %s failed", txn_id)
            return None
        finally:
            self._driving.pop(txn_id, None)
        if outcome is None:
            return None  # another process claimed it first
        self.stats.takeovers += 1
        if outcome.state.finished:
            self.stats.finished += 1
        else:
            self.stats.left_open += 1
        self.stats.outcomes[txn_id] = outcome
        while len(self.stats.outcomes) > 100:
            self.stats.outcomes.pop(next(iter(self.stats.outcomes)))
        _log.info("recovery: %s is %s: %s", txn_id, outcome.state.value, outcome.reason)
        return outcome
