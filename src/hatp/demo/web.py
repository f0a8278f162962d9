"""``hatp demo --web``: the business trip, approved by a person in their browser.

The trip world's four participants, acme's directory and Human Gateway and
the trip's coordinator are served by one ``hatp serve`` app (uvicorn, on
``localhost``), with the approver page at ``/approve``: every acme card names
the ``web`` channel, and the page is the only channel. The finance approver
(bob, whom the gateway asks first) is invited to register a passkey onto his
card; once he has, the trip begins, the gateway asks him on the page, and
the demo waits for his answer there. He signs in with the passkey and votes
with it: the passkey signs the plan's digest, his decision and a single-use
nonce, so the gateway cannot approve alone. With ``passkey=True`` the plan's
finance group requires a passkey: the gateway, the coordinator and the
offline verifier all check it.

Every card lists ``webhook``, ``email`` and ``web`` in that order, so the approver
is first told by webhook, then by e-mail, through the gateway's outbox ([OUTBOX]):
the demo's own receiver answers the webhook busy, then gone, and its local mail
server gets the e-mail with a single-use link to the page
(:class:`~hatp.demo._notices.NoticeSinks`; ``notices`` is told of each). The page
lists the ask however he was told.

The demo writes ``web.json`` (the page's URL and the invitation link) as
soon as it listens, so a program (the browser tests) can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hatp._sockets import listening
from hatp.clock import Clock, SystemClock
from hatp.coordinator import Outcome
from hatp.demo._notices import DEMO_SEND_POLICY, NoticeSinks
from hatp.demo._people import DIRECTORY
from hatp.demo._serving import serving, write_json
from hatp.demo.scenarios import APPROVER, DemoRun, Scenario
from hatp.demo.trip import GATEWAY, TripWorld, trip_plan
from hatp.directory import PasskeyEnrolment, well_known
from hatp.evidence import SigningKey
from hatp.gateway import WEB, ApproverSessions, HumanGateway, WebApprovals, WebChannel
from hatp.http import APPROVER_PATH, enrol_link, hatp_app
from hatp.model import WebAuthnKey
from hatp.store import DecisionLog, PasskeyBook, WebBook, open_store

__all__ = ["WEB_FILE", "WebReady", "approver_page", "run_web_demo"]

#: What the demo writes once it listens: ``{url, approve, invites: {person: link}}``.
WEB_FILE = "web.json"
#: The passkeys' relying party: a browser lets ``http://localhost`` use it.
RP_ID = "localhost"
#: How long the demo waits for the passkey to be registered, and for the decision.
WAIT = timedelta(minutes=15)
#: The channels on every card, in the order the gateway tries them.
CHANNELS = ("webhook", "email", WEB)


@dataclass(frozen=True)
class WebReady:
    """Where the demo listens, and the link that registers the approver's passkey."""

    url: str
    approve: str
    approver: str
    invite: str


async def run_web_demo(
    folder: Path,
    *,
    port: int = 4321,
    passkey: bool = False,
    ready: Callable[[WebReady], None] | None = None,
    registered: Callable[[str], None] | None = None,
    wait: timedelta = WAIT,
    notices: Callable[[str], None] | None = None,
) -> DemoRun | None:
    """Serve the trip world with its approver page on ``localhost:port`` (0: any free
    port), invite the finance approver to register a passkey, then run the trip and
    wait for the approver's answer in the browser; return what happened, or ``None``
    if no passkey was registered within ``wait``.

    ``ready(WebReady)`` is called once the page listens (``web.json`` is written
    then too); ``registered(kid)`` once the approver's passkey is on his card.
    With ``passkey``, the plan's finance group requires the approver's passkey.
    ``notices(line)`` is told of each webhook and e-mail the approver is sent.

    Raises:
        OSError: the port cannot be bound.
        StoreUnavailable: a store cannot be opened.
    """
    clock = SystemClock()
    folder.mkdir(parents=True, exist_ok=True)
    world = TripWorld.open(folder, clock, channels=CHANNELS)
    sinks = NoticeSinks(folder, world.keyring, clock, notices or (lambda _: None))
    outcome = None
    try:
        with contextlib.closing(_listening(port)) as sock, sinks.mail_server() as smtp_port:
            log_store = open_store(folder / "coordinator.db")
            try:
                outcome = await _serve_and_run(
                    world,
                    DecisionLog(log_store),
                    sock,
                    passkey,
                    ready,
                    registered,
                    wait,
                    sinks,
                    smtp_port,
                )
            finally:
                log_store.close()
    finally:
        if outcome is None:
            world.close()
    if outcome is None:
        return None
    scenario = Scenario(
        "web", "the finance approver decides in the browser, signing with a passkey"
    )
    return DemoRun(scenario, folder, world, outcome)


async def _serve_and_run(
    world: TripWorld,
    log: DecisionLog,
    sock: socket.socket,
    passkey: bool,
    ready: Callable[[WebReady], None] | None,
    registered: Callable[[str], None] | None,
    wait: timedelta,
    sinks: NoticeSinks,
    smtp_port: int,
) -> Outcome | None:
    """Serve the world's app on ``sock``; once the approver's passkey is registered, run
    the trip and return its outcome (``None``: no passkey within ``wait``)."""
    clock = world.clock
    origin = f"http://{RP_ID}:{sock.getsockname()[1]}"
    channel = WebChannel(clock)
    pushed = sinks.channels(world.keys["gateway"], GATEWAY, [APPROVER], origin, smtp_port)
    gateway = HumanGateway(
        GATEWAY,
        world.keys["gateway"],
        world.directory,
        world.asks,
        [*pushed, channel],
        clock,
        passkey_origins=[origin],
        approver_url=f"{origin}{APPROVER_PATH}",
        send_policy=DEMO_SEND_POLICY,
    )
    web, enrolment = approver_page(world, gateway, channel, origin, clock)
    coordinator = world.coordinator(log, gateway, retry_delay=0.2, poll_seconds=1.0)
    app = hatp_app(
        gateway=gateway,
        directory=world.directory,
        coordinator=coordinator,
        well_known=well_known(DIRECTORY, GATEWAY, [_directory_key(world).public]),
        web=web,
        enrolment=enrolment,
    )
    app.router.routes.append(sinks.route())
    invite = enrol_link(origin, enrolment.invite(APPROVER, valid_for=wait))
    shown = WebReady(origin, f"{origin}{APPROVER_PATH}", APPROVER, invite)
    async with serving(app, sock):
        write_json(
            world.folder / WEB_FILE,
            {"url": origin, "approve": shown.approve, "invites": {APPROVER: invite}},
        )
        if ready is not None:
            ready(shown)
        kid = await _registered(world, clock, wait)
        if kid is None:
            return None
        if registered is not None:
            registered(kid)
        now = clock.now()
        plan = trip_plan(
            f"trip-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}",
            decide_by=now + wait,
            passkey=passkey,
        )
        return await coordinator.run(plan)


def approver_page(
    world: TripWorld, gateway: HumanGateway, channel: WebChannel, origin: str, clock: Clock
) -> tuple[WebApprovals, PasskeyEnrolment]:
    """The approver page's sessions and the registration of passkeys onto acme's cards,
    at ``origin`` (``hatp demo --web`` and ``--gated --serve``)."""
    store = world.asks.store
    sessions = ApproverSessions(
        world.directory, WebBook(store), PasskeyBook(store), clock, rp_id=RP_ID, origins=[origin]
    )
    enrolment = PasskeyEnrolment(
        world.directory,
        _directory_key(world),
        world.keyring,
        WebBook(store),
        clock,
        rp_id=RP_ID,
        origins=[origin],
        rp_name="acme approvals (hatp demo)",
        saved=lambda directory: directory.save(world.folder / "directory.json"),
    )
    return WebApprovals(gateway, channel, sessions), enrolment


def _directory_key(world: TripWorld) -> SigningKey:
    if world.directory_key is None:  # TripWorld.open always sets it
        raise RuntimeError("the trip world holds no directory key")
    return world.directory_key


async def _registered(world: TripWorld, clock: Clock, wait: timedelta) -> str | None:
    """Wait until the approver's card holds a passkey; return its kid (``None``: time out)."""
    until = clock.now() + wait
    while clock.now() < until:
        card = world.directory.card(APPROVER)
        passkeys = [key.kid for key in card.keys if isinstance(key, WebAuthnKey)]
        if passkeys:
            return passkeys[-1]
        await asyncio.sleep(0.2)
    return None


def _listening(port: int) -> socket.socket:
    return listening("127.0.0.1", port)
