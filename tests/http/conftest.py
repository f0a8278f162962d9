"""A ticket system's own HTTP API, guarded by leases, on the parametrized store.

``tickets`` is the demo's ticket system of record (``hatp.demo._tickets``)
on the ``store`` fixture (SQLite and PostgreSQL), with ticket 4711 open,
and a small Starlette app in front of it:

- ``PATCH /tickets/{id}`` (guarded): ``tickets.update`` with the body as params;
- ``POST /tickets/{id}/clear-notes`` (guarded): ``tickets.clear_notes``;
- ``PATCH /tickets/{id}/forgetful`` (guarded): applies, but hands back no receipt;
- ``GET /tickets/{id}``: the ticket and its epoch, no lease needed;
- the lease routes (``/leases``), with ``authenticate`` when a test asks for it.

``tickets.ran`` lists the ticket routes that ran, so a test can prove the
app never ran. ``tickets.run(body)`` runs ``body(http, leases)`` on one
event loop, with a bound, against the app in process (``httpx2.ASGITransport``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp.clock import ManualClock
from hatp.demo._tickets import open_tickets, ticket_system
from hatp.evidence import Keyring, SigningKey
from hatp.http import (
    Authenticate,
    LeaseClient,
    LeaseGuard,
    attach_receipt,
    lease_routes,
    presented_lease,
)
from hatp.lease import State, SystemOfRecord
from hatp.store import Store
from serve_world import serve  # noqa: F401  (hatp serve's app over the trip world)
from web_world import served  # noqa: F401  (the approver page over the trip world)

T = TypeVar("T")

START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
BASE = "http://tickets.test"
#: How long one test's HTTP exchange may take, at most.
BOUND = 30.0
RESOURCE = "ticket/4711"
TICKET: dict[str, Any] = {
    "id": 4711,
    "title": "Refund order 12",
    "status": "open",
    "assignee": "dana",
    "notes": "customer called twice",
}
CLOSE: dict[str, Any] = {"action": "tickets.update", "params": {"id": 4711, "status": "closed"}}
#: The person an ``Authorization: Person <name>`` header authenticates.
PERSON = "human://tickets.example/lee"
KEY = SigningKey.from_seed(bytes([51]) * 32, "tickets-1")


def person(request: Request) -> str | None:
    """The test app's authentication: ``Authorization: Person lee`` is lee."""
    if request.headers.get("authorization") == "Person lee":
        return PERSON
    return None


@dataclass
class Tickets:
    """The ticket system, its app, and the constants tests need (a test module cannot
    import this conftest: ``http`` is the standard library's package)."""

    BASE = BASE
    BOUND = BOUND
    RESOURCE = RESOURCE
    TICKET = TICKET
    CLOSE = CLOSE
    PERSON = PERSON
    KEY = KEY
    person = staticmethod(person)

    store: Store
    clock: ManualClock
    sor: SystemOfRecord
    ran: list[str] = field(default_factory=list)

    @property
    def keyring(self) -> Keyring:
        return self.sor.keyring

    def state(self) -> tuple[State, int]:
        return self.sor.state(RESOURCE)

    def app(self, *, authenticate: Authenticate | None = None) -> Starlette:
        sor = self.sor

        async def apply(request: Request, action: str, params: dict[str, Any]) -> Response:
            presented = presented_lease(request)
            ticket = int(request.path_params["id"])
            applied = await run_in_threadpool(
                sor.apply,
                presented.doc,
                resource=f"ticket/{ticket}",
                mutation={"action": action, "params": {"id": ticket, **params}},
                fence_token=presented.fence_token,
            )
            if not request.url.path.endswith("/forgetful"):
                attach_receipt(request, applied.receipt)
            state, epoch = await run_in_threadpool(sor.state, f"ticket/{ticket}")
            return JSONResponse({"ticket": state, "epoch": epoch, "replayed": applied.replayed})

        async def patch(request: Request) -> Response:
            self.ran.append(request.url.path)
            return await apply(request, "tickets.update", await request.json())

        async def clear_notes(request: Request) -> Response:
            self.ran.append(request.url.path)
            return await apply(request, "tickets.clear_notes", {})

        async def read(request: Request) -> Response:
            self.ran.append(request.url.path)
            state, epoch = await run_in_threadpool(sor.state, f"ticket/{request.path_params['id']}")
            return JSONResponse({"ticket": state, "epoch": epoch})

        return Starlette(
            routes=[
                Route("/tickets/{id}", patch, methods=["PATCH"]),
                Route("/tickets/{id}/forgetful", patch, methods=["PATCH"]),
                Route("/tickets/{id}/clear-notes", clear_notes, methods=["POST"]),
                Route("/tickets/{id}", read, methods=["GET"]),
                *lease_routes(sor, authenticate=authenticate),
            ],
            middleware=[Middleware(LeaseGuard, guarded=["/tickets"])],
        )

    def run(
        self,
        body: Callable[[httpx2.AsyncClient, LeaseClient], Awaitable[T]],
        *,
        authenticate: Authenticate | None = None,
    ) -> T:
        """Run ``body(http, leases)`` against the app in process, within :data:`BOUND`."""
        app = self.app(authenticate=authenticate)

        async def go() -> T:
            transport = httpx2.ASGITransport(app=app)
            async with (
                httpx2.AsyncClient(transport=transport, base_url=BASE) as http,
                LeaseClient(BASE, keyring=self.keyring, client=http) as leases,
            ):
                return await asyncio.wait_for(body(http, leases), BOUND)

        return asyncio.run(go())


@pytest.fixture
def tickets(store: Store) -> Iterator[Tickets]:
    clock = ManualClock(START)
    sor = ticket_system(store, KEY, clock)
    open_tickets(store, [TICKET])
    yield Tickets(store, clock, sor)
