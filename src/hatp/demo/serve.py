"""The demo trip world served over HTTP (``hatp serve --demo``): composed here, at the
edge, from the roles' and :mod:`hatp.http`'s public API; the HTTP package knows
nothing of the demo."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from hatp._sockets import listening
from hatp.clock import SystemClock
from hatp.coordinator import Recovery
from hatp.demo._notices import DEMO_SEND_POLICY, NoticeSinks
from hatp.demo._serving import serving
from hatp.demo.trip import COORDINATOR, GATEWAY, TripWorld, trip_plan
from hatp.directory import well_known
from hatp.gateway import HumanGateway
from hatp.http import ROLES, Role, Services
from hatp.store import AskStore, DecisionLog, open_store

__all__ = ["demo_services"]

#: The channels on every card: the demo's webhook receiver refuses, so e-mail is used.
_CHANNELS = ("webhook", "email", "terminal")
_notices = logging.getLogger("hatp.demo.notices")


@contextlib.asynccontextmanager
async def demo_services(
    folder: Path, *, db: str | None = None, only: tuple[Role, ...] | None = None
) -> AsyncIterator[Services]:
    """Open the demo trip world in ``folder`` (made if missing) and serve its roles.

    acme's gateway and directory, and the trip's coordinator over the four
    in-process participants; every acme person approves at once, as scripted,
    with a vote signed by their own key. They are told over push channels, through
    the gateway's outbox ([OUTBOX]): a webhook to the demo's receiver, which answers
    410 (their chat bot is gone), then e-mail to the demo's mail server (mails kept
    under ``folder/mail/``), which they read and approve
    (:class:`~hatp.demo._notices.NoticeSinks`); every notice is logged. The gateway's asks and the
    coordinator's log go to ``db`` (default ``folder/serve.db``). Writes
    ``folder/keyring.json`` (to verify records with ``hatp verify``) and
    ``folder/trip-plan.json`` (a ``txn/begin`` body, deciding within 15 minutes).
    While open, the world's holds are swept and, with the coordinator served, what a
    stopped coordinator left open is recovered.

    Raises:
        StoreUnavailable: a store cannot be opened.
    """
    clock = SystemClock()
    folder.mkdir(parents=True, exist_ok=True)
    url = db or str(folder / "serve.db")
    served = only or ROLES
    async with contextlib.AsyncExitStack() as stack:
        world = stack.enter_context(TripWorld.open(folder, clock, channels=_CHANNELS))
        store = open_store(url)
        stack.callback(store.close)
        people = world.scripted_people("approve")
        stack.push_async_callback(people.close)
        sinks = NoticeSinks(folder, world.keyring, clock, _notices.info, answers=[], then=410)
        smtp_port = stack.enter_context(sinks.mail_server())
        hooks = stack.enter_context(contextlib.closing(listening("127.0.0.1", 0)))
        await stack.enter_async_context(serving(Starlette(routes=[sinks.route()]), hooks))
        origin = f"http://127.0.0.1:{hooks.getsockname()[1]}"
        pushed = sinks.channels(
            world.keys["gateway"], GATEWAY, list(world.people), origin, smtp_port
        )
        gateway = HumanGateway(
            GATEWAY,
            world.keys["gateway"],
            world.directory,
            AskStore(store),
            [*pushed, people],
            clock,
            send_policy=DEMO_SEND_POLICY,
        )
        sinks.read_by(world.people, gateway)
        coordinator = world.coordinator(DecisionLog(store), gateway)
        _write(folder / "keyring.json", world.keyring.to_json())
        now = clock.now()
        plan = trip_plan(f"trip-{now:%Y%m%d-%H%M%S}", decide_by=now + timedelta(minutes=15))
        _write(folder / "trip-plan.json", {"plan": plan})
        gateway.start()
        stack.push_async_callback(gateway.stop)
        await stack.enter_async_context(world.sweeping())
        notes = [
            f"demo world: {folder} (acme's directory and gateway, coordinator {COORDINATOR})",
            f"store: {url}",
            "people: every acme person approves at once (scripted, signing with their key), "
            f"told by webhook (refused: gone) then by e-mail (kept in {folder / 'mail'})",
            f"a plan to begin: {folder / 'trip-plan.json'} (its txnId runs once)",
            f"verify a record: hatp verify record.json --keys {folder / 'keyring.json'}",
        ]
        recovery = None
        if "coordinator" in served:  # as hatp serve does ([COORD-RECOVER])
            recovery = Recovery(coordinator)
            await stack.enter_async_context(recovery.running())
            notes.append(recovery.summary)
        issuer = world.directory.issuer
        yield Services(
            served,
            gateway,
            world.directory,
            coordinator,
            well_known(issuer, GATEWAY, world.keyring.issued_by(issuer)),
            notes=notes,
            example=folder / "trip-plan.json",
            recovery=recovery,
        )


def _write(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
