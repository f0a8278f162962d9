"""``hatp serve``'s settings: a TOML file, flags over it, and the roles they open.

:func:`load_config` reads the file (every key checked; a bad one is
``CONFIG_INVALID`` naming it, e.g. ``server.port``); :meth:`ServeConfig.with_flags`
lays the command line's flags over it. :func:`open_services` opens what the
settings name — the store, the keys, the directory, the gateway, the
coordinator and its MCP participants — and closes them again;
:func:`demo_services` opens the demo trip world's instead. No rule lives
here: each role checks its own requests.

A file looks like this (paths are relative to the file)::

    [server]
    host = "127.0.0.1"
    port = 8000
    db = "hatp.db"                       # or postgresql://user@host/db
    keyring = "keyring.json"             # every public key this server trusts
    only = ["gateway", "directory"]      # default: every role configured below

    [gateway]
    id = "https://gateway.acme.com"
    key = "keys/gateway.jwk"             # a private key from `hatp keys new`

    [directory]
    issuer = "https://directory.acme.com"
    cards = "directory.json"             # a directory file of signed Human Cards

    [coordinator]
    id = "hatp://acme.com/coordinator"
    key = "keys/coordinator.jwk"

    [coordinator.participants]
    "mcp://airline.example" = "http://127.0.0.1:9001/mcp"
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mcp.client import Client, advertise
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette

from hatp.clock import SystemClock
from hatp.coordinator import Coordinator
from hatp.directory import Directory, well_known
from hatp.errors import (
    CardInvalid,
    ConfigInvalid,
    KeyInvalid,
    KeyringInvalid,
    SignatureInvalid,
    VersionUnsupported,
)
from hatp.evidence import Keyring, PublicKey, SigningKey
from hatp.gateway import HumanGateway
from hatp.http._api import DEFAULT_MAX_BODY_BYTES
from hatp.http._serve import hatp_app
from hatp.mcp import EXTENSION_ID
from hatp.participant import Participant
from hatp.store import AskStore, DecisionLog, Store, open_store

if TYPE_CHECKING:
    from hatp.mcp import McpLink

__all__ = [
    "ROLES",
    "CoordinatorSettings",
    "DirectorySettings",
    "GatewaySettings",
    "Role",
    "ServeConfig",
    "Services",
    "demo_services",
    "load_config",
    "open_services",
    "parse_config",
    "parse_only",
]

Role = Literal["gateway", "directory", "coordinator"]
#: Every role ``hatp serve`` can serve, in the order it lists them.
ROLES: tuple[Role, ...] = ("gateway", "directory", "coordinator")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Server(_Section):
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8000, ge=0, le=65535)
    db: str = Field(default="hatp.db", min_length=1)
    keyring: str | None = Field(default=None, min_length=1)
    only: list[Role] | None = Field(default=None, min_length=1)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)


class _Gateway(_Section):
    id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    initiator_principals: dict[str, str] = Field(default_factory=dict)


class _Directory(_Section):
    issuer: str = Field(min_length=1)
    cards: str = Field(min_length=1)
    gateway: str | None = Field(default=None, min_length=1)


class _Coordinator(_Section):
    id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    participants: dict[str, str] = Field(default_factory=dict)
    call_timeout: float = Field(default=10.0, gt=0, le=3600)


class _File(_Section):
    server: _Server = Field(default_factory=_Server)
    gateway: _Gateway | None = None
    directory: _Directory | None = None
    coordinator: _Coordinator | None = None


@dataclass(frozen=True)
class GatewaySettings:
    """``[gateway]``: the gateway's id (its key's issuer), its private key file, and which
    person each agent works for (who may not approve that agent's asks)."""

    id: str
    key: Path
    initiator_principals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DirectorySettings:
    """``[directory]``: the cards' issuer, its directory file, and the gateway its
    well-known document names when no ``[gateway]`` is configured."""

    issuer: str
    cards: Path
    gateway: str | None = None


@dataclass(frozen=True)
class CoordinatorSettings:
    """``[coordinator]``: its id and private key file, its participants (id → the URL of
    their streamable-HTTP MCP endpoint), and how long one participant call may take."""

    id: str
    key: Path
    participants: Mapping[str, str] = field(default_factory=dict)
    call_timeout: float = 10.0


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``hatp serve`` needs to know; see the module docstring for the file."""

    host: str = "127.0.0.1"
    port: int = 8000
    db: str = "hatp.db"
    keyring: Path | None = None
    only: tuple[Role, ...] | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    gateway: GatewaySettings | None = None
    directory: DirectorySettings | None = None
    coordinator: CoordinatorSettings | None = None

    @property
    def served(self) -> tuple[Role, ...]:
        """The roles to serve: ``only``, or every role with a section."""
        if self.only is not None:
            return self.only
        return tuple(r for r in ROLES if getattr(self, r) is not None)

    def with_flags(
        self,
        *,
        db: str | None = None,
        host: str | None = None,
        port: int | None = None,
        only: tuple[Role, ...] | None = None,
    ) -> ServeConfig:
        """These settings with each flag given laid over them, checked again.

        Raises:
            ConfigInvalid: the result names a role to serve without its section.
        """
        changed = replace(
            self,
            db=self.db if db is None else db,
            host=self.host if host is None else host,
            port=self.port if port is None else port,
            only=self.only if only is None else only,
        )
        _check(changed)
        return changed


def parse_only(text: str) -> tuple[Role, ...]:
    """Read ``--only``: role names separated by commas, e.g. ``gateway,directory``.

    Raises:
        ConfigInvalid: key ``only``: empty, or a name that is not a role.
    """
    names = [part.strip() for part in text.split(",") if part.strip()]
    wrong = [n for n in names if n not in ROLES]
    if not names or wrong:
        raise ConfigInvalid(
            f"--only takes roles separated by commas, from {', '.join(ROLES)}; "
            f"not {', '.join(wrong) or repr(text)}",
            key="only",
        )
    return tuple(r for r in ROLES if r in names)


def load_config(path: str | Path) -> ServeConfig:
    """Read a TOML settings file; relative paths in it are relative to the file.

    Raises:
        ConfigInvalid: unreadable, not TOML, or a key that is unknown, missing or of
            the wrong type or value (``data.key`` names it, e.g. ``server.port``).
    """
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigInvalid(f"cannot read {path}: {exc.strerror}", key=None) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigInvalid(f"{path} is not TOML: {exc}", key=None) from None
    return parse_config(doc, path.parent, source=str(path))


def parse_config(doc: Mapping[str, Any], base: Path, *, source: str = "config") -> ServeConfig:
    """Read settings from a parsed TOML document; relative paths are relative to ``base``.

    Raises:
        ConfigInvalid: as :func:`load_config`.
    """
    try:
        read = _File.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise ConfigInvalid(f"{source}: {key}: {first['msg']}", key=key) from None
    server = read.server
    config = ServeConfig(
        host=server.host,
        port=server.port,
        db=server.db if "://" in server.db else str(base / server.db),
        keyring=None if server.keyring is None else base / server.keyring,
        only=None if server.only is None else tuple(r for r in ROLES if r in server.only),
        max_body_bytes=server.max_body_bytes,
        gateway=None
        if read.gateway is None
        else GatewaySettings(
            read.gateway.id, base / read.gateway.key, read.gateway.initiator_principals
        ),
        directory=None
        if read.directory is None
        else DirectorySettings(
            read.directory.issuer, base / read.directory.cards, read.directory.gateway
        ),
        coordinator=None
        if read.coordinator is None
        else CoordinatorSettings(
            read.coordinator.id,
            base / read.coordinator.key,
            read.coordinator.participants,
            read.coordinator.call_timeout,
        ),
    )
    _check(config)
    return config


def _check(config: ServeConfig) -> None:
    if not config.served:
        raise _bad(
            None,
            "nothing to serve: configure [gateway], [directory] or [coordinator] "
            "(or try `hatp serve --demo`)",
        )
    for role in config.served:
        if getattr(config, role) is None:
            raise _bad(role, f"it is to be served, but there is no [{role}] table")
    if config.gateway is not None and config.directory is None:
        raise _bad("directory", "the gateway routes asks over a directory: add [directory]")
    if config.coordinator is not None and config.gateway is None:
        raise _bad(
            "gateway",
            "the coordinator asks its approvals of the gateway in this process: add [gateway]",
        )
    if (config.directory or config.coordinator) and config.keyring is None:
        raise _bad(
            "server.keyring",
            "the directory's cards and the coordinator's receipts are verified against a "
            "keyring: set it",
        )
    if (
        "directory" in config.served
        and config.directory is not None
        and config.gateway is None
        and config.directory.gateway is None
    ):
        raise _bad(
            "directory.gateway",
            "the well-known document names the organisation's gateway: set it",
        )
    coordinator = config.coordinator
    for pid, url in (coordinator.participants if coordinator else {}).items():
        if not url.startswith(("http://", "https://")):
            raise _bad(
                f"coordinator.participants.{pid}",
                f"participant {pid}'s MCP endpoint is an http:// or https:// URL, not {url!r}",
            )


def _bad(key: str | None, message: str) -> ConfigInvalid:
    """A refusal of the setting ``key``, its message naming it first."""
    return ConfigInvalid(message if key is None else f"{key}: {message}", key=key)


@dataclass
class Services:
    """The roles ``hatp serve`` opened, and what it tells the person who started it."""

    served: tuple[Role, ...]
    gateway: HumanGateway | None
    directory: Directory | None
    coordinator: Coordinator | None
    well_known: dict[str, Any] | None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Lines for the start-up banner (where things are, what answers asks).
    notes: list[str] = field(default_factory=list)
    #: A ``POST /coordinator/txns`` body to try (the demo's plan), if there is one.
    example: Path | None = None

    def app(self) -> Starlette:
        """The app serving the roles in :attr:`served`."""
        serving = set(self.served)
        return hatp_app(
            gateway=self.gateway if "gateway" in serving else None,
            directory=self.directory if "directory" in serving else None,
            coordinator=self.coordinator if "coordinator" in serving else None,
            well_known=self.well_known if "directory" in serving else None,
            max_body_bytes=self.max_body_bytes,
        )


@contextlib.asynccontextmanager
async def open_services(config: ServeConfig) -> AsyncIterator[Services]:
    """Open the store, keys, directory, gateway and coordinator ``config`` names.

    The gateway's background loop (SLAs, escalations, deadlines) runs while the
    services are open. Today the gateway reaches people on no channel (the
    approver page, its web channel, comes next): every ask is routed and its
    pending vote signed, and it closes at its ``decideBy`` as a withdrawn reject.

    Raises:
        ConfigInvalid: a file the settings name cannot be used (``data.key``).
        StoreUnavailable: the database cannot be opened.
    """
    clock = SystemClock()
    keyring = None if config.keyring is None else _keyring(config.keyring)
    async with contextlib.AsyncExitStack() as stack:
        store = open_store(config.db)
        stack.callback(store.close)
        notes = [f"store: {config.db}"]
        directory = gateway = coordinator = document = None
        if config.directory is not None and keyring is not None:
            directory = _directory(config.directory, keyring)
            gateway_id = config.gateway.id if config.gateway else config.directory.gateway
            keys = _issued(keyring, directory.issuer)
            if not keys:
                raise ConfigInvalid(
                    f"the keyring holds no key of the directory {directory.issuer}, which "
                    "the well-known document publishes: add its public key",
                    key="server.keyring",
                )
            document = well_known(directory.issuer, str(gateway_id), keys)
        if config.gateway is not None and directory is not None:
            settings = config.gateway
            key = _key(settings.key, "gateway.key")
            gateway = HumanGateway(
                settings.id,
                key,
                directory,
                AskStore(store),
                {},
                clock,
                initiator_principals=settings.initiator_principals,
            )
            notes.append(
                "people: reached on no channel yet (the approver page comes next); "
                "asks are routed and signed, and close at their decideBy"
            )
            if config.coordinator is not None and keyring is not None:
                _check_trusted(keyring, key, settings.id)
                coordinator, links = _coordinator(
                    config.coordinator, gateway, keyring, store, clock
                )
                for link in links:
                    stack.push_async_callback(link.aclose)
        if gateway is not None:
            gateway.start()
            stack.push_async_callback(gateway.stop)
        yield Services(
            config.served,
            gateway,
            directory,
            coordinator,
            document,
            config.max_body_bytes,
            notes,
        )


@contextlib.asynccontextmanager
async def demo_services(
    folder: Path, *, db: str | None = None, only: tuple[Role, ...] | None = None
) -> AsyncIterator[Services]:
    """Open the demo trip world in ``folder`` (made if missing) and serve its roles.

    acme's gateway and directory, and the trip's coordinator over the four
    in-process participants; every acme person approves at once, as scripted,
    with a vote signed by their own key. The gateway's asks and the
    coordinator's log go to ``db`` (default ``folder/serve.db``). Writes
    ``folder/keyring.json`` (to verify records with ``hatp verify``) and
    ``folder/trip-plan.json`` (a ``txn/begin`` body, deciding within 15 minutes).

    Raises:
        StoreUnavailable: a store cannot be opened.
    """
    from hatp.demo import COORDINATOR, GATEWAY, TripWorld, trip_plan
    from hatp.demo._people import DIRECTORY

    clock = SystemClock()
    folder.mkdir(parents=True, exist_ok=True)
    url = db or str(folder / "serve.db")
    async with contextlib.AsyncExitStack() as stack:
        world = stack.enter_context(TripWorld.open(folder, clock))
        store = open_store(url)
        stack.callback(store.close)
        people = world.scripted_people("approve")
        stack.push_async_callback(people.close)
        gateway = HumanGateway(
            GATEWAY, world.keys["gateway"], world.directory, AskStore(store), [people], clock
        )
        coordinator = world.coordinator(DecisionLog(store), gateway)
        _write(folder / "keyring.json", world.keyring.to_json())
        now = clock.now()
        plan = trip_plan(f"trip-{now:%Y%m%d-%H%M%S}", decide_by=now + timedelta(minutes=15))
        _write(folder / "trip-plan.json", {"plan": plan})
        gateway.start()
        stack.push_async_callback(gateway.stop)
        yield Services(
            only or ROLES,
            gateway,
            world.directory,
            coordinator,
            well_known(DIRECTORY, GATEWAY, _issued(world.keyring, DIRECTORY)),
            notes=[
                f"demo world: {folder} (acme's directory and gateway, coordinator {COORDINATOR})",
                f"store: {url}",
                "people: every acme person approves at once (scripted, signing with their key)",
                f"a plan to begin: {folder / 'trip-plan.json'} (its txnId runs once)",
                f"verify a record: hatp verify record.json --keys {folder / 'keyring.json'}",
            ],
            example=folder / "trip-plan.json",
        )


def _coordinator(
    settings: CoordinatorSettings,
    gateway: HumanGateway,
    keyring: Keyring,
    store: Store,
    clock: SystemClock,
) -> tuple[Coordinator, list[McpLink]]:
    from hatp.mcp import McpLink  # a reconnecting MCP client per participant

    links = [
        McpLink(pid, _connector(url), keyring, timeout=settings.call_timeout)
        for pid, url in settings.participants.items()
    ]
    participants: dict[str, Participant] = {link.participant_id: link for link in links}
    coordinator = Coordinator(
        coordinator_id=settings.id,
        key=_key(settings.key, "coordinator.key"),
        log=DecisionLog(store),
        participants=participants,
        gateway=gateway,
        keyring=keyring,
        clock=clock,
        call_timeout=settings.call_timeout,
    )
    return coordinator, links


def _connector(url: str) -> Callable[[], Client]:
    return lambda: Client(url, extensions=[advertise(EXTENSION_ID)])


def _keyring(path: Path) -> Keyring:
    try:
        return Keyring.load(path)
    except (KeyringInvalid, VersionUnsupported) as exc:
        raise ConfigInvalid(f"server.keyring: {exc.message}", key="server.keyring") from None


def _key(path: Path, setting: str) -> SigningKey:
    try:
        return SigningKey.load(path)
    except KeyInvalid as exc:
        raise ConfigInvalid(f"{setting}: {exc.message}", key=setting) from None


def _directory(settings: DirectorySettings, keyring: Keyring) -> Directory:
    try:
        directory = Directory.load(settings.cards, keyring)
    except CardInvalid as exc:
        raise ConfigInvalid(f"directory.cards: {exc.message}", key="directory.cards") from None
    if directory.issuer != settings.issuer:
        raise ConfigInvalid(
            f"directory.issuer is {settings.issuer!r}, but {settings.cards} is issued by "
            f"{directory.issuer!r}",
            key="directory.issuer",
        )
    return directory


def _issued(keyring: Keyring, issuer: str) -> list[PublicKey]:
    found = []
    for kid in keyring.kids():
        try:
            key, by = keyring.resolve(kid)
        except SignatureInvalid:  # an issuer the keyring does not trust vouches for it
            continue
        if by == issuer:
            found.append(key)
    return found


def _check_trusted(keyring: Keyring, key: SigningKey, gateway_id: str) -> None:
    """The coordinator checks the gateway's approvals against the keyring: fail at start,
    not at the first approval, when it would refuse them."""
    try:
        public, issuer = keyring.resolve(key.kid)
    except SignatureInvalid as exc:
        raise ConfigInvalid(
            f"server.keyring: the coordinator could not check the gateway's approvals: "
            f"{exc.message}",
            key="server.keyring",
        ) from None
    if issuer != gateway_id or public.raw != key.public.raw:
        raise ConfigInvalid(
            f"server.keyring: key {key.kid!r} is not the gateway {gateway_id}'s "
            f"(vouched for by {issuer!r}, or other key material)",
            key="server.keyring",
        )


def _write(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
