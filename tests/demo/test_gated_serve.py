"""`hatp demo --gated --serve`: the gated charge_card served over streamable HTTP until
stopped, called by a stock MCP client (no hatp extension, no ``_meta``: only a tool
name and arguments, as a host driven by a model calls it).

The first test runs the command as a real process with scripted approvers
(``--auto``) and stops it with SIGTERM; the second serves it in this process
and is the finance approver at the approver page itself (a software
passkey, the page's JSON endpoints), changing the tool's listing under an
approval on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from typer.testing import CliRunner

from hatp.cli import app
from hatp.clock import SystemClock
from hatp.demo import GATEWAY, PAYMENTS, TripWorld
from hatp.demo._mcp_server import listen
from hatp.demo.gated_serve import (
    GATEWAY_MCP_PATH,
    MCP_PATH,
    SERVED_FILE,
    Served,
    serve_gated,
)
from hatp.demo.scenarios import APPROVER
from hatp.evidence._b64 import b64url_decode
from hatp.gateway import SoftwareAuthenticator
from hatp.mcp import EXTENSION_ID, GATE_EXTENSION_ID

runner = CliRunner()
#: How long starting the process, or waiting for a decision, may take at most.
BOUND = 60.0
ARGS: dict[str, Any] = {
    "card": "corp-4242",
    "amount": {"value": "1480.00", "currency": "USD"},
    "payee": "Lufthansa",
}
OTHER_ARGS: dict[str, Any] = {**ARGS, "amount": {"value": "99.00", "currency": "USD"}}


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    """The hatp refusal a stock client reads from an ``isError`` result."""
    assert result.is_error, result
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    return error


def ask_of(result: types.CallToolResult) -> str:
    """The gateway's id of the ask the server made for a refused call."""
    error = error_of(result)
    assert error["code"] == "APPROVAL_REQUIRED", error
    ask_id: str = error["data"]["ask"]["askId"]
    return ask_id


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def until_it_runs(client: Client, args: dict[str, Any]) -> list[types.CallToolResult]:
    """Call ``charge_card`` as a model would, again and again, until it runs (bounded)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + BOUND
    seen: list[types.CallToolResult] = []
    while loop.time() < until:
        result = await client.call_tool("charge_card", args)
        seen.append(result)
        if not result.is_error:
            return seen
        ask_of(result)  # refused only as waiting for the approval
        await asyncio.sleep(0.2)
    raise AssertionError(f"charge_card never ran: {text_of(seen[-1])}")


def charged(folder: Path) -> list[str]:
    """The charges charge_card made, from the payments ledger."""
    with TripWorld.open(folder, SystemClock()) as world:
        return [line.detail for line in world.ledger(PAYMENTS) if line.kind == "charged"]


@contextlib.asynccontextmanager
async def demo_process(folder: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, Served]]:
    """``hatp demo --gated --serve --auto --port 0`` as a process, once it printed where
    it serves; killed at the end if it is still running."""
    hatp = Path(sys.executable).parent / "hatp"
    with (folder.parent / "demo.err").open("w", encoding="utf-8") as errlog:
        process = await asyncio.create_subprocess_exec(
            *[str(hatp), "demo", "--gated", "--serve", "--auto", "--port", "0"],
            *["--out", str(folder)],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
        )
    try:
        assert process.stdout is not None
        shown: dict[str, str] = {}
        while "approve" not in shown:
            line = (await asyncio.wait_for(process.stdout.readline(), BOUND)).decode()
            assert line, (folder.parent / "demo.err").read_text()
            name, _, value = line.strip().partition(": ")
            shown[name] = value
        served = Served(shown["mcp"], shown["gateway"], shown["approve"], APPROVER, None)
        yield process, served
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_a_stock_client_gets_the_gated_call_run_once_per_approval(tmp_path: Path) -> None:
    """[MCP-GATE-STOCK] over the served demo: refused with APPROVAL_REQUIRED while the
    scripted approver decides, run once when called again, a new approval for the same
    call again and for other arguments; SIGTERM stops it with exit 0."""
    folder = tmp_path / "served"

    async def go() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with demo_process(folder) as (process, served):
            seen["served"] = served
            async with Client(served.mcp) as client:  # declares no extension
                listed = await client.list_tools()
                seen["tools"] = sorted(tool.name for tool in listed.tools)
                seen["before"] = text_of(
                    await client.call_tool("card_balance", {"card": "corp-4242"})
                )
                seen["first"] = await until_it_runs(client, ARGS)
                seen["balance"] = text_of(
                    await client.call_tool("card_balance", {"card": "corp-4242"})
                )
                seen["again"] = await client.call_tool("charge_card", ARGS)
                seen["other"] = await client.call_tool("charge_card", OTHER_ARGS)
            async with Client(served.gateway, mode="legacy") as acme:
                seen["gateway"] = acme.server_capabilities
            async with httpx2.AsyncClient() as http:
                seen["page"] = (await http.get(served.approve)).status_code
            process.send_signal(signal.SIGTERM)
            seen["exit"] = await asyncio.wait_for(process.wait(), BOUND)
        return seen

    seen = asyncio.run(go())
    served: Served = seen["served"]
    port = served.mcp.removeprefix("http://127.0.0.1:").removesuffix(MCP_PATH)
    assert served.mcp == f"http://127.0.0.1:{port}{MCP_PATH}"
    assert served.gateway == f"http://127.0.0.1:{port}{GATEWAY_MCP_PATH}"
    assert served.approve == f"http://localhost:{port}/approve"
    assert seen["tools"] == ["card_balance", "charge_card"]
    assert seen["before"] == "card corp-4242: 5000.00 USD available; nothing charged yet"
    first: list[types.CallToolResult] = seen["first"]
    # The scripted approver answers a second after the ask: the pending answer came first.
    assert len(first) >= 2
    waiting = error_of(first[0])
    assert waiting["data"]["tool"] == "charge_card"
    assert waiting["data"]["requirement"]["address"] == "human://acme.com/role/finance-approver"
    assert waiting["data"]["ask"]["gateway"] == GATEWAY
    assert waiting["data"]["ask"]["approverPage"] == served.approve
    assert {ask_of(result) for result in first[:-1]} == {ask_of(first[0])}
    assert text_of(first[-1]) == "charged 1480.00 USD to Lufthansa on card corp-4242"
    assert seen["balance"].startswith("card corp-4242: 3520.00 USD available\n")
    assert ask_of(seen["again"]) not in (ask_of(first[0]), ask_of(seen["other"]))
    other = error_of(seen["other"])["data"]["requirement"]
    assert other["callDigest"] != waiting["data"]["requirement"]["callDigest"]
    assert seen["gateway"].experimental[EXTENSION_ID]["id"] == GATEWAY
    assert seen["page"] == 200
    assert seen["exit"] == 0
    assert charged(folder) == ["charged 1480.00 USD to Lufthansa on card corp-4242"]
    assert json.loads((folder / SERVED_FILE).read_text())["mcp"] == served.mcp


class Approver:
    """bob at the approver page: registers his passkey from the invitation, signs in,
    and approves the asks he is shown (a tool-call vote, signed with the key the
    gateway's web channel holds for him)."""

    def __init__(self, http: httpx2.AsyncClient, origin: str) -> None:
        self.http = http
        self.device = SoftwareAuthenticator("localhost", "bob-device", origin=origin)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.http.post(f"/approve/api/{path}", json=body)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    async def sign_in(self, invite: str) -> None:
        token = invite.split("#invite=", 1)[1]
        options = await self.post("enrol/options", {"invite": token})
        challenge = b64url_decode(options["options"]["challenge"])
        await self.post("enrol", {"invite": token, "credential": self.device.register(challenge)})
        options = await self.post("sign-in/options", {})
        credential = self.device.assertion(b64url_decode(options["challenge"]))
        await self.post("sign-in", {"credential": credential})

    async def approve(self, ask_id: str) -> None:
        voted = await self.post(f"asks/{ask_id}/vote", {"decision": "approve"})
        assert voted["decision"] == "approve", voted


def test_the_approver_page_decides_and_a_changed_listing_needs_a_new_approval(
    tmp_path: Path,
) -> None:
    """Without --auto bob approves on the page; the approved call runs once. An approval
    given for charge_card as listed before its description changed is not used: the
    server says why and asks again [CALL-DIGEST]."""

    async def go() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Served] = loop.create_future()
        stop = asyncio.Event()
        with contextlib.closing(listen(0)) as sock:
            serving = asyncio.create_task(
                serve_gated(
                    tmp_path, sock, auto=False, ready=ready.set_result, stop=stop, editable=True
                )
            )
            seen: dict[str, Any] = {}
            try:
                served = await asyncio.wait_for(ready, BOUND)
                assert served.invite is not None
                origin = served.approve.removesuffix("/approve")
                headers = {"Origin": origin}
                async with (
                    httpx2.AsyncClient(base_url=origin, headers=headers) as http,
                    Client(served.mcp, mode="legacy") as client,
                ):
                    seen["advert"] = client.server_capabilities.experimental
                    bob = Approver(http, origin)
                    await bob.sign_in(served.invite)
                    first = await client.call_tool("charge_card", ARGS)
                    seen["still"] = await client.call_tool("charge_card", ARGS)
                    await bob.approve(ask_of(first))
                    seen["ran"] = await until_it_runs(client, ARGS)
                    second = await client.call_tool("charge_card", ARGS)
                    await bob.approve(ask_of(second))
                    await client.call_tool("edit_listing", {"description": "Charge a card."})
                    seen["changed"] = await client.call_tool("charge_card", ARGS)
                    await bob.approve(ask_of(seen["changed"]))
                    seen["rerun"] = await until_it_runs(client, ARGS)
                    seen["asks"] = [ask_of(first), ask_of(second), ask_of(seen["changed"])]
            finally:
                stop.set()
                await asyncio.wait_for(serving, BOUND)
        return seen

    seen = asyncio.run(go())
    assert GATE_EXTENSION_ID in seen["advert"]
    assert seen["advert"][GATE_EXTENSION_ID]["asksForStockClients"] is True
    assert ask_of(seen["still"]) == seen["asks"][0]  # one ask while bob decides
    assert len(seen["ran"]) == 1 and not seen["ran"][0].is_error
    earlier = error_of(seen["changed"])["data"]["earlier"]
    assert earlier["code"] == "APPROVAL_INVALID"
    assert "could not be used" in text_of(seen["changed"])
    assert len(set(seen["asks"])) == 3
    assert len(seen["rerun"]) == 1 and not seen["rerun"][0].is_error
    assert charged(tmp_path) == ["charged 1480.00 USD to Lufthansa on card corp-4242"] * 2


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--serve"], "--serve goes with --gated"),
        (["--web", "--serve"], "--serve goes with --gated"),
        (["--serve", "--auto"], "--serve goes with --gated"),
        (["--gated", "--port", "0"], "--port goes with --web or --gated --serve"),
        (["--port", "0"], "--port goes with --web or --gated --serve"),
        (["--gated", "--serve", "--passkey"], "--passkey goes with --web"),
        (["--list", "--serve"], "--list goes alone"),
    ],
)
def test_serve_flags_that_do_not_go_together_are_refused(flags: list[str], said: str) -> None:
    """[CLI-PATHS] exit 2, CONFIG_INVALID, saying which flag goes with which."""
    result = runner.invoke(app, ["demo", *flags])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "CONFIG_INVALID" in text and said in text, text


def test_a_port_in_use_is_refused_before_anything_is_served(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = runner.invoke(
            app,
            ["demo", "--gated", "--serve", "--port", str(port), "--out", str(tmp_path / "d")],
        )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"cannot listen on 127.0.0.1:{port}" in text and "use another --port" in text


def test_list_names_the_served_gated_demo() -> None:
    result = runner.invoke(app, ["demo", "--list"])
    assert result.exit_code == 0
    assert "--gated --serve" in result.stdout
