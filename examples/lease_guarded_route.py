"""A Starlette route guarded by ``LeaseGuard``: a mutation only under a compensation lease.

Shows: your own ``orders`` table as a system of record (``hatp.lease``) that
can undo one status change; ``PATCH /orders/{id}`` behind
``hatp.http.LeaseGuard`` next to the lease endpoints (``hatp.http.lease_routes``);
a PATCH without a lease refused (428 ``LEASE_REQUIRED``) before your route
runs; an agent (``hatp.http.LeaseClient``) asking for a lease, checking it, and
sending the mutation with it; the route applying it through the system of
record and handing back a signed commit receipt the client checks. In process
here (``httpx2.ASGITransport``); uvicorn serves the same app over TCP.

Run it: ``python examples/lease_guarded_route.py`` (it works in a temporary folder).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx2
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp.clock import SystemClock
from hatp.evidence import Keyring, SigningKey
from hatp.http import LeaseClient, LeaseGuard, attach_receipt, lease_routes, presented_lease
from hatp.lease import Action, RecoveryMode, SystemOfRecord, TableResources
from hatp.store import open_store

ISSUER = "https://orders.example"
orders = sa.Table(
    "orders",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("status", sa.Text),
)


def set_status(state: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    return {**state, "status": params["status"]}


def undo_status(state: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "orders.set_status", "params": {"status": state["status"]}}


def orders_app(shop: SystemOfRecord) -> Starlette:
    """Your API: ``PATCH /orders/{id}`` runs only with a lease the guard has read."""

    async def patch(request: Request) -> Response:
        lease = presented_lease(request)  # the guard checked it is there and well-formed
        order = int(request.path_params["id"])
        applied = await run_in_threadpool(
            shop.apply,
            lease.doc,
            resource=f"order/{order}",
            mutation={"action": "orders.set_status", "params": await request.json()},
            fence_token=lease.fence_token,
        )
        attach_receipt(request, applied.receipt)  # the signed commit receipt, in a header
        state, epoch = await run_in_threadpool(shop.state, f"order/{order}")
        return JSONResponse({"order": state, "epoch": epoch})

    return Starlette(
        routes=[Route("/orders/{id}", patch, methods=["PATCH"]), *lease_routes(shop)],
        middleware=[Middleware(LeaseGuard, guarded=["/orders"])],
    )


async def main() -> None:
    store = open_store(Path(tempfile.mkdtemp(prefix="hatp-lease-")) / "orders.db")
    try:
        with store.transaction() as conn:
            orders.create(conn, checkfirst=True)
            conn.execute(sa.insert(orders), [{"id": 1, "status": "open"}])
        key = SigningKey.generate("orders-1")
        keyring = Keyring([(key.public, ISSUER)], trusted_issuers=[ISSUER])
        shop = SystemOfRecord(
            store,
            issuer=ISSUER,
            key=key,
            keyring=keyring,
            resources=TableResources("order", orders, "id", ("id", "status")),
            actions=[Action("orders.set_status", apply=set_status, inverse=undo_status)],
            clock=SystemClock(),
        )
        transport = httpx2.ASGITransport(app=orders_app(shop))
        base = "http://orders.local"
        async with (
            httpx2.AsyncClient(transport=transport, base_url=base) as http,
            LeaseClient(base, keyring=keyring, client=http) as agent,
        ):
            bare = await http.patch("/orders/1", json={"status": "cancelled"})
            print("without a lease:", bare.status_code, bare.json()["code"])

            cancel = {"action": "orders.set_status", "params": {"status": "cancelled"}}
            lease = await agent.grant(
                "order/1", cancel, t_req_ms=60_000, mode=RecoveryMode.COMPENSATING_ACTION
            )
            done = await agent.send("PATCH", "/orders/1", json=cancel["params"], lease=lease)
            print("with a lease:", done.response.status_code, done.response.json()["order"])
            print("commit receipt checked, epoch", done.receipt["epoch"])
        if (bare.status_code, done.response.json()["order"]["status"]) == (428, "cancelled"):
            print("OK: the route ran only under a lease")
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
