"""The approver page over the trip world, for the tests in ``tests/http/test_approver_*``.

acme's real gateway (on the ``web`` channel alone), directory and the trip's
coordinator, served by :func:`hatp.http.hatp_app` with the approver page, the
gateway's asks and the coordinator's log on the parametrized ``store``
(SQLite and PostgreSQL). People register a passkey from an invitation and
sign in with it through the page's own endpoints, as a browser would: their
passkeys are :class:`~hatp.gateway.SoftwareAuthenticator` s, which answer as
a platform authenticator behind a browser does. ``WebServed.run(body)`` runs
``body(http)`` against the app in process, on one event loop, within
:data:`BOUND` seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from starlette.applications import Starlette

from hatp.clock import Clock, ManualClock
from hatp.coordinator import Coordinator, Outcome
from hatp.demo import TripWorld, trip_plan
from hatp.demo._people import DIRECTORY
from hatp.demo.trip import GATEWAY, CaptureFee
from hatp.directory import PasskeyEnrolment, well_known
from hatp.evidence._b64 import b64url_decode
from hatp.gateway import (
    WEB,
    ApproverSessions,
    HumanGateway,
    SoftwareAuthenticator,
    WebApprovals,
    WebChannel,
)
from hatp.http import hatp_app
from hatp.store import AskStore, DecisionLog, PasskeyBook, Store, WebBook
from serve_world import START

T = TypeVar("T")
#: The page's origin: a browser lets http://localhost use passkeys of rpId localhost.
ORIGIN = "http://localhost:4321"
BOB = "human://acme.com/bob"
CAROL = "human://acme.com/carol"
#: How long one test's exchange may take, at most.
BOUND = 30.0


@dataclass
class WebServed:
    """The trip world behind the approver page."""

    world: TripWorld
    clock: Clock
    gateway: HumanGateway
    coordinator: Coordinator
    web: WebApprovals
    enrolment: PasskeyEnrolment
    app: Starlette

    ORIGIN = ORIGIN

    def run(self, body: Callable[[httpx2.AsyncClient], Awaitable[T]]) -> T:
        """Run ``body(http)`` against the app in process, its lifespan entered; the client
        sends the page's ``Origin`` and keeps cookies, as a browser on the page does."""
        app = self.app

        async def go() -> T:
            transport = httpx2.ASGITransport(app=app)
            async with (
                app.router.lifespan_context(app),
                httpx2.AsyncClient(
                    transport=transport, base_url=ORIGIN, headers={"Origin": ORIGIN}
                ) as http,
            ):
                return await asyncio.wait_for(body(http), BOUND)

        return asyncio.run(go())

    def plan(self, txn_id: str = "trip-web-1", **options: Any) -> dict[str, Any]:
        """The trip's plan, deciding within 15 minutes on this world's clock."""
        return trip_plan(txn_id, decide_by=self.clock.now() + timedelta(minutes=15), **options)

    async def finished(self) -> list[Outcome]:
        """Wait for every transaction begun over HTTP to end; return their outcomes,
        those that ended before this was called included."""
        return list(await asyncio.gather(*self.begun))

    def __post_init__(self) -> None:
        # Every transaction's task as the coordinator begins it: the API forgets a task
        # once it ends, which may be before a test asks for its outcome.
        self.begun: list[asyncio.Task[Outcome]] = []
        begin = self.coordinator.begin

        async def begin_noted(plan: Any) -> asyncio.Task[Outcome]:
            task = await begin(plan)
            self.begun.append(task)
            return task

        self.coordinator.begin = begin_noted  # type: ignore[method-assign]


async def enrol(served: WebServed, http: httpx2.AsyncClient, human: str) -> SoftwareAuthenticator:
    """``human`` registers a passkey from an invitation, through the page's endpoints."""
    device = SoftwareAuthenticator("localhost", f"{human}#device", origin=ORIGIN)
    token = served.enrolment.invite(human)
    begun = await http.post("/approve/api/enrol/options", json={"invite": token})
    assert begun.status_code == 200, begun.text
    challenge = b64url_decode(begun.json()["options"]["challenge"])
    done = await http.post(
        "/approve/api/enrol", json={"invite": token, "credential": device.register(challenge)}
    )
    assert done.status_code == 200, done.text
    return device


async def sign_in(http: httpx2.AsyncClient, device: SoftwareAuthenticator) -> httpx2.Response:
    """Sign in with ``device``'s passkey; the client keeps the session cookie."""
    options = await http.post("/approve/api/sign-in/options", json={})
    assert options.status_code == 200, options.text
    challenge = b64url_decode(options.json()["challenge"])
    return await http.post("/approve/api/sign-in", json={"credential": device.assertion(challenge)})


async def the_ask(http: httpx2.AsyncClient) -> str:
    """The id of the one ask in the signed-in person's inbox, once it is there."""
    version = None
    for _ in range(20):
        query = "" if version is None else f"?since={version}&waitSeconds=5"
        inbox = await http.get(f"/approve/api/inbox{query}")
        assert inbox.status_code == 200, inbox.text
        if inbox.json()["asks"]:
            (item,) = inbox.json()["asks"]
            return str(item["askId"])
        version = inbox.json()["version"]
    raise AssertionError("no ask reached the inbox")


async def vote(
    http: httpx2.AsyncClient,
    device: SoftwareAuthenticator,
    ask_id: str,
    decision: str,
    *,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> httpx2.Response:
    """Vote ``decision`` with ``device``'s passkey, as the page's script does (``edit``
    changes the credential before it is sent)."""
    options = await http.post(f"/approve/api/asks/{ask_id}/options", json={"decision": decision})
    assert options.status_code == 200, options.text
    credential = device.assertion(b64url_decode(options.json()["challenge"]))
    if edit is not None:
        edit(credential)
    return await http.post(
        f"/approve/api/asks/{ask_id}/vote", json={"decision": decision, "credential": credential}
    )


def open_web_served(
    folder: Path,
    store: Store,
    *,
    origin: str = ORIGIN,
    clock: Clock | None = None,
    capture_fee: CaptureFee | None = None,
) -> WebServed:
    """The trip world in ``folder``, every card on the web channel, its asks and log on
    ``store``; the approver page at ``origin`` (default :data:`ORIGIN`), on ``clock``
    (default a manual clock at :data:`~serve_world.START`); the card's bank adds
    ``capture_fee`` at capture, if given (its charges previewed as predicted)."""
    clock = clock or ManualClock(START)
    world = TripWorld.open(folder, clock, channels=(WEB,), capture_fee=capture_fee)
    channel = WebChannel(clock)
    gateway = HumanGateway(
        GATEWAY,
        world.keys["gateway"],
        world.directory,
        AskStore(store),
        [channel],
        clock,
        passkey_origins=[origin],
    )
    sessions = ApproverSessions(
        world.directory,
        WebBook(store),
        PasskeyBook(store),
        clock,
        rp_id="localhost",
        origins=[origin],
    )
    assert world.directory_key is not None
    enrolment = PasskeyEnrolment(
        world.directory,
        world.directory_key,
        world.keyring,
        WebBook(store),
        clock,
        rp_id="localhost",
        origins=[origin],
    )
    coordinator = world.coordinator(DecisionLog(store), gateway, retry_delay=0.05)
    web = WebApprovals(gateway, channel, sessions)
    app = hatp_app(
        gateway=gateway,
        directory=world.directory,
        coordinator=coordinator,
        well_known=well_known(DIRECTORY, GATEWAY, world.keyring.issued_by(DIRECTORY)),
        web=web,
        enrolment=enrolment,
    )
    return WebServed(world, clock, gateway, coordinator, web, enrolment, app)


@pytest.fixture
def served(store: Store, tmp_path: Path) -> Iterator[WebServed]:
    """The approver page over the trip world, on the parametrized store."""
    made = open_web_served(tmp_path / "trip", store)
    yield made
    made.world.close()
