"""Kill-loop soak: coordinators killed or frozen at random moments, recovered, and judged.

Run with ``.venv/bin/python benchmarks/soak.py [--runs N] [--db sqlite|postgresql|both]
[--seed S]``. Each run, on each database the decision log is kept in:

1. copies a freshly stocked trip world (:mod:`hatp.demo.trip`: four participants,
   each on a SQLite file with its ledger) into a folder of its own;
2. starts a coordinator process that drives one to three trip transactions at
   once (each with its own seat), set up as the run's seed draws: the people
   approve or reject, the hotel is sold out or not, the card is edited before
   the first capture (the trip unwinds) or not, and at most one participant-side
   fault (:mod:`hatp.demo._faulty`: its store full or unreachable, the
   participant silent, its reply lost) sits at prepare, commit, abort or
   compensate of one participant;
3. kills it: SIGKILL at a named fault point, or after a random delay; or
   SIGSTOP after a random delay and then SIGKILL, or SIGCONT (sometimes with
   a recovering process racing it while it is frozen); or lets it finish;
4. recovers in a fresh process whose participants are healthy
   (``Coordinator.recover``, again until nothing of the run is open);
5. checks every transaction of the run: it is finished, committed or
   aborted, in the log; committed, every participant holds the whole effect,
   aborted, none (never a mix, never twice, by each participant's ledger); its
   record ends in one outcome, is sealed, and verifies offline; a transaction
   the log never heard of left nothing anywhere.

Processes are forked from a server that imported hatp once (multiprocessing's
``forkserver``), so a run costs a fork and not an interpreter start.

Prints one line per violation and a summary line per database. Exit status:
0 clean, 1 on any violation, 2 when PostgreSQL was asked for under ``CI=true``
and no server answers (without CI it is reported skipped).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from hatp._faults import CRASH_ENV
from hatp.clock import SystemClock
from hatp.demo._child import SERVICES, open_coordinator
from hatp.demo._faulty import FAULT_KINDS
from hatp.demo.trip import TripWorld, trip_plan
from hatp.errors import TransactionUnknown
from hatp.evidence import verify_record
from hatp.model import Result, TxnState
from hatp.store import DecisionLog, open_store

DEFAULT_POSTGRES = os.environ.get(
    "HATP_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
#: A coordinator's ownership lease here: short, so recovery waits little after a kill.
LEASE_SECONDS = 0.4
#: What each coordinator is given (the first one gives up on a silent participant soon).
OPTIONS: dict[str, Any] = {
    "lease_seconds": LEASE_SECONDS,
    "poll_seconds": 1.0,
    "call_timeout": 5.0,
    "retry_delay": 0.02,
    "retry_cap": 0.2,
    "max_attempts": 4,
}
#: The longest a coordinator or recovery process may take before it counts as hung.
BOUND_SECONDS = 30.0
#: How often recovery is run again while something of the run is still open.
RECOVERY_PASSES = 6
#: How long a recovering process races a frozen coordinator before it is thawed.
RACE_SECONDS = 1.5
#: Economy seats (business ones cost more than the plan allows): one per trip of a run.
SEATS = ("14C", "15D", "16E")
#: The named fault points a run may be killed at (those a trip does not pass are not hit).
BRANCHES = ("seat", "room", "calendar", "charge")
POINTS = (
    "log.planned",
    *(f"prepared.after:{b}" for b in BRANCHES),
    "log.decided",
    *(f"commit.{when}:{b}" for b in BRANCHES for when in ("before", "after")),
    "log.in-doubt",
    "log.committing",
    "log.unwinding",
    *(f"aborted.after:{b}" for b in BRANCHES),
    "compensated.after:calendar",
    "log.outcome",
    *(
        f"participant.{m}.{when}"
        for m in ("prepare", "commit", "abort")
        for when in ("staged", "done")
    ),
)
KILLS = ("point", "kill", "stop-kill", "stop-cont", "stop-race", "none")
KILL_WEIGHTS = (3, 3, 1, 1, 1, 1)
FAULT_METHODS = ("prepare", "commit", "abort", "compensate")


@dataclass(frozen=True)
class Run:
    """What one run does, drawn from the seed."""

    index: int
    txn_ids: tuple[str, ...]
    decision: str  # approve | reject
    rooms: int  # 0: the hotel is sold out
    edit_card: str  # the card's credit set to this before the first capture; "" not edited
    faults: str  # a fault spec (hatp.demo._faulty); "" none
    kill: str  # one of KILLS
    point: str  # the fault point, when kill == "point"
    delay: float  # seconds before the signal (kill, stop-*)
    pause: float  # seconds frozen (stop-kill, stop-cont)

    def describe(self) -> str:
        how = self.point if self.kill == "point" else f"{self.kill} after {self.delay:.2f} s"
        parts = [f"{len(self.txn_ids)} trip(s)", self.decision, how]
        if self.rooms == 0:
            parts.append("sold out")
        if self.edit_card:
            parts.append("card edited")
        if self.faults:
            parts.append(f"fault {self.faults}")
        return ", ".join(parts)


def draw(
    rng: random.Random, index: int, prefix: str, span: float, kinds: tuple[str, ...] = FAULT_KINDS
) -> Run:
    """Draw one run's set-up; ``span`` is about how long a coordinator takes, ``kinds`` the
    participant faults to draw from."""
    trips = rng.choice((1, 1, 2, 3))
    faults = ""
    if rng.random() < 0.5:
        method = rng.choice(FAULT_METHODS)
        service = "calendar" if method == "compensate" else rng.choice(tuple(SERVICES))
        times = rng.choice(("", "", "*1", "*2"))
        faults = f"{service}.{method}={rng.choice(kinds)}{times}"
    return Run(
        index=index,
        txn_ids=tuple(f"{prefix}-{index}-{k}" for k in range(trips)),
        decision="reject" if rng.random() < 0.25 else "approve",
        rooms=0 if rng.random() < 0.1 else 3,
        edit_card="4000.00" if rng.random() < 0.15 else "",
        faults=faults,
        kill=rng.choices(KILLS, KILL_WEIGHTS)[0],
        point=rng.choice(POINTS),
        delay=rng.uniform(0.0, span),
        pause=rng.uniform(0.0, 2 * LEASE_SECONDS),
    )


# --------------------------------------------------------------------- in the child processes


def _quiet_into(path: Path) -> None:
    """Send this process's stdout, stderr and log lines to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True)


def coordinator_child(folder: str, log_url: str, run: Run) -> None:
    """A coordinator process: run the run's trips at once, as the run says."""
    _quiet_into(Path(folder) / "coordinator.log")
    if run.kill == "point":
        os.environ[CRASH_ENV] = run.point
    asyncio.run(_drive(Path(folder), log_url, run))


async def _drive(folder: Path, log_url: str, run: Run) -> None:
    clock = SystemClock()
    coordinator, _, gateway = open_coordinator(
        folder,
        clock,
        log_url=log_url,
        decision=run.decision,
        edit_card=run.edit_card,
        faults=run.faults,
        **OPTIONS,
    )
    decide_by = clock.now() + timedelta(minutes=10)
    plans = [
        trip_plan(txn_id, decide_by=decide_by, seat=seat)
        for txn_id, seat in zip(run.txn_ids, SEATS, strict=False)
    ]
    gateway.start()
    try:
        outcomes = await asyncio.gather(
            *(coordinator.run(plan) for plan in plans), return_exceptions=True
        )
    finally:
        await gateway.stop()
    for outcome in outcomes:
        print(outcome if isinstance(outcome, BaseException) else (outcome.txn_id, outcome.state))


def recovery_child(folder: str, log_url: str, txn_ids: tuple[str, ...]) -> None:
    """A recovering process with healthy participants: recover until nothing of
    ``txn_ids`` is open, or :data:`RECOVERY_PASSES` passes were made."""
    _quiet_into(Path(folder) / "recovery.log")
    asyncio.run(_recover_all(Path(folder), log_url, txn_ids))


async def _recover_all(folder: Path, log_url: str, txn_ids: tuple[str, ...]) -> None:
    clock = SystemClock()
    coordinator, log, _ = open_coordinator(
        folder, clock, log_url=log_url, decision="never", **{**OPTIONS, "max_attempts": 6}
    )
    mine = set(txn_ids)
    for _ in range(RECOVERY_PASSES):
        give_up = time.monotonic() + 4 * LEASE_SECONDS + 1.0
        while True:
            open_now = mine & set(log.open_transactions())
            if not open_now:
                return
            if open_now & set(log.claimable(clock.now())) or time.monotonic() > give_up:
                break
            await asyncio.sleep(0.02)
        outcomes = await coordinator.recover()
        print([(o.txn_id, o.state.value, o.reason) for o in outcomes])


# --------------------------------------------------------------------- in the soak's process


@dataclass
class Tally:
    """What one database's soak saw."""

    runs: int = 0
    states: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    faults: int = 0
    violations: list[str] = field(default_factory=list)


def _signal(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the child; one that has ended (and been reaped) meanwhile, after its
    last check or by a SIGKILL just sent, has nothing left to stop or wake."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


class Soak:
    """Runs and judges the runs on one database (``log_url``: None for a SQLite file per run)."""

    def __init__(self, name: str, log_url: str | None, work: Path, span: float) -> None:
        self.name = name
        self.log_url = log_url
        self.work = work
        self.span = span
        self.tally = Tally()
        self._context = multiprocessing.get_context("forkserver")
        self._templates = {rooms: self._template(rooms) for rooms in (0, 3)}

    def _template(self, rooms: int) -> Path:
        folder = self.work / f"template-{rooms}"
        TripWorld.open(folder, SystemClock(), rooms=rooms).close()
        return folder

    def one(self, run: Run) -> None:
        folder = self.work / f"{self.name}-{run.index}"
        shutil.copytree(self._templates[run.rooms], folder)
        log_url = self.log_url or f"sqlite:///{folder / 'coordinator.db'}"
        problems = self._kill(run, str(folder), log_url)
        recovery = self._start(recovery_child, str(folder), log_url, run.txn_ids)
        problems += _joined(recovery, "recovery")
        problems += self._judge(run, folder, log_url)
        self.tally.runs += 1
        self.tally.kills[run.kill] += 1
        self.tally.faults += bool(run.faults)
        for problem in problems:
            line = f"{self.name} run {run.index} ({run.describe()}): {problem}"
            self.tally.violations.append(line)
            print(f"VIOLATION {line}", flush=True)
            for log_name in ("coordinator.log", "recovery.log"):
                print(_tail(folder / log_name), flush=True)

    def _start(self, target: Callable[..., None], *args: Any) -> BaseProcess:
        process = self._context.Process(target=target, args=args, daemon=True)
        process.start()
        return process

    def _kill(self, run: Run, folder: str, log_url: str) -> list[str]:
        child = self._start(coordinator_child, folder, log_url, run)
        pid = child.pid or 0
        if run.kill in ("point", "none"):
            return _joined(child, "coordinator")
        child.join(run.delay)
        if not child.is_alive():
            return _joined(child, "coordinator")
        if run.kill == "kill":
            child.kill()
            return _joined(child, "coordinator")
        _signal(pid, signal.SIGSTOP)
        if run.kill == "stop-race":  # a new owner takes over while the old one is frozen
            racer = self._start(recovery_child, folder, log_url, run.txn_ids)
            racer.join(RACE_SECONDS)
            _signal(pid, signal.SIGCONT)
            return _joined(racer, "racing recovery") + _joined(child, "thawed coordinator")
        time.sleep(run.pause)  # frozen: a long GC pause, a suspended VM
        if run.kill == "stop-kill":
            child.kill()
        _signal(pid, signal.SIGCONT)
        return _joined(child, "coordinator")

    def _judge(self, run: Run, folder: Path, log_url: str) -> list[str]:
        problems: list[str] = []
        with TripWorld.open(folder, SystemClock()) as world, _log(log_url) as log:
            for txn_id in run.txn_ids:
                effects = world.effects(txn_id)
                try:
                    state = log.get(txn_id).state
                except TransactionUnknown:
                    self.tally.states["never logged"] += 1
                    if set(effects.values()) != {"none"}:
                        problems.append(f"{txn_id} was never logged, yet left {effects}")
                    continue
                self.tally.states[state.value] += 1
                problems += _judged(txn_id, state, effects, log.record(txn_id), world)
        return problems


def _judged(
    txn_id: str, state: TxnState, effects: dict[str, str], record: dict[str, Any], world: TripWorld
) -> list[str]:
    """What is wrong with one logged transaction after recovery (nothing: ``[]``)."""
    if state not in (TxnState.COMMITTED, TxnState.ABORTED):
        return [f"{txn_id} is {state.value} after recovery"]
    problems = []
    wanted = "whole" if state is TxnState.COMMITTED else "none"
    if set(effects.values()) != {wanted}:
        problems.append(f"{txn_id} is {state.value} but the ledgers show {effects}")
    types = [event["type"] for event in record["events"]]
    if types.count("txn.outcome") != 1 or types[-1] != "record.sealed":
        problems.append(
            f"{txn_id}'s record has {types.count('txn.outcome')} outcomes, ends {types[-1]}"
        )
    report = verify_record(record, world.keyring)
    failed = [f"{f.rule}: {f.detail}" for f in report.findings if f.result is not Result.PASS]
    if not report.ok or failed:
        problems.append(f"{txn_id}'s record does not verify: {failed}")
    return problems


def _joined(process: BaseProcess, what: str) -> list[str]:
    """Wait (bounded) for a process to end; a hung one is killed and reported."""
    process.join(BOUND_SECONDS)
    if process.is_alive():
        process.kill()
        process.join()
        return [f"the {what} process did not end within {BOUND_SECONDS:g} s"]
    return []


@contextlib.contextmanager
def _log(url: str) -> Iterator[DecisionLog]:
    store = open_store(url)
    try:
        yield DecisionLog(store)
    finally:
        store.close()


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return f"  ({path.name}: nothing written)"
    kept = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    return "\n".join(f"  {path.name}: {line}" for line in kept)


def _postgres(admin_url: str) -> tuple[str | None, str]:
    """A fresh database on the server (its URL), or ``None`` and why not."""
    admin = make_url(admin_url).set(drivername="postgresql+psycopg")
    plain = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"hatp_soak_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        with psycopg.connect(plain, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as error:
        shown = admin.render_as_string(hide_password=True)
        return None, f"not reachable at {shown} ({' '.join(str(error).split())})"
    return admin.set(database=name).render_as_string(hide_password=False), name


def _drop(admin_url: str, url: str) -> None:
    plain = make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


def soak(name: str, log_url: str | None, args: argparse.Namespace, work: Path) -> Tally:
    """Every run on one database; prints its summary line."""
    started = time.monotonic()
    runner = Soak(name, log_url, work, args.span)
    for index in range(args.runs):
        rng = random.Random(f"{args.seed}/{name}/{index}")
        prefix = f"soak-{args.seed}-{name}-{secrets.token_hex(2)}"
        runner.one(draw(rng, index, prefix, args.span, args.kinds))
    tally = runner.tally
    states = ", ".join(f"{n} {s}" for s, n in sorted(tally.states.items()))
    kills = ", ".join(f"{n} {k}" for k, n in sorted(tally.kills.items()))
    print(
        f"{name}: {tally.runs} runs, {sum(tally.states.values())} transactions ({states}); "
        f"kills: {kills}; {tally.faults} with a participant fault; "
        f"{len(tally.violations)} violations; {time.monotonic() - started:.1f} s",
        flush=True,
    )
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per database (default 10)")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="sqlite")
    parser.add_argument("--seed", default="1", help="what the runs are drawn from (default 1)")
    parser.add_argument("--span", type=float, default=0.4, help="the longest random delay, s")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="a server to create on")
    parser.add_argument("--keep", type=Path, help="keep every run's folder under this one")
    parser.add_argument(
        "--kinds",
        default=",".join(FAULT_KINDS),
        help="the participant faults drawn from, comma-separated (default: every kind)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs is at least 1")
    args.kinds = tuple(k for k in args.kinds.split(",") if k)
    if not args.kinds or set(args.kinds) - set(FAULT_KINDS):
        parser.error(f"--kinds names some of {', '.join(FAULT_KINDS)}")
    multiprocessing.set_forkserver_preload(["hatp.demo._child", "hatp.evidence", "psycopg"])
    names = ("sqlite", "postgresql") if args.db == "both" else (args.db,)
    print(f"soak: seed {args.seed}, {args.runs} runs on {', '.join(names)}", flush=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="hatp-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    violations, status = 0, 0
    try:
        for name in names:
            if name == "sqlite":
                violations += len(soak(name, None, args, work).violations)
                continue
            url, why = _postgres(args.postgres)
            if url is None:
                print(f"postgresql: skipped, {why}", flush=True)
                status = 2 if os.environ.get("CI") == "true" else status
                continue
            try:
                violations += len(soak(name, url, args, work).violations)
            finally:
                _drop(args.postgres, url)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if violations else status


if __name__ == "__main__":
    sys.exit(main())
