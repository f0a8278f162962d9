"""Benchmark of hatp over MCP (stdio) against the same transactions in process, same run.

Run with ``.venv/bin/python benchmarks/mcp.py``.

The workload is the demo's business trip (:mod:`hatp.demo.trip`), as in
``benchmarks/coordinator.py``: a 4-branch plan and one approval group approved
at once, each transaction its own txnId, seat and traveller, every one
committed. One world (SQLite files) serves both ways of reaching it:

- in process: the coordinator calls the four ``ParticipantServer`` objects;
- over MCP: each participant is a server process of its own
  (``python -m hatp.demo._mcp_server ... --stdio`` on the same store), reached
  through an MCP client and :func:`hatp.mcp._participant_client.mcp_participant`.

The two are interleaved, one transaction each in turn, so both see the same
machine. A committed transaction makes two participant calls per branch
(prepare, commit), so the transport's cost per branch is
``(p50 over MCP - p50 in process) / 4``. Also shown: one ``status`` call, the
smallest round trip, each way.

A second part measures what the approval gate adds to one tool call over
streamable HTTP. One payments MCP server process (:mod:`_gated_rig`, on the
same trip world's folder, so keys and the payments SQLite store are shared)
serves two tools with one body (a card charge written to the payments store)
and one signature: ``charge_card``, gated (acme's finance approver,
``approve.spend``, the amount at ``/amount``), and ``charge_card_ungated``.
Before timing, this process asks acme's Human Gateway (in process, its people
approving at once) for one approval per gated call, each its own requestId,
each binding ``charge_card`` as the server lists it. Then, over one client
session that declares ``dev.hatp/gate``, the gated call (its approval in
``_meta``, each approval used once) and the ungated call are timed one each in
turn. The added cost per gated call is ``p50 gated - p50 ungated``. Also
timed, in the same rounds: a stock client's call again once people approved
(its first call, which makes the server ask its own gateway, is not timed).

Nothing here asserts a timing and the exit status is 0 whatever the figures.
``--quick`` shrinks every count so a test can smoke-run the script.
"""

# ruff: noqa: E402
from __future__ import annotations

import sys
from pathlib import Path

# This script is named mcp.py: run as a script, its folder comes first on sys.path
# and would hide the mcp SDK. Look there last (for _timing and _trip_rig).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import version
from typing import Any, TextIO

import mcp_types as types
from mcp import Client
from mcp.client import advertise

from _gated_rig import GATED, REQUESTER, UNGATED, GatedRig
from _timing import Timing
from _trip_rig import LOG, Rig
from hatp.clock import SystemClock, format_time
from hatp.demo._mcp_process import log_file, stdio_client_for
from hatp.demo.gated import ARGS
from hatp.demo.trip import CARD, PARTICIPANT_IDS, PAYMENTS, TripWorld
from hatp.errors import ApprovalRequired
from hatp.evidence import tool_digest
from hatp.gateway import HumanGateway
from hatp.mcp import GATE_EXTENSION_ID, McpLink, call_gated, listed_definition
from hatp.model import CallRequirement
from hatp.participant import Participant
from hatp.store import DecisionLog
from hatp.version import PROTOCOL_VERSION

BRANCHES = 4


#: A stock client's call again, once asked: how long to let people approve before it,
#: and how many times to call while the ask is still open.
STOCK_PAUSE_SECONDS = 0.005
STOCK_TRIES = 200


@dataclass(frozen=True)
class Settings:
    warm_up: int
    transactions: int
    status_calls: int
    gated_calls: int


FULL = Settings(warm_up=5, transactions=60, status_calls=300, gated_calls=300)
QUICK = Settings(warm_up=1, transactions=3, status_calls=20, gated_calls=4)


def percentile(samples: Sequence[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def store_urls(folder: Path) -> dict[str, str]:
    """A SQLite file for the log and each participant, as the benchmark rig names them."""
    return {
        owner: f"sqlite:///{folder / f's{n}.db'}" for n, owner in enumerate([LOG, *PARTICIPANT_IDS])
    }


class McpSide:
    """The same world's participants, each a stdio MCP server process on its store."""

    def __init__(self, rig: Rig, urls: dict[str, str], errlog: TextIO) -> None:
        folder = rig.world.folder
        self.links = {
            pid: McpLink(
                pid, _stdio(folder, pid, errlog, urls[pid]), rig.world.keyring, timeout=30.0
            )
            for pid in PARTICIPANT_IDS
        }
        gateway = rig.world.gateway(rig.world.scripted_people("approve"))
        reach: dict[str, Participant] = dict(self.links)
        self.coordinator = rig.world.coordinator(
            DecisionLog(rig.log_store), gateway, links=reach, call_timeout=60.0
        )

    async def start(self) -> None:
        await asyncio.gather(*(link.connect() for link in self.links.values()))

    async def close(self) -> None:
        await asyncio.gather(*(link.aclose() for link in self.links.values()))


def _stdio(folder: Path, participant_id: str, errlog: TextIO, store: str) -> Callable[[], Client]:
    return lambda: stdio_client_for(folder, participant_id, errlog, store=store)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def run(folder: Path, settings: Settings) -> tuple[Timing, Timing, Timing, Timing]:
    """Interleaved transactions, then status calls; return (inproc, mcp) txn and call timings."""
    urls = store_urls(folder)
    rig = Rig(folder, urls, "mcp")
    errlog = log_file(folder, "servers")
    side = McpSide(rig, urls, errlog)
    try:
        await side.start()

        for _ in range(settings.warm_up):
            await rig.commit_one()
            await commit_over(rig, side)
        inproc, mcp = [], []
        txn_id = ""
        for _ in range(settings.transactions):
            inproc.append((await rig.commit_one())[0])
            elapsed, txn_id = await commit_over(rig, side)
            mcp.append(elapsed)
        # A committed branch to ask about: the smallest request and answer there is.
        local, remote = rig.world.participants[PAYMENTS], side.links[PAYMENTS]
        calls_in, calls_mcp = [], []
        for _ in range(settings.status_calls):
            calls_in.append(await timed(lambda: local.status(txn_id, "charge")))
            calls_mcp.append(await timed(lambda: remote.status(txn_id, "charge")))
        return (
            Timing(tuple(inproc)),
            Timing(tuple(mcp)),
            Timing(tuple(calls_in)),
            Timing(tuple(calls_mcp)),
        )
    finally:
        await side.close()
        errlog.close()
        rig.close()


async def commit_over(rig: Rig, side: McpSide) -> tuple[float, str]:
    """One transaction through the MCP links; its latency in seconds, and its txnId."""
    plan = rig.plan()
    started = time.perf_counter()
    outcome = await side.coordinator.run(plan)
    elapsed = time.perf_counter() - started
    if outcome.state.value != "committed":
        raise RuntimeError(f"{outcome.txn_id} ended {outcome.state}: {outcome.reason}")
    return elapsed, outcome.txn_id


# --------------------------------------------------------------------------- gated calls


@dataclass(frozen=True)
class GatedTimings:
    """One call each of the gated and the ungated tool, and a stock client's call again."""

    gated: Timing
    ungated: Timing
    stock: Timing


async def run_gated(folder: Path, settings: Settings) -> GatedTimings:
    """Approvals first, then interleaved gated, ungated and stock calls on one server."""
    with TripWorld.open(folder, SystemClock()) as world:
        world.edit_card(CARD, "1000000000.00")  # every call charges 1480.00, for real
        rig = GatedRig(folder)
        await rig.start()
        try:
            async with (
                Client(rig.url, extensions=[advertise(GATE_EXTENSION_ID)]) as client,
                Client(rig.url) as stock,
            ):
                listed = await listed_tool(client, GATED)
                requirement = await requirement_of(client, listed)
                count = settings.warm_up + settings.gated_calls
                approvals = iter(await approvals_for(world, requirement, listed, count))

                async def gated_call() -> None:
                    ran(await call_gated(client, GATED, ARGS, next(approvals)))

                async def ungated_call() -> None:
                    ran(await client.call_tool(UNGATED, ARGS))

                for _ in range(settings.warm_up):
                    await gated_call()
                    await ungated_call()
                    await stock_retry(stock)
                gated, ungated, retried = [], [], []
                for _ in range(settings.gated_calls):
                    gated.append(await timed(gated_call))
                    ungated.append(await timed(ungated_call))
                    retried.append(await stock_retry(stock))
                return GatedTimings(
                    Timing(tuple(gated)), Timing(tuple(ungated)), Timing(tuple(retried))
                )
        finally:
            await rig.stop()


async def listed_tool(client: Client, name: str) -> dict[str, Any]:
    """``name``'s definition as the server lists it: what an approval binds."""
    listing = await client.list_tools()
    return next(listed_definition(tool) for tool in listing.tools if tool.name == name)


async def requirement_of(client: Client, listed: dict[str, Any]) -> CallRequirement:
    """What the server says to ask for when the gated tool is called without an approval."""
    try:
        ran(await call_gated(client, GATED, ARGS, None))
    except ApprovalRequired as refused:
        requirement = CallRequirement.model_validate(refused.data["requirement"])
    else:
        raise RuntimeError(f"{GATED} ran without an approval")
    if requirement.tool_digest != tool_digest(listed):
        raise RuntimeError(f"{GATED}: the server binds another definition than it lists")
    return requirement


async def approvals_for(
    world: TripWorld, requirement: CallRequirement, listed: dict[str, Any], count: int
) -> list[dict[str, Any]]:
    """``count`` signed CallApprovals of the call, each its own ask, from acme's gateway."""
    people = world.scripted_people("approve")
    gateway = world.gateway(people)
    gateway.start()
    try:
        return [
            await approved(gateway, call_request(world, requirement, listed, number))
            for number in range(count)
        ]
    finally:
        await gateway.stop()
        await people.close()


def call_request(
    world: TripWorld, requirement: CallRequirement, listed: dict[str, Any], number: int
) -> dict[str, Any]:
    """The CallRequest for exactly the call :data:`ARGS` of the gated tool, as listed."""
    return {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "call-request",
        "requestId": f"bench-charge-{number:05d}",
        "requester": REQUESTER.agent,
        "onBehalfOf": REQUESTER.on_behalf_of,
        "call": {"server": requirement.server, "tool": requirement.tool, "arguments": ARGS},
        "toolDefinition": listed,
        "address": requirement.address,
        "action": requirement.action,
        "amountPointer": requirement.amount_pointer,
        "price": None,
        "passkey": False,
        "reason": {"summary": "benchmark: one card charge"},
        "decideBy": format_time(world.clock.now() + timedelta(minutes=15)),
        "validSeconds": min(600, requirement.max_lifetime_seconds),
    }


async def approved(gateway: HumanGateway, request: dict[str, Any]) -> dict[str, Any]:
    """Ask ``gateway`` for the call and wait for its signed CallApproval."""
    answer = await gateway.ask_call(request)
    while answer["kind"] == "pending":
        answer = await gateway.poll_call(answer["askId"], wait_seconds=5.0)
    if answer.get("decision") != "approve":
        raise RuntimeError(f"{request['requestId']} was not approved: {answer.get('reason')}")
    return answer


async def stock_retry(stock: Client) -> float:
    """A stock client's call of the gated tool once people approved; its latency in seconds.

    Its first call makes the server ask its own gateway (not timed); the same call
    again, once people had a moment to approve, finds the approval and runs. (A first
    call whose ask was decided at once ran: it is called again, to ask anew.)
    """
    for _ in range(STOCK_TRIES):
        asked = await stock.call_tool(GATED, ARGS)
        if refusal_code(asked) == "APPROVAL_REQUIRED":
            break
        ran(asked)
    else:
        raise RuntimeError(f"a stock client's calls of {GATED} never made the server ask")
    for _ in range(STOCK_TRIES):
        await asyncio.sleep(STOCK_PAUSE_SECONDS)
        started = time.perf_counter()
        result = await stock.call_tool(GATED, ARGS)
        elapsed = time.perf_counter() - started
        if refusal_code(result) == "APPROVAL_REQUIRED":  # people have not decided yet
            continue
        ran(result)
        return elapsed
    raise RuntimeError(f"a stock client's call of {GATED} was not approved in time")


def refusal_code(result: types.CallToolResult) -> str | None:
    """The hatp code of a refusal rendered as a tool result, or ``None``."""
    if not result.is_error or not isinstance(result.structured_content, dict):
        return None
    error = result.structured_content.get("error")
    return error.get("code") if isinstance(error, dict) else None


def ran(result: types.CallToolResult) -> None:
    """Raise unless the tool ran and charged."""
    if result.is_error:
        said = " ".join(getattr(block, "text", "") for block in result.content)
        raise RuntimeError(f"the call did not run: {said}")


def row(name: str, timing: Timing) -> str:
    samples = timing.samples
    return (
        f"{name:<22} p50 {timing.median * 1e3:8.2f} ms  "
        f"p90 {percentile(samples, 0.9) * 1e3:8.2f} ms  "
        f"best {timing.best * 1e3:8.2f} ms  ({len(samples)} samples)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    print(
        f"hatp MCP benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}, mcp {version('mcp')}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; SQLite files; SystemClock"
    )
    print(
        "workload: the demo trip, 4 branches (seat hold, room hold, calendar compensate, card "
        "charge final) + 1 approval group approved at once; in process vs each participant a "
        f"stdio MCP server process; interleaved, {settings.transactions} committed transactions "
        f"each way after {settings.warm_up} warm-up"
    )
    with tempfile.TemporaryDirectory(prefix="hatp-mcp-bench-") as tmp:
        inproc, mcp, call_in, call_mcp = asyncio.run(run(Path(tmp), settings))
    overhead = (mcp.median - inproc.median) / BRANCHES
    print()
    print(row("in process: txn", inproc))
    print(row("MCP (stdio): txn", mcp))
    print(row("in process: status", call_in))
    print(row("MCP (stdio): status", call_mcp))
    print()
    print(
        f"transport overhead per branch (p50, (MCP - in process) / {BRANCHES}): "
        f"{overhead * 1e3:.2f} ms; ratio MCP / in process {mcp.median / inproc.median:.2f}x"
    )
    print(
        f"one status round trip (p50): MCP {call_mcp.median * 1e3:.3f} ms vs in process "
        f"{call_in.median * 1e3:.3f} ms (+{(call_mcp.median - call_in.median) * 1e3:.3f} ms); "
        f"a committed branch makes 2 calls (prepare, commit)"
    )
    if statistics.median(mcp.samples) < statistics.median(inproc.samples):
        print("note: MCP measured faster than in process: noise; rerun without --quick")
    print()
    print(
        f"gated call: charge_card gated (acme finance approver, approve.spend, /amount) vs "
        f"charge_card_ungated, one body (a card charge in the payments SQLite store); one server "
        f"process over streamable HTTP on 127.0.0.1, one client session declaring "
        f"{GATE_EXTENSION_ID}; interleaved, {settings.gated_calls} calls each after "
        f"{settings.warm_up} warm-up, each gated call a fresh approval"
    )
    with tempfile.TemporaryDirectory(prefix="hatp-mcp-gated-bench-") as tmp:
        timings = asyncio.run(run_gated(Path(tmp), settings))
    gated, ungated, stock = timings.gated, timings.ungated, timings.stock
    print()
    print(row("HTTP: ungated call", ungated))
    print(row("HTTP: gated call", gated))
    print(row("HTTP: stock retry", stock))
    print()
    print(
        f"added cost per gated call (p50, gated - ungated): "
        f"{(gated.median - ungated.median) * 1e3:.2f} ms; ratio gated / ungated "
        f"{gated.median / ungated.median:.2f}x"
    )
    print(
        "in that time the gate reads the server's listing and digests the tool it binds, checks "
        "the approval (2 Ed25519 verifies: the gateway's signature and the approver's vote; the "
        "approver's card, verified once, is remembered; the terms against this call, requester "
        "and listing), claims its single use durably (a SQLite commit) and records the outcome "
        "(another)"
    )
    print(
        f"a stock client's call again once approved (p50): {stock.median * 1e3:.2f} ms "
        f"({(stock.median - ungated.median) * 1e3:+.2f} ms over ungated): the gate above, plus "
        f"finding its ask, polling the gateway (in the server's process) and closing the ask"
    )
    if gated.median < ungated.median:
        print("note: the gated call measured faster than the ungated one: noise; rerun")
    return 0


if __name__ == "__main__":
    sys.exit(main())
