"""``hatp serve``'s app over the trip world, for the tests in ``tests/http/test_serve_*``.

acme's real gateway and directory and the trip's coordinator (the four
in-process participants of :class:`~hatp.demo.TripWorld`), with the gateway's
asks and the coordinator's log on the parametrized ``store`` (SQLite and
PostgreSQL), served by :func:`hatp.http.hatp_app`. ``Served.run(body)`` runs
``body(http)`` against the app in process (``httpx2.ASGITransport``, the app's
lifespan entered), on one event loop, within :data:`BOUND` seconds.

``tests/http`` modules cannot import each other (``http`` is the standard
library's package), so what they share lives here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import jsonschema
import pytest
from starlette.applications import Starlette

from hatp.clock import Clock, ManualClock, format_time
from hatp.coordinator import Coordinator
from hatp.demo import TripWorld, trip_plan
from hatp.demo._people import DIRECTORY
from hatp.demo.trip import GATEWAY, TRAVELLER
from hatp.directory import well_known
from hatp.evidence import Keyring, digest
from hatp.gateway import HumanGateway, MemoryChannel, Person
from hatp.http import hatp_app
from hatp.model import parse_plan
from hatp.store import AskStore, DecisionLog, Store

T = TypeVar("T")
BASE = "http://hatp.test"
#: How long one test's HTTP exchange may take, at most.
BOUND = 30.0
START = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)


class WatchedClock(ManualClock):
    """A manual clock that tells who sleeps until when: ``sleeping(moment)`` returns once
    someone waits for ``moment`` (a long poll's end, say)."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self.moments: list[datetime] = []
        self._slept = asyncio.Event()

    async def sleep_until(self, moment: datetime) -> None:
        self.moments.append(moment)
        self._slept.set()
        await super().sleep_until(moment)

    async def sleeping(self, moment: datetime) -> None:
        while moment not in self.moments:
            self._slept.clear()
            await self._slept.wait()


@dataclass
class Served:
    """The trip world behind ``hatp serve``'s app, and the people its gateway asks."""

    BASE = BASE
    BOUND = BOUND

    world: TripWorld
    store: Store
    clock: Clock
    people: MemoryChannel
    gateway: HumanGateway
    coordinator: Coordinator
    app: Starlette

    @property
    def keyring(self) -> Keyring:
        return self.world.keyring

    def run(self, body: Callable[[httpx2.AsyncClient], Awaitable[T]]) -> T:
        """Run ``body(http)`` against the app in process, its lifespan entered."""
        app = self.app

        async def go() -> T:
            transport = httpx2.ASGITransport(app=app)
            try:
                async with (
                    app.router.lifespan_context(app),
                    httpx2.AsyncClient(transport=transport, base_url=BASE) as http,
                ):
                    return await asyncio.wait_for(body(http), BOUND)
            finally:
                await self.people.close()

        return asyncio.run(go())

    def plan(self, txn_id: str = "trip-http-1", **options: Any) -> dict[str, Any]:
        """The trip's plan, deciding within 15 minutes on this world's clock."""
        return trip_plan(txn_id, decide_by=self.clock.now() + timedelta(minutes=15), **options)

    def ask_body(self, txn_id: str = "trip-http-1", **members: Any) -> dict[str, Any]:
        """A ``POST /gateway/asks`` body: the trip's finance group."""
        plan = self.plan(txn_id)
        return {
            "txnId": txn_id,
            "plan": plan,
            "planDigest": digest(parse_plan(plan).to_wire()),
            "groupId": "finance",
            "decideBy": plan["deadlines"]["decideBy"],
            **members,
        }

    def question(self, question_id: str = "q-seat-1", **members: Any) -> dict[str, Any]:
        """A choose question for bob: window or aisle."""
        return {
            "hatpVersion": "0.1",
            "kind": "question",
            "questionId": question_id,
            "asker": "agent://acme.com/travel-bot",
            "onBehalfOf": TRAVELLER,
            "address": "human://acme.com/bob",
            "type": "choose",
            "options": ["window", "aisle"],
            "prompt": {"summary": "Window or aisle?"},
            "decideBy": format_time(self.clock.now() + timedelta(minutes=10)),
            **members,
        }


def open_served(
    folder: Path,
    store: Store,
    clock: Clock,
    *,
    decision: str = "approve",
    after: float = 0.0,
    roles: tuple[str, ...] = ("gateway", "directory", "coordinator"),
    **options: Any,
) -> Served:
    """The trip world in ``folder`` on ``clock``, its asks and log on ``store``, every acme
    person doing ``decision`` after ``after`` seconds (answering "aisle" when asked)."""
    world = TripWorld.open(folder, clock)
    scripted = {
        pid: Person(key, decision, after, answer="aisle")  # type: ignore[arg-type]
        for pid, key in world.people.items()
    }
    people = MemoryChannel("terminal", clock=clock, people=scripted)
    gateway = HumanGateway(
        GATEWAY, world.keys["gateway"], world.directory, AskStore(store), [people], clock
    )
    coordinator = world.coordinator(DecisionLog(store), gateway, retry_delay=0.05)
    document = well_known(DIRECTORY, GATEWAY, world.keyring.issued_by(DIRECTORY))
    app = hatp_app(
        gateway=gateway if "gateway" in roles else None,
        directory=world.directory if "directory" in roles else None,
        coordinator=coordinator if "coordinator" in roles else None,
        well_known=document if "directory" in roles else None,
        **options,
    )
    return Served(world, store, clock, people, gateway, coordinator, app)


@pytest.fixture
def serve(store: Store, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(clock=None, decision="approve", after=0.0, roles=..., **app_options)``:
    the app over the trip world, its asks and log on the parametrized store."""
    opened: list[Served] = []

    def make(clock: Clock | None = None, **options: Any) -> Served:
        served = open_served(
            tmp_path / f"trip-{len(opened)}", store, clock or WatchedClock(START), **options
        )
        opened.append(served)
        return served

    yield make
    for served in opened:
        served.world.close()


def check_answer(document: dict[str, Any], path: str, method: str, response: Any) -> None:
    """Check ``response`` against the schema the OpenAPI ``document`` declares for it."""
    operation = document["paths"][path][method.lower()]
    declared = operation["responses"][str(response.status_code)]
    schema = declared["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator(
        {**schema, "components": document["components"]},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    ).validate(response.json())
