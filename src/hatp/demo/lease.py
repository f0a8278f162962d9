"""``hatp demo --lease``: a ticket update under a compensation lease, over real HTTP.

The ticket system (a SQLite system of record, :mod:`hatp.demo._tickets`)
serves its API with uvicorn on a loopback port, its mutations guarded by
:class:`~hatp.http.LeaseGuard`. Two agents want ticket 4711: the triage bot
to close it, a sync bot (working from a stale copy) to reassign it. Each
asks for a lease, granted at the same epoch. An update with no lease is
refused (428); the triage bot's goes through with a signed commit receipt;
the sync bot's, fenced at the same epoch, is refused 409
``ERR_STALE_FENCE_EPOCH`` with a signed rejection receipt; the triage bot's
retry gets its stored receipt and writes nothing; then the customer
answers, support runs the lease's recovery, and the ticket is its pre-image
again, digest for digest. Every receipt is verified offline with the ticket
system's public key alone (``keyring.json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hatp.clock import Clock, SystemClock
from hatp.demo._tickets import ISSUER, TICKETS, open_tickets, ticket_system
from hatp.errors import HatpError, error_from_dict
from hatp.evidence import Keyring, SigningKey, digest, verify
from hatp.http import (
    FENCE_HEADER,
    LEASE_HEADER,
    LeaseClient,
    LeaseGuard,
    attach_receipt,
    encode_header,
    lease_routes,
    presented_lease,
)
from hatp.lease import RecoveryMode, SystemOfRecord, verify_receipt
from hatp.store import open_store

__all__ = ["DATABASE", "TICKET", "LeaseRun", "LeaseStep", "run_lease"]

#: The SQLite file of the ticket system (its tickets and its lease tables), in the folder.
DATABASE = "tickets.db"
#: The ticket both agents want to change.
TICKET = "ticket/4711"
_ROW = {
    "id": 4711,
    "title": "Refund not received",
    "status": "open",
    "assignee": "dana",
    "notes": "Customer wrote twice.",
}
_CLOSE = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
_REASSIGN = {"action": "tickets.update", "params": {"id": 4711, "assignee": "sync-bot"}}
_WINDOW_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class LeaseStep:
    """One step of the walk: what was tried, the outcome expected and met (a code:
    ``GRANTED``, ``APPLIED``, ``REPLAYED``, ``RESTORED``, an error's code, or an HTTP
    status as ``HTTP 409``), and what it said."""

    title: str
    expected: str
    outcome: str
    said: str

    @property
    def ok(self) -> bool:
        return self.outcome == self.expected


@dataclass
class LeaseRun:
    """The walk's steps, the receipts it collected, and the offline checks of them."""

    folder: Path
    url: str = ""
    steps: list[LeaseStep] = field(default_factory=list)
    receipts: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    ticket: dict[str, Any] = field(default_factory=dict)

    @property
    def as_expected(self) -> bool:
        """Every step met its expected outcome and every check held."""
        return (
            bool(self.steps)
            and all(step.ok for step in self.steps)
            and all(held for _, held in self.checks)
        )


def run_lease(folder: Path, clock: Clock | None = None) -> LeaseRun:
    """Walk the ticket update on a fresh ``folder/tickets.db``; see the module.

    Writes ``tickets.db``, each lease and receipt (``<name>.json``) and
    ``keyring.json`` (the ticket system's public key) into ``folder``.

    Raises:
        StoreUnavailable: the SQLite file could not be opened or written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for old in (DATABASE, f"{DATABASE}-wal", f"{DATABASE}-shm"):
        (folder / old).unlink(missing_ok=True)  # the demo's own file, from an earlier run
    key = SigningKey.generate("tickets-1")
    keyring = Keyring([(key.public, ISSUER)], trusted_issuers=[ISSUER])
    store = open_store(folder / DATABASE)
    try:
        sor = ticket_system(store, key, clock or SystemClock(), keyring=keyring)
        open_tickets(store, [_ROW])
        run = LeaseRun(folder)
        asyncio.run(_serve_and_walk(run, sor, keyring))
        run.ticket, _ = sor.state(TICKET)
        run.checks = list(_offline_checks(run, keyring))
    finally:
        store.close()
    _save(run, keyring)
    return run


def ticket_api(sor: SystemOfRecord) -> Starlette:
    """The ticket system's HTTP API: ``GET``/``PATCH /tickets/{id}`` (PATCH under a
    lease) and the lease routes under ``/leases``."""

    async def read(request: Request) -> JSONResponse:
        state, epoch = await run_in_threadpool(sor.state, _resource(request))
        return JSONResponse({"ticket": state, "epoch": epoch})

    async def update(request: Request) -> JSONResponse:
        presented = presented_lease(request)
        changes = await request.json()
        if not isinstance(changes, dict):
            raise HatpError("a ticket update is a JSON object of the members to set")
        ticket_id = int(request.path_params["ticket_id"])
        mutation = {"action": "tickets.update", "params": {"id": ticket_id, **changes}}
        applied = await run_in_threadpool(
            lambda: sor.apply(
                presented.doc,
                resource=_resource(request),
                mutation=mutation,
                fence_token=presented.fence_token,
            )
        )
        attach_receipt(request, applied.receipt)
        state, epoch = await run_in_threadpool(sor.state, _resource(request))
        return JSONResponse({"ticket": state, "epoch": epoch, "replayed": applied.replayed})

    routes = [
        Route("/tickets/{ticket_id:int}", read, methods=["GET"]),
        Route("/tickets/{ticket_id:int}", update, methods=["PATCH"]),
        *lease_routes(sor),
    ]
    return Starlette(routes=routes, middleware=[Middleware(LeaseGuard, guarded=("/tickets",))])


def _resource(request: Request) -> str:
    return TICKETS.resource(request.path_params["ticket_id"])


async def _serve_and_walk(run: LeaseRun, sor: SystemOfRecord, keyring: Keyring) -> None:
    async with _served(ticket_api(sor)) as url:
        run.url = url
        async with LeaseClient(url, keyring=keyring) as client:
            await _walk(run, client)


@contextlib.asynccontextmanager
async def _served(app: Starlette) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yield its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        sock = probe.dup()
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):  # up to 5 s for the server to listen
            if server.started:
                break
            await asyncio.sleep(0.01)
        host, port = sock.getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def _walk(run: LeaseRun, client: LeaseClient) -> None:
    # 1. Both agents ask for a lease on the ticket; both are granted at the same epoch.
    close = await _step(
        run,
        "The triage bot asks for a lease to close ticket 4711 (compensating action staged)",
        "GRANTED",
        lambda: _granted(client, _CLOSE),
    )
    stale = await _step(
        run,
        "The sync bot, from its stale copy, asks for a lease to reassign it",
        "GRANTED",
        lambda: _granted(client, _REASSIGN),
    )
    if close is None or stale is None:
        return
    run.receipts.update({"lease-close": close, "lease-reassign": stale})
    # 2. An update with no lease never reaches the ticket.
    await _step(
        run,
        "PATCH /tickets/4711 with no Agent-Compensation-Lease header",
        "LEASE_REQUIRED",
        lambda: _unleased(run.url, {"status": "pending"}),
    )
    # 3. The triage bot closes it under its lease.
    await _step(
        run,
        "The triage bot: PATCH /tickets/4711 {status: closed} under its lease",
        "APPLIED",
        lambda: _patch(client, run, "commit-close", {"status": "closed"}, close),
    )
    # 4. The sync bot's lease was fenced at the same epoch: stale now.
    await _step(
        run,
        "The sync bot: PATCH /tickets/4711 {assignee: sync-bot} under its (now stale) lease",
        "LEASE_REFUSED",
        lambda: _stale(run, {"assignee": "sync-bot"}, stale),
    )
    # 5. The triage bot timed out and retries: the stored receipt, nothing written twice.
    await _step(
        run,
        "The triage bot retries its PATCH after a timeout",
        "REPLAYED",
        lambda: _patch(client, run, "commit-close-retry", {"status": "closed"}, close),
    )
    # 6. The customer answers; support undoes the close with the lease's recovery.
    await _step(
        run,
        "The customer replies: support runs the lease's recovery (POST /leases/…/recover)",
        "RESTORED",
        lambda: _recovered(client, run, close),
    )


async def _step(
    run: LeaseRun, title: str, expected: str, act: Callable[[], Awaitable[tuple[str, str, Any]]]
) -> Any:
    """Run one step; a hatp refusal is its outcome (by code), not a crash of the walk."""
    try:
        outcome, said, value = await act()
    except HatpError as error:
        outcome, said, value = error.code, error.message, None
    run.steps.append(LeaseStep(title, expected, outcome, said))
    return value


async def _granted(client: LeaseClient, mutation: dict[str, Any]) -> tuple[str, str, Any]:
    lease = await client.grant(
        TICKET, mutation, t_req_ms=_WINDOW_MS, mode=RecoveryMode.COMPENSATING_ACTION
    )
    said = (
        f"{lease['leaseId']}: fence epoch {lease['casFenceEpoch']}, window "
        f"{lease['tGrantedMs'] // 1000} s, undo staged: {json.dumps(lease['inverse']['params'])}"
    )
    return "GRANTED", said, lease


async def _unleased(url: str, changes: dict[str, Any]) -> tuple[str, str, Any]:
    """A plain HTTP client that sends no lease: the guard answers before the API runs."""
    async with httpx2.AsyncClient() as plain:
        response = await plain.patch(f"{url}/tickets/4711", json=changes)
    if response.is_success:
        return f"HTTP {response.status_code}", "the update ran without a lease", None
    raise error_from_dict(response.json())


async def _stale(
    run: LeaseRun, changes: dict[str, Any], lease: dict[str, Any]
) -> tuple[str, str, Any]:
    """The sync bot sends its lease as plain HTTP, to show the answer as it is on the wire."""
    headers = {LEASE_HEADER: encode_header(lease), FENCE_HEADER: str(lease["casFenceEpoch"])}
    async with httpx2.AsyncClient() as plain:
        response = await plain.patch(f"{run.url}/tickets/4711", json=changes, headers=headers)
    body = response.json()
    if response.is_success:
        return f"HTTP {response.status_code}", "the stale writer's update ran", None
    receipt = body.get("data", {}).get("receipt")
    if receipt is not None:
        run.receipts["rejection-reassign"] = receipt
    said = f"HTTP {response.status_code} {body.get('ptcl', '')}: {body.get('message')}"
    return str(body.get("code")), said, receipt


async def _patch(
    client: LeaseClient,
    run: LeaseRun,
    name: str,
    changes: dict[str, Any],
    lease: dict[str, Any],
) -> tuple[str, str, Any]:
    sent = await client.send("PATCH", "/tickets/4711", json=changes, lease=lease)
    run.receipts[name] = sent.receipt
    body = sent.response.json()
    outcome = "REPLAYED" if body.get("replayed") else "APPLIED"
    said = (
        f"HTTP {sent.response.status_code}, Agent-Commit-Receipt verified: epoch "
        f"{sent.receipt['epoch']}, ticket now {body['ticket']['status']}"
    )
    return outcome, said, sent.receipt


async def _recovered(
    client: LeaseClient, run: LeaseRun, lease: dict[str, Any]
) -> tuple[str, str, Any]:
    answer = await client.recover(lease["leaseId"])
    receipt = answer.receipt
    run.receipts["recovery-close"] = receipt
    same = receipt["restoredStateHash"] == lease["preImageStateHash"]
    said = (
        f"{receipt['outcome']} at epoch {receipt['epoch']}; restored state digest "
        f"{'equals' if same else 'differs from'} the leased pre-image"
    )
    return receipt["outcome"].upper(), said, receipt


def _offline_checks(run: LeaseRun, keyring: Keyring) -> list[tuple[str, bool]]:
    """Each lease and receipt checked again with nothing but the ticket system's public key."""
    checks: list[tuple[str, bool]] = []
    for name, doc in run.receipts.items():
        try:
            if doc.get("kind") == "compensation-lease":
                held = verify(doc, keyring).issuer == doc["issuer"]
            else:
                verify_receipt(doc, keyring)
                held = True
        except HatpError:
            held = False
        checks.append((f"{name} verifies offline with keyring.json alone", held))
    lease = run.receipts.get("lease-close")
    if lease is not None:
        checks.append(
            (
                "the ticket's digest now equals the close lease's preImageStateHash",
                digest(run.ticket) == lease["preImageStateHash"],
            )
        )
    return checks


def _save(run: LeaseRun, keyring: Keyring) -> None:
    for name, doc in run.receipts.items():
        (run.folder / f"{name}.json").write_text(
            json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    keyring.save(run.folder / "keyring.json")
