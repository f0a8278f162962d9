"""``hatp demo --gated --serve``: the gated ``charge_card`` served to any MCP client until stopped.

One uvicorn app on ``127.0.0.1:P`` serves, over streamable HTTP:

- ``/mcp``: the payments MCP server (:func:`payments_mcp`): ``card_balance``,
  which anyone may call, and ``charge_card``, gated by :func:`hatp.mcp.gate_tools`
  with acme's finance approval of exactly that call. A stock MCP client (no
  hatp extension) that calls it without an approval gets an ``isError``
  result with ``APPROVAL_REQUIRED``: the server has asked acme's Human
  Gateway itself; once a person approved, the same call runs once.
- ``/gateway/mcp``: acme's Human Gateway (and its directory) over MCP
  (:func:`hatp.mcp.serve_gateway`), for a client that asks for itself.
- ``/approve``: acme's approver page (``http://localhost:P/approve``, the
  passkeys' relying party being ``localhost``): the finance approver registers
  a passkey from an invitation link, signs in with it and approves there, as
  in ``hatp demo --web``. With ``auto``, scripted approvers approve each ask
  :data:`AUTO_SECONDS` after it reaches them instead, so a client really sees
  the pending answer first.

The demo authenticates nobody: every caller of ``/mcp`` is taken to be the
travel bot working for alice (:data:`REQUESTER`); a real server takes the
requester from its own authentication of the transport (docs/spec.md §21
[MCP-REQUESTER]). The gateway, which runs in this process, holds each acme
person's Ed25519 key (as a terminal does) to sign the votes they cast on the
page: a vote on a tool call takes no passkey.

:func:`serve_gated` runs it on a socket the caller bound, writes
``FOLDER/served.json`` and says where everything is (:class:`Served`) once it
accepts connections, and stops when told to (SIGINT or SIGTERM by default):
the gateway stops and the world's stores close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount

from hatp._waiting import first_of
from hatp.clock import SystemClock, format_time
from hatp.demo import _payments
from hatp.demo._serving import serving, write_json
from hatp.demo.gated import AGENT, DECIDE_SECONDS, VALID_SECONDS, payments_gate
from hatp.demo.scenarios import APPROVER
from hatp.demo.trip import GATEWAY, PAYMENTS, TRAVELLER, TripWorld
from hatp.demo.web import RP_ID, approver_page
from hatp.directory import PasskeyEnrolment, well_known
from hatp.errors import CallInvalid
from hatp.gate import Requester
from hatp.gateway import WEB, Channel, HumanGateway, WebApprovals, WebChannel
from hatp.http import APPROVER_PATH, enrol_link, hatp_app
from hatp.mcp import gate_tools, serve_gateway
from hatp.model import read_amount
from hatp.store import GateAsks

__all__ = [
    "AUTO_SECONDS",
    "DESCRIPTION",
    "GATEWAY_MCP_PATH",
    "MCP_PATH",
    "REQUESTER",
    "SERVED_FILE",
    "Money",
    "Served",
    "gateway_mcp",
    "payments_mcp",
    "serve_gated",
]

_log = logging.getLogger(__name__)

#: Where the payments MCP server and acme's gateway answer, on the one port.
MCP_PATH = "/mcp"
GATEWAY_MCP_PATH = "/gateway/mcp"
#: What the demo writes once it listens (the fields of :class:`Served`).
SERVED_FILE = "served.json"
#: How long after an ask reaches them the scripted approvers of ``auto`` approve it.
AUTO_SECONDS = 1.0
#: Who every caller of the payments server is taken to be: nobody is authenticated here.
REQUESTER = Requester(AGENT, TRAVELLER)
#: charge_card as listed: what an approval binds (with its input schema).
DESCRIPTION = (
    "Charge a company card now. Irreversible. It runs only with acme's finance approval "
    "of exactly this call: call it, and it says who must approve and what to do next."
)
#: How long the finance approver's invitation to register a passkey lasts.
INVITE_VALID = timedelta(hours=1)
#: How long uvicorn lets open MCP streams finish once told to stop.
_GRACE_SECONDS = 2


class Money(BaseModel):
    """An amount as charge_card takes it: a decimal string and a currency code."""

    value: str = Field(description="A decimal string, e.g. '1480.00'.")
    currency: str = Field(description="An ISO 4217 code, e.g. 'USD'.")


@dataclass(frozen=True)
class Served:
    """Where the served demo answers, and (without ``auto``) the link that registers
    the finance approver's passkey."""

    mcp: str
    gateway: str
    approve: str
    approver: str
    invite: str | None

    def lines(self) -> list[str]:
        """The lines ``hatp demo --gated --serve`` prints on stdout, in order."""
        shown = [f"mcp: {self.mcp}", f"gateway: {self.gateway}", f"approve: {self.approve}"]
        return shown if self.invite is None else [*shown, f"invite: {self.invite}"]


def charger(world: TripWorld) -> Callable[[str, Money, str], str]:
    """The body of ``charge_card``: charge the card now, in the payments store."""
    store = world.stores[PAYMENTS]

    def charge_card(card: str, amount: Money, payee: str) -> str:
        try:
            charged = read_amount({"amount": amount.model_dump()}, "/amount")
        except CallInvalid as exc:
            raise ToolError(exc.message) from None
        try:
            with store.transaction() as conn:
                return _payments.charge_now(conn, card, charged, payee, None, world.clock.now())
        except _payments.CardDeclined as declined:
            raise ToolError(f"the bank declined the charge: {declined}") from None

    return charge_card


def payments_mcp(
    world: TripWorld,
    gateway: HumanGateway,
    *,
    approver_page: str | None = None,
    editable: bool = False,
) -> MCPServer:
    """The payments MCP server: ``card_balance`` for anyone, ``charge_card`` gated.

    ``charge_card(card, amount, payee)`` charges the card at once, in the
    payments store of ``world``, and says what it did; it runs only through
    the gate of :func:`hatp.demo.gated.payments_gate`, which asks ``gateway``
    itself for a stock client (its asks kept in the payments store; people
    pointed at ``approver_page``). ``card_balance(card)`` reads the card's
    available credit and the charges on it. With ``editable`` (tests only) a
    third, plain tool ``edit_listing(description)`` changes ``charge_card``'s
    description as listed, which voids the approvals given for the old one.

    Raises:
        ValueError: as :func:`hatp.mcp.gate_tools`.
    """
    server: MCPServer = MCPServer(
        "payments",
        instructions="payments.example: read a card's balance, or charge it with approval.",
        log_level="WARNING",
    )
    store = world.stores[PAYMENTS]
    charge_card = charger(world)

    @server.tool()
    def card_balance(card: str) -> str:
        """What is left on a company card, and what charge_card charged to it."""
        with store.transaction() as conn:
            left = _payments.balance(conn, card)
        if left is None:
            raise ToolError(f"no card {card!r} on file; the cards are {', '.join(_payments.CARDS)}")
        charges = [
            f"{format_time(line.time)}: {line.detail}"
            for line in world.ledger(PAYMENTS)
            if line.kind == "charged" and line.detail.endswith(f" on card {card}")
        ]
        said = f"card {card}: {left} available"
        return "\n".join([said, *charges]) if charges else f"{said}; nothing charged yet"

    server.add_tool(charge_card, description=DESCRIPTION)
    if editable:

        @server.tool()
        def edit_listing(description: str) -> str:
            """Change charge_card's description as listed (a test's way to change the tool)."""
            server.remove_tool("charge_card")
            server.add_tool(charge_card, description=description)
            return f"charge_card is now listed as: {description}"

    gate_tools(
        server,
        payments_gate(world),
        requester=lambda _ctx: REQUESTER,
        gateway=gateway,
        asks=GateAsks(store),
        decide_seconds=DECIDE_SECONDS,
        valid_seconds=VALID_SECONDS,
        approver_page=approver_page,
    )
    return server


def gateway_mcp(world: TripWorld, gateway: HumanGateway) -> MCPServer:
    """acme's Human Gateway, and its directory's cards, as an MCP server."""
    server: MCPServer = MCPServer(
        "acme-gateway",
        instructions="acme's Human Gateway: ask people to approve a call, then poll.",
        log_level="WARNING",
    )
    serve_gateway(server, gateway, keys=[world.keys["gateway"].public], directory=world.directory)
    return server


async def serve_gated(
    folder: Path,
    sock: socket.socket,
    *,
    auto: bool,
    ready: Callable[[Served], None] | None = None,
    stop: asyncio.Event | None = None,
    stdio: bool = False,
    editable: bool = False,
) -> None:
    """Serve the payments MCP server, acme's gateway and its approver page on ``sock``
    (bound on 127.0.0.1) until ``stop`` is set, or, without ``stop``, until SIGINT or
    SIGTERM; with ``stdio``, also serve the payments server on stdin/stdout, and stop
    as well when stdin closes. The world is ``folder``'s trip world (made if missing).

    Once it accepts connections it writes ``folder/served.json`` and calls
    ``ready(Served)``. With ``auto`` scripted approvers approve each ask
    :data:`AUTO_SECONDS` after it arrives; else the finance approver is invited
    to register a passkey and approves on the page. ``editable``: see
    :func:`payments_mcp`.

    Raises:
        StoreUnavailable: a store cannot be opened.
        RuntimeError: the server could not start.
    """
    clock = SystemClock()
    port = sock.getsockname()[1]
    origin = f"http://{RP_ID}:{port}"
    with TripWorld.open(folder, clock, channels=("terminal",) if auto else (WEB,)) as world:
        page = WebChannel(clock, keys=world.people)
        channels: list[Channel] = [page]
        people = None
        if auto:
            people = world.scripted_people("approve", after_seconds=AUTO_SECONDS)
            channels.append(people)
        gateway = HumanGateway(
            GATEWAY,
            world.keys["gateway"],
            world.directory,
            world.asks,
            channels,
            clock,
            passkey_origins=[origin],
        )
        approve = f"{origin}{APPROVER_PATH}"
        web, enrolment = approver_page(world, gateway, page, origin, world.clock)
        payments = payments_mcp(world, gateway, approver_page=approve, editable=editable)
        acme = gateway_mcp(world, gateway)
        app = _app(world, gateway, web, enrolment, payments, acme, port)
        invite = (
            None if auto else enrol_link(origin, enrolment.invite(APPROVER, valid_for=INVITE_VALID))
        )
        served = Served(
            f"http://127.0.0.1:{port}{MCP_PATH}",
            f"http://127.0.0.1:{port}{GATEWAY_MCP_PATH}",
            approve,
            APPROVER,
            invite,
        )
        try:
            async with serving(app, sock, grace_seconds=_GRACE_SECONDS):
                write_json(folder / SERVED_FILE, asdict(served))
                if ready is not None:
                    ready(served)
                _log.info("gated demo serving on 127.0.0.1:%s (auto: %s)", port, auto)
                with _stopping(stop) as stopped:
                    waits: list[Awaitable[object]] = [stopped.wait()]
                    if stdio:
                        waits.append(payments.run_stdio_async())
                    await first_of(*waits)
        finally:
            if people is not None:
                await people.close()
        _log.info("gated demo stopped")


def _app(
    world: TripWorld,
    gateway: HumanGateway,
    web: WebApprovals,
    enrolment: PasskeyEnrolment,
    payments: MCPServer,
    acme: MCPServer,
    port: int,
) -> Starlette:
    """One app: the two MCP endpoints, then acme's approver page and JSON API."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}"],
        allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}"],
    )
    routes: list[BaseRoute] = []
    for server, path in ((payments, MCP_PATH), (acme, GATEWAY_MCP_PATH)):
        mcp_app = server.streamable_http_app(streamable_http_path=path, transport_security=security)
        routes += mcp_app.routes
    issuer = world.directory.issuer
    acme_app = hatp_app(
        gateway=gateway,
        directory=world.directory,
        well_known=well_known(issuer, GATEWAY, world.keyring.issued_by(issuer)),
        web=web,
        enrolment=enrolment,
        title="acme (hatp demo --gated --serve)",
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # The mounted app gets no lifespan events of its own: its lifespan runs the gateway.
        async with (
            acme_app.router.lifespan_context(acme_app),
            payments.session_manager.run(),
            acme.session_manager.run(),
        ):
            yield

    return Starlette(routes=[*routes, Mount("", app=acme_app)], lifespan=lifespan)


@contextlib.contextmanager
def _stopping(stop: asyncio.Event | None) -> Iterator[asyncio.Event]:
    """``stop``, or an event SIGINT and SIGTERM set while the block runs."""
    if stop is not None:
        yield stop
        return
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for number in signals:
        loop.add_signal_handler(number, stopped.set)
    try:
        yield stopped
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
