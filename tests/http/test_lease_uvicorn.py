"""The PTCL headers survive a real HTTP stack: uvicorn on 127.0.0.1, a real socket."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx2
import pytest
import uvicorn

from hatp.errors import LeaseRefused, PeerUnavailable
from hatp.http import RECEIPT_HEADER, LeaseClient
from hatp.lease import LeaseCommit, RecoveryMode, RecoveryOutcome, verify_receipt


def _listening() -> socket.socket:
    """A socket on 127.0.0.1 at a port the OS chose, already listening: a client may
    connect before the server's loop accepts, so nothing waits for it to start."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


def test_a_leased_mutation_over_a_real_server(tickets: Any) -> None:
    """[HTTP-LEASE-GUARD] [HTTP-RECEIPT] grant, apply, stale writer, recover over TCP."""
    app = tickets.app()

    async def go() -> Any:
        sock = _listening()
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            async with LeaseClient(f"http://127.0.0.1:{port}", keyring=tickets.keyring) as leases:
                return await asyncio.wait_for(_exchange(leases, tickets), tickets.BOUND)
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, tickets.BOUND)
            sock.close()

    lease, sent, stale, missing, recovered = asyncio.run(go())
    assert sent.response.http_version == "HTTP/1.1"
    commit = verify_receipt(sent.receipt, tickets.keyring)
    assert isinstance(commit, LeaseCommit) and commit.lease_id == lease["leaseId"]
    assert RECEIPT_HEADER in sent.response.headers
    assert stale.reason == "MONOTONIC_CAS_FENCING"
    assert (missing.status_code, missing.json()["code"]) == (428, "LEASE_REQUIRED")
    assert recovered.outcome is RecoveryOutcome.RESTORED
    assert tickets.state()[0] == tickets.TICKET


async def _exchange(leases: LeaseClient, tickets: Any) -> Any:
    mode = RecoveryMode.SNAPSHOT_RESTORE
    lease = await leases.grant(tickets.RESOURCE, tickets.CLOSE, t_req_ms=60_000, mode=mode)
    rival = await leases.grant(tickets.RESOURCE, tickets.CLOSE, t_req_ms=60_000, mode=mode)
    sent = await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=lease)
    with pytest.raises(LeaseRefused) as stale:
        await leases.send("PATCH", "/tickets/4711", json={"status": "closed"}, lease=rival)
    async with httpx2.AsyncClient() as http:
        missing = await http.patch(f"{leases.base_url}/tickets/4711", json={"status": "open"})
    recovered = await leases.recover(lease["leaseId"])
    return lease, sent, stale.value, missing, recovered


def test_a_server_that_is_not_there_is_peer_unavailable(tickets: Any) -> None:
    """[HTTP-CLIENT] a refused connection is no answer, not a refusal."""
    sock = _listening()
    port = sock.getsockname()[1]
    sock.close()  # nobody listens there now

    async def go() -> PeerUnavailable:
        async with LeaseClient(f"http://127.0.0.1:{port}", keyring=tickets.keyring) as leases:
            try:
                await leases.lease("lease-abcdefgh")
            except PeerUnavailable as unavailable:
                return unavailable
        raise AssertionError("an answer came from a closed port")

    unavailable = asyncio.run(asyncio.wait_for(go(), tickets.BOUND))
    assert unavailable.code == "PEER_UNAVAILABLE"
