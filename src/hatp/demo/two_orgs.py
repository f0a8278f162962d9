"""``hatp demo --two-orgs``: acme's trip needs a partner's sign-off at globex, another
organisation, and each side checks the other only with the keys the other publishes.

Two ``hatp serve`` processes run on 127.0.0.1, one per organisation, each from a
settings file the demo writes:

- **globex** serves its Human Gateway and directory (gina, a partner approver),
  takes requests signed by a key of a trusted organisation (``[api] signed``) and
  trusts acme's key set, pinned by acme's root thumbprint (``[trust]``);
- **acme** serves its gateway, directory and coordinator over the trip's four
  participants (each an MCP server process, as in ``hatp demo --mcp``), trusts
  globex's key set, and asks the plan's ``partner`` group (an address at
  ``globex.com``) at globex's gateway, with requests its coordinator signs
  (``[coordinator.gateways]``, [COORD-GATEWAYS]).

Each organisation publishes its key set on its "website" (here a small server in
the demo's process) at ``/.well-known/hatp-keys.json``, signed by its root key,
and ``hatp serve`` serves it too (``[keys] set``). acme's set shows a rotation: the
coordinator key it used until yesterday is listed ``retired``; globex's shows a
revocation: its gateway's earlier key is ``revoked``. People are told by webhook:
the demo's approver bot takes each ask's webhook (checking the gateway's signature
against that organisation's published keys), signs the person's vote with their
own key and delivers it to the gateway that asked (``POST
/gateway/asks/{askId}/votes``). The trip commits; its record verifies offline
with the keyrings built from both published sets, and not with acme's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hatp._sockets import listening
from hatp.clock import SystemClock, format_time
from hatp.demo._mcp_process import HttpServer, end_process
from hatp.demo._people import DIRECTORY as ACME_DIRECTORY
from hatp.demo._serving import serving
from hatp.demo.trip import (
    COORDINATOR,
    GATEWAY,
    PARTICIPANT_IDS,
    TripWorld,
    trip_plan,
)
from hatp.directory import Directory, sign_card
from hatp.errors import PeerUnavailable, WebhookInvalid
from hatp.evidence import (
    Keyring,
    SigningKey,
    VerifiedKeySet,
    canonicalize,
    discover_key_set,
    sign_key_set,
    thumbprint,
    verify_key_set,
    verify_record,
)
from hatp.evidence._b64 import b64url_encode
from hatp.gateway import sign_vote, verify_webhook, webhook_signature_base
from hatp.http import CoordinatorClient, api_token_digest, sign_request
from hatp.model import KEYSET_PATH, TxnState, VerificationReport
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "ACME",
    "GINA",
    "GLOBEX",
    "GLOBEX_DIRECTORY",
    "GLOBEX_GATEWAY",
    "PARTNER_ADDRESS",
    "TwoOrgsRun",
    "gina_card",
    "run_two_orgs",
    "two_orgs_plan",
]

ACME = "https://acme.com"
GLOBEX = "https://globex.com"
GLOBEX_GATEWAY = "https://gateway.globex.com"
GLOBEX_DIRECTORY = "https://directory.globex.com"
GINA = "human://globex.com/gina"
#: The plan's second approval group: a partner's sign-off, at globex.
PARTNER_ADDRESS = "human://globex.com/role/partner-approver"
#: Who delivers the people's signed votes (a service, not an agent).
BOT = "hatp://demo/approver-bot"
#: How long starting a server and running the trip may each take, at most.
BOUND = 90.0


def two_orgs_plan(txn_id: str, decide_by: datetime) -> dict[str, Any]:
    """The demo trip, with a second approval group: globex's partner approver."""
    plan = trip_plan(txn_id, decide_by=decide_by)
    finance = plan["approvals"][0]
    plan["approvals"].append({**finance, "groupId": "partner", "address": PARTNER_ADDRESS})
    return plan


@dataclass
class TwoOrgsRun:
    """What the demo did: the trip's end, its record, its verification with both
    organisations' published keys and with acme's alone, and what each set said."""

    folder: Path
    state: TxnState
    record: dict[str, Any]
    report: VerificationReport
    acme_only: VerificationReport
    acme_set: VerifiedKeySet
    globex_set: VerifiedKeySet
    #: What globex answered a request signed by acme's retired coordinator key.
    retired_status: int
    #: What the bot answered a webhook signed by globex's revoked gateway key.
    revoked_status: int
    lines: list[str] = field(default_factory=list)

    @property
    def as_expected(self) -> bool:
        """Committed, verified with both keyrings and not with acme's alone, and the
        retired and revoked keys refused."""
        return (
            self.state is TxnState.COMMITTED
            and self.report.ok
            and not self.acme_only.ok
            and self.retired_status == 401
            and self.revoked_status == 400
        )


@dataclass
class _Org:
    """One organisation as the demo sets it up: its root, its key set and where it is."""

    name: str
    folder: Path
    root: SigningKey
    key_set: dict[str, Any]
    people: dict[str, SigningKey]
    #: A key its set lists as retired or revoked: what signs nothing any more.
    stale: SigningKey
    url: str = ""  # its hatp serve, once started
    site: str = ""  # its website, publishing the key set

    @property
    def pin(self) -> str:
        return thumbprint(self.root.public)


async def run_two_orgs(folder: Path, said: Callable[[str], None] | None = None) -> TwoOrgsRun:
    """Set up acme and globex in ``folder``, serve both, run the two-organisation trip,
    and verify its record offline with the keys each organisation publishes.

    Raises:
        PeerUnavailable: a server did not start.
        HatpError: the trip could not be begun.
    """
    tell = said or (lambda _: None)
    folder.mkdir(parents=True, exist_ok=True)
    clock = SystemClock()
    now = clock.now()
    acme = _acme(folder / "acme", now)
    globex = _globex(folder / "globex", now)
    token = secrets.token_urlsafe(32)
    bot = _Bot(token, tell)
    async with contextlib.AsyncExitStack() as stack:
        for org in (acme, globex):
            org.site = await stack.enter_async_context(_website(org.key_set))
            tell(f"{org.name} publishes its key set at {org.site}{KEYSET_PATH} (pin {org.pin})")
        # The bot checks webhooks with the keys each organisation publishes.
        fetched = [
            await asyncio.to_thread(discover_key_set, org.site, pin=org.pin, now=clock.now())
            for org in (acme, globex)
        ]
        bot.keyring = _merged(*fetched)
        bot.people = {**acme.people, **globex.people}
        bot_url = await stack.enter_async_context(_serve_app(bot.app()))
        servers = [HttpServer(acme.folder, pid) for pid in PARTICIPANT_IDS]
        for server in servers:
            await server.start()
            stack.push_async_callback(server.stop)
        _write_globex_config(globex, acme, f"{bot_url}/hook", api_token_digest(token))
        globex.url = await stack.enter_async_context(_hatp_serve(globex))
        tell(f"globex serves its gateway and directory at {globex.url}")
        _write_acme_config(
            acme, globex, f"{bot_url}/hook", {s.participant_id: s.url for s in servers}
        )
        acme.url = await stack.enter_async_context(_hatp_serve(acme))
        tell(f"acme serves its gateway, directory and coordinator at {acme.url}")
        bot.gateways = {GATEWAY: acme.url, GLOBEX_GATEWAY: globex.url}
        txn_id = f"two-orgs-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        async with CoordinatorClient(acme.url) as client:
            await client.begin(two_orgs_plan(txn_id, now + timedelta(minutes=15)))
            tell(f"acme's coordinator began {txn_id}: finance at acme, partner at globex")
            state = await _finished(client, txn_id)
            record = await client.record(txn_id)
        retired_status = await _signed_by_retired(acme, globex, tell)
        revoked_status = await _webhook_by_revoked(globex, f"{bot_url}/hook", tell)
    published = [_verified(o) for o in (acme, globex)]
    both = _merged(*published)
    report = verify_record(record, both)
    acme_only = verify_record(record, published[0].keyring())
    tell(
        f"the record verifies with both organisations' published keys: {report.ok}; "
        f"with acme's alone: {acme_only.ok}"
    )
    return TwoOrgsRun(
        folder,
        state,
        record,
        report,
        acme_only,
        published[0],
        published[1],
        retired_status,
        revoked_status,
        bot.lines,
    )


async def _signed_by_retired(acme: _Org, globex: _Org, tell: Callable[[str], None]) -> int:
    """A request to globex signed with the coordinator key acme retired yesterday."""
    body = b"{}"
    headers = sign_request(
        acme.stale, COORDINATOR, "POST", "/gateway/estimate", body, SystemClock().now()
    )
    async with httpx2.AsyncClient(base_url=globex.url, timeout=BOUND) as http:
        answer = await http.post(
            "/gateway/estimate",
            content=body,
            headers={**headers, "Content-Type": "application/json"},
        )
    tell(
        f"a request signed with acme's retired coordinator key {acme.stale.kid}: globex "
        f"answers {answer.status_code} {answer.json().get('code', '')}"
    )
    return answer.status_code


async def _webhook_by_revoked(globex: _Org, hook: str, tell: Callable[[str], None]) -> int:
    """A webhook signed with the gateway key globex revoked an hour ago."""
    now = format_time(SystemClock().now())
    document = {
        "hatpVersion": PROTOCOL_VERSION,
        "type": "hatp.notice",
        "noticeId": f"ntc_{secrets.token_urlsafe(16)}",
        "event": "ask",
        "gateway": GLOBEX_GATEWAY,
        "askId": "ask-forged",
        "txnId": "two-orgs-forged",
        "askKind": "approval",
        "human": GINA,
        "createdAt": now,
        "decideBy": now,
    }
    body = canonicalize(document)
    signature = globex.stale.sign_bytes(webhook_signature_base(now, body))
    headers = {
        "Content-Type": "application/json",
        "Hatp-Timestamp": now,
        "Hatp-Key-Id": globex.stale.kid,
        "Hatp-Signature": b64url_encode(signature),
    }
    async with httpx2.AsyncClient(timeout=BOUND) as http:
        answer = await http.post(hook, content=body, headers=headers)
    tell(
        f"a webhook signed with globex's revoked gateway key {globex.stale.kid}: the bot "
        f"answers {answer.status_code}"
    )
    return answer.status_code


# --- the organisations ------------------------------------------------------------------


def _acme(folder: Path, now: datetime) -> _Org:
    """acme: the trip world (its people told by webhook), a root key, and a key set
    listing every key of the world, with the coordinator key it used until yesterday
    retired (a rotation)."""
    world = TripWorld.open(folder, SystemClock(), channels=("webhook",))
    world.directory.save(folder / "directory.json")
    world.keyring.save(folder / "keyring.json")
    root = _key(folder / "keys" / "root.jwk", "acme-root-1")
    old = _key(folder / "keys" / "coordinator-old.jwk", f"{COORDINATOR}#key-0")
    since = now - timedelta(days=60)
    keys = [
        _listed(world.keyring.resolve(kid)[0], role, issuer, since)
        for kid, role, issuer in _acme_keys(world)
    ]
    keys.append(
        _listed(
            old.public,
            "coordinator",
            COORDINATOR,
            since - timedelta(days=300),
            status="retired",
            notAfter=format_time(now - timedelta(days=1)),
        )
    )
    key_set = _signed_set(root, ACME, keys, now)
    _write(folder / "hatp-keys.json", key_set)
    people = dict(world.people)
    world.close()
    return _Org("acme", folder, root, key_set, people, old)


def _acme_keys(world: TripWorld) -> list[tuple[str, str, str]]:
    """(kid, role, issuer) of every key acme publishes."""
    found = []
    for kid in world.keyring.kids():
        _, issuer = world.keyring.resolve(kid)
        role = {COORDINATOR: "coordinator", GATEWAY: "gateway", ACME_DIRECTORY: "directory"}
        found.append((kid, role.get(issuer, "participant"), issuer))
    return found


def _globex(folder: Path, now: datetime) -> _Org:
    """globex: a directory with one partner approver (gina, told by webhook), its gateway
    key, and a key set in which the gateway's earlier key is revoked."""
    keys = folder / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    root = _key(keys / "root.jwk", "globex-root-1")
    directory_key = _key(keys / "directory.jwk", f"{GLOBEX_DIRECTORY}#key-1")
    gateway_key = _key(keys / "gateway.jwk", f"{GLOBEX_GATEWAY}#key-1")
    revoked = _key(keys / "gateway-old.jwk", f"{GLOBEX_GATEWAY}#key-0")
    gina = _key(keys / "gina.jwk", f"{GINA}#key-1")
    card = sign_card(gina_card(gina), directory_key)
    trusting = Keyring([(directory_key.public, GLOBEX_DIRECTORY)], [GLOBEX_DIRECTORY])
    Directory(GLOBEX_DIRECTORY, [card], trusting).save(folder / "directory.json")
    Keyring(
        [(directory_key.public, GLOBEX_DIRECTORY), (gateway_key.public, GLOBEX_GATEWAY)],
        [GLOBEX_DIRECTORY, GLOBEX_GATEWAY],
    ).save(folder / "keyring.json")
    since = now - timedelta(days=30)
    listed = [
        _listed(directory_key.public, "directory", GLOBEX_DIRECTORY, since),
        _listed(gateway_key.public, "gateway", GLOBEX_GATEWAY, since),
        _listed(
            revoked.public,
            "gateway",
            GLOBEX_GATEWAY,
            since - timedelta(days=300),
            status="revoked",
            revokedAt=format_time(now - timedelta(hours=1)),
        ),
    ]
    key_set = _signed_set(root, GLOBEX, listed, now)
    _write(folder / "hatp-keys.json", key_set)
    return _Org("globex", folder, root, key_set, {GINA: gina}, revoked)


def gina_card(key: SigningKey, channels: Sequence[str] = ("webhook",)) -> dict[str, Any]:
    """globex's partner approver's card, unsigned: gina approves spending up to 10,000
    USD, answering with ``key``, told over ``channels``."""
    return {
        "hatpVersion": PROTOCOL_VERSION,
        "id": GINA,
        "displayName": "Gina",
        "roles": ["partner-approver"],
        "pools": [],
        "skills": [],
        "authority": [
            {"action": "approve.spend", "maxAmount": {"value": "10000", "currency": "USD"}}
        ],
        "channels": list(channels),
        "availability": {"timezone": "Europe/Berlin", "status": "available"},
        "sla": {"decideSeconds": 900},
        "capacity": {"maxOpen": 10, "open": 0},
        "delegates": [],
        "keys": [key.public.to_jwk()],
        "issuer": GLOBEX_DIRECTORY,
    }


def _key(path: Path, kid: str) -> SigningKey:
    """The key in ``path``, made there the first time."""
    if path.exists():
        return SigningKey.load(path)
    key = SigningKey.generate(kid)
    key.save(path)
    return key


def _listed(public: Any, role: str, issuer: str, since: datetime, **members: Any) -> dict[str, Any]:
    return {
        **public.to_jwk(),
        "role": role,
        "issuer": issuer,
        "notBefore": format_time(since),
        "status": "active",
        **members,
    }


def _signed_set(
    root: SigningKey, organisation: str, keys: list[dict[str, Any]], now: datetime
) -> dict[str, Any]:
    return sign_key_set(
        root,
        organisation=organisation,
        version=2,  # its first set listed the retired key as active
        issued_at=now - timedelta(minutes=1),
        expires_at=now + timedelta(days=7),
        keys=keys,
    )


def _verified(org: _Org) -> VerifiedKeySet:
    return verify_key_set(org.key_set, pin=org.pin, now=SystemClock().now())


def _merged(*sets: VerifiedKeySet) -> Keyring:
    """One keyring holding the keys of ``sets``, each with its issuer and period."""
    merged = Keyring()
    for verified in sets:
        merged.include(verified.keyring())
    return merged


# --- the settings -----------------------------------------------------------------------


def _write_globex_config(globex: _Org, acme: _Org, bot_url: str, bot_digest: str) -> None:
    _toml(
        globex.folder / "hatp.toml",
        {
            "server": {"keyring": "keyring.json", "db": "serve.db", "key_cache": "key-cache"},
            "gateway": {"id": GLOBEX_GATEWAY, "key": "keys/gateway.jwk"},
            "gateway.webhook": {"urls": {GINA: bot_url}},
            "directory": {"issuer": GLOBEX_DIRECTORY, "cards": "directory.json"},
            "keys": {"set": "hatp-keys.json"},
            "trust": {ACME: {"url": acme.site, "pin": acme.pin}},
            "api": {"callers": {BOT: bot_digest}, "signed": True},
        },
    )


def _write_acme_config(
    acme: _Org, globex: _Org, bot_url: str, participants: Mapping[str, str]
) -> None:
    _toml(
        acme.folder / "hatp.toml",
        {
            "server": {"keyring": "keyring.json", "db": "serve.db", "key_cache": "key-cache"},
            "gateway": {"id": GATEWAY, "key": "keys/gateway.jwk"},
            "gateway.webhook": {"urls": dict.fromkeys(acme.people, bot_url)},
            "directory": {"issuer": ACME_DIRECTORY, "cards": "directory.json"},
            "coordinator": {
                "id": COORDINATOR,
                "key": "keys/coordinator.jwk",
                "participants": dict(participants),
            },
            "coordinator.gateways": {"globex.com": {"url": globex.url, "id": GLOBEX_GATEWAY}},
            "keys": {"set": "hatp-keys.json"},
            "trust": {GLOBEX: {"url": globex.site, "pin": globex.pin}},
        },
    )


def _toml(path: Path, tables: Mapping[str, Mapping[str, Any]]) -> None:
    """Write ``tables`` as TOML (strings, booleans and tables of them: JSON spells them
    as TOML does)."""
    lines = []
    for name, members in tables.items():
        lines.append(f"[{name}]")
        for key, value in members.items():
            lines.append(f"{json.dumps(key)} = {_value(value)}")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def _value(value: Any) -> str:
    if isinstance(value, Mapping):
        inner = ", ".join(f"{json.dumps(k)} = {_value(v)}" for k, v in value.items())
        return f"{{ {inner} }}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _write(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


# --- the processes and servers ------------------------------------------------------------


@contextlib.asynccontextmanager
async def _hatp_serve(org: _Org) -> AsyncIterator[str]:
    """``hatp serve --config`` for ``org`` on a free port; its URL while the block runs."""
    log = (org.folder / "serve.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from hatp.cli import main; main()",
        "serve", "--config", str(org.folder / "hatp.toml"), "--port", "0",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), BOUND)
        url = line.decode().strip()
        if not url.startswith("http://"):
            raise PeerUnavailable(
                f"{org.name}'s hatp serve did not start (exit {process.returncode}); see "
                f"{org.folder / 'serve.log'}",
                organisation=org.name,
            )
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
        await end_process(process)
        log.close()


@contextlib.asynccontextmanager
async def _website(key_set: Mapping[str, Any]) -> AsyncIterator[str]:
    """An organisation's website, publishing ``key_set`` at the well-known path."""
    body = json.dumps(key_set).encode()

    async def published(_: Request) -> Response:
        return Response(body, media_type="application/json")

    async with _serve_app(Starlette(routes=[Route(KEYSET_PATH, published)])) as url:
        yield url


@contextlib.asynccontextmanager
async def _serve_app(app: Starlette) -> AsyncIterator[str]:
    with contextlib.closing(listening("127.0.0.1", 0)) as sock:
        async with serving(app, sock):
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def _finished(client: CoordinatorClient, txn_id: str) -> TxnState:
    """Wait (bounded) until the transaction has ended; its state."""
    loop = asyncio.get_running_loop()
    until = loop.time() + BOUND
    while True:
        state = TxnState((await client.state(txn_id))["state"])
        if state.finished or loop.time() > until:
            return state
        await asyncio.sleep(0.2)


@dataclass
class _Bot:
    """The people's approver bot: it takes each ask's webhook, checks the gateway's
    signature with the keys that organisation publishes, and delivers the person's
    vote, signed with their own key, to the gateway that asked."""

    token: str
    tell: Callable[[str], None]
    gateways: dict[str, str] = field(default_factory=dict)
    people: dict[str, SigningKey] = field(default_factory=dict)
    keyring: Keyring = field(default_factory=Keyring)
    lines: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            body = await request.body()
            try:
                notice = verify_webhook(
                    body, request.headers, self.keyring, now=SystemClock().now()
                )
            except WebhookInvalid as error:
                self._say(f"webhook refused: {error.reason}: {error.message}")
                return Response(status_code=400)
            self._say(
                f"webhook from {notice['gateway']} to {notice['human']}: {notice['event']} "
                f"(signature checked with the keys {notice['gateway']} publishes)"
            )
            if notice["event"] in ("ask", "escalation"):
                asyncio.get_running_loop().create_task(self._vote(notice))
            return Response(status_code=200)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    async def _vote(self, notice: Mapping[str, Any]) -> None:
        key = self.people.get(notice["human"])
        url = self.gateways.get(notice["gateway"])
        if key is None or url is None:
            return
        vote = sign_vote(key, notice["payload"], "approve", SystemClock().now())
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx2.AsyncClient(base_url=url, timeout=BOUND) as http:
            answer = await http.post(
                f"/gateway/asks/{notice['askId']}/votes", json={"vote": vote}, headers=headers
            )
        self._say(
            f"{notice['human']} approved, signing with their own key; {notice['gateway']} "
            f"answered {answer.status_code}"
        )

    def _say(self, line: str) -> None:
        self.lines.append(line)
        self.tell(line)
