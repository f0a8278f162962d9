"""``hatp serve``'s settings: a TOML file, and flags over it.

:func:`load_config` reads the file (every key checked; a bad one is
``CONFIG_INVALID`` naming it, e.g. ``server.port``); :meth:`ServeConfig.with_flags`
lays the command line's flags over it. What the settings name is opened by
:func:`hatp.http.open_services` (``hatp.http._services``).

A file looks like this (paths are relative to the file)::

    [server]
    host = "127.0.0.1"
    port = 8000
    db = "hatp.db"                       # or postgresql://user@host/db
    keyring = "keyring.json"             # every public key this server trusts
    only = ["gateway", "directory"]      # default: every role configured below
    log_level = "info"                   # debug, info, warning, error (--log-level)

    [gateway]
    id = "https://gateway.acme.com"
    key = "keys/gateway.jwk"             # a private key from `hatp keys new`
    recheck_seconds = 2                  # long polls see other processes' votes this soon

    [gateway.webhook]                    # push channel "webhook": a signed POST per notice
    urls = { "human://acme.com/bob" = "https://chat.acme.com/hooks/bob" }
    timeout_seconds = 10

    [gateway.email]                      # push channel "email" (SMTP), with a single-use
    host = "smtp.acme.com"               # link to the approver page when [web] is set
    port = 587
    sender = "approvals@acme.com"
    starttls = true                      # or tls = true (implicit TLS, port 465)
    username = "approvals"
    password_env = "HATP_SMTP_PASSWORD"  # the password's environment variable, never
    addresses = { "human://acme.com/bob" = "bob@acme.com" }   # the password itself

    [gateway.outbox]                     # how push notices are retried
    attempts = 5
    first_retry_seconds = 2
    max_retry_seconds = 300

    [directory]
    issuer = "https://directory.acme.com"
    cards = "directory.json"             # a directory file of signed Human Cards

    [coordinator]
    id = "hatp://acme.com/coordinator"
    key = "keys/coordinator.jwk"

    [coordinator.participants]
    "mcp://airline.example" = "http://127.0.0.1:9001/mcp"

    [coordinator.gateways]               # approval groups at another organisation's gateway
    "globex.com" = { url = "https://gateway.globex.com", id = "https://gateway.globex.com" }

    [trust]                              # partners' key sets, fetched and pinned at start
    "https://globex.com" = { url = "https://globex.com", pin = "kPrK_qmx…" }
    # [server] key_cache = "key-cache"   # where fetched key sets are kept (rollback guard)

    [web]                                # the approver page, /approve (with [gateway])
    rp_id = "acme.com"                   # the passkeys' relying party
    origins = ["https://approve.acme.com"]   # where the page is served (default for
                                         # rp_id "localhost": http://localhost:<port>)
    session_hours = 8
    directory_key = "keys/directory.jwk" # registers passkeys from invitations
    keys = { "human://acme.com/bob" = "keys/people/bob.jwk" }   # optional
    trusted_proxies = ["10.0.0.0/8"]     # whose X-Forwarded-Proto/-For is believed
    https = true                         # served over https (a TLS proxy): cookies Secure

    [keys]                               # the organisation's signed key set, served at
    set = "hatp-keys.json"               # /.well-known/hatp-keys.json (`hatp keys publish`)

    [api]                                # the JSON API only with a caller's token
    callers = { "agent://acme.com/travel-bot" = "sha256:…" }   # from `hatp api-token`
    signed = true                        # or a request signed by a trusted key (a partner's
                                         # coordinator, from [trust]): [API-SIGNED]

    [store]                              # every wait on the database, in seconds
    call_seconds = 10                    # a request's wait for one store call
    statement_seconds = 5                # PostgreSQL statement_timeout
    lock_seconds = 5                     # PostgreSQL lock_timeout
    idle_in_transaction_seconds = 30     # PostgreSQL idle_in_transaction_session_timeout
    checkout_seconds = 5                 # a free connection from the pool
    connect_seconds = 10                 # PostgreSQL connection attempts
    busy_seconds = 15                    # SQLite busy_timeout
    workers = 8                          # threads doing store work off the event loop
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hatp.errors import ConfigInvalid
from hatp.evidence import origin_fits
from hatp.gateway import SendPolicy, SmtpSettings
from hatp.http._api import DEFAULT_MAX_BODY_BYTES
from hatp.http._callers import ApiCallers
from hatp.store import StoreLimits

#: An organisation's domain, as an address names it (``globex.com``).
_DOMAIN = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")

__all__ = [
    "ROLES",
    "CoordinatorSettings",
    "DirectorySettings",
    "EmailSettings",
    "GatewaySettings",
    "RemoteGateway",
    "Role",
    "ServeConfig",
    "TrustSettings",
    "WebSettings",
    "WebhookSettings",
    "load_config",
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
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    key_cache: str = Field(default="key-cache", min_length=1)


class _Webhook(_Section):
    urls: dict[str, str] = Field(min_length=1)
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)


class _Email(_Section):
    host: str = Field(min_length=1)
    port: int = Field(default=587, ge=1, le=65535)
    sender: str = Field(min_length=3)
    starttls: bool = True
    tls: bool = False
    username: str | None = Field(default=None, min_length=1)
    password_env: str | None = Field(default=None, min_length=1)
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    addresses: dict[str, str] = Field(min_length=1)


_POLICY = SendPolicy()


class _Outbox(_Section):
    attempts: int = Field(default=_POLICY.attempts, ge=1, le=100)
    first_retry_seconds: float = Field(default=_POLICY.first_retry_seconds, gt=0, le=3600)
    max_retry_seconds: float = Field(default=_POLICY.max_retry_seconds, gt=0, le=86400)
    claim_seconds: float = Field(default=_POLICY.claim_seconds, gt=0, le=3600)


class _Gateway(_Section):
    id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    initiator_principals: dict[str, str] = Field(default_factory=dict)
    recheck_seconds: float = Field(default=2.0, gt=0, le=3600)
    webhook: _Webhook | None = None
    email: _Email | None = None
    outbox: _Outbox = Field(default_factory=_Outbox)


class _Directory(_Section):
    issuer: str = Field(min_length=1)
    cards: str = Field(min_length=1)
    gateway: str | None = Field(default=None, min_length=1)


class _RemoteGateway(_Section):
    url: str = Field(min_length=1)
    id: str = Field(min_length=1)


class _Trust(_Section):
    url: str = Field(min_length=1)
    pin: str = Field(min_length=1)


class _Coordinator(_Section):
    id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    participants: dict[str, str] = Field(default_factory=dict)
    gateways: dict[str, _RemoteGateway] = Field(default_factory=dict)
    call_timeout: float = Field(default=10.0, gt=0, le=3600)
    lease_seconds: float = Field(default=30.0, ge=1, le=3600)
    recover_seconds: float | None = Field(default=None, gt=0, le=3600)


class _Web(_Section):
    rp_id: str = Field(min_length=1)
    origins: list[str] | None = Field(default=None, min_length=1)
    session_hours: float = Field(default=8.0, gt=0, le=24 * 30)
    directory_key: str | None = Field(default=None, min_length=1)
    keys: dict[str, str] = Field(default_factory=dict)
    trusted_proxies: list[str] = Field(default_factory=list)
    https: bool = False


class _Keys(_Section):
    set: str = Field(min_length=1)


class _Api(_Section):
    callers: dict[str, str] | None = None  # ApiCallers says what is wrong with them
    signed: bool = False


_LIMITS = StoreLimits()


class _Store(_Section):
    call_seconds: float = Field(default=_LIMITS.call_seconds, gt=0, le=3600)
    statement_seconds: float = Field(default=_LIMITS.statement_seconds, gt=0, le=3600)
    lock_seconds: float = Field(default=_LIMITS.lock_seconds, gt=0, le=3600)
    idle_in_transaction_seconds: float = Field(
        default=_LIMITS.idle_in_transaction_seconds, gt=0, le=3600
    )
    checkout_seconds: float = Field(default=_LIMITS.checkout_seconds, gt=0, le=3600)
    connect_seconds: float = Field(default=_LIMITS.connect_seconds, gt=0, le=3600)
    busy_seconds: float = Field(default=_LIMITS.busy_seconds, gt=0, le=3600)
    workers: int = Field(default=_LIMITS.workers, ge=1, le=256)


class _File(_Section):
    server: _Server = Field(default_factory=_Server)
    gateway: _Gateway | None = None
    directory: _Directory | None = None
    coordinator: _Coordinator | None = None
    web: _Web | None = None
    keys: _Keys | None = None
    api: _Api | None = None
    trust: dict[str, _Trust] = Field(default_factory=dict)
    store: _Store = Field(default_factory=_Store)


@dataclass(frozen=True)
class GatewaySettings:
    """``[gateway]``: the gateway's id (its key's issuer), its private key file, which
    person each agent works for (who may not approve that agent's asks), and how often
    a long poll reads its ask again for a vote another process took."""

    id: str
    key: Path
    initiator_principals: Mapping[str, str] = field(default_factory=dict)
    recheck_seconds: float = 2.0
    #: ``[gateway.webhook]``: each person's webhook URL, and how long one POST may take.
    webhook: WebhookSettings | None = None
    #: ``[gateway.email]``: the SMTP server and each person's address.
    email: EmailSettings | None = None
    #: ``[gateway.outbox]``: how notices over push channels are retried.
    send_policy: SendPolicy = field(default_factory=SendPolicy)


@dataclass(frozen=True)
class WebhookSettings:
    """``[gateway.webhook]``: each person's webhook URL (contact details stay here, never
    on a card), and how long one POST may take."""

    urls: Mapping[str, str]
    timeout_seconds: float = 10.0


@dataclass(frozen=True)
class EmailSettings:
    """``[gateway.email]``: the SMTP server, each person's address, and who to log in as
    (the password read from the environment variable ``password_env`` at start, never
    from the file)."""

    smtp: SmtpSettings
    addresses: Mapping[str, str]
    username: str | None = None
    password_env: str | None = None


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
    their streamable-HTTP MCP endpoint), how long one participant call may take, how
    long this process owns a transaction without renewing (``lease_seconds``: another
    process takes over at most this long after it stopped) and how often it looks for
    transactions to take over (``recover_seconds``; ``None``: a third of the lease)."""

    id: str
    key: Path
    participants: Mapping[str, str] = field(default_factory=dict)
    call_timeout: float = 10.0
    lease_seconds: float = 30.0
    recover_seconds: float | None = None
    #: ``[coordinator.gateways]``: an organisation's domain → its gateway elsewhere
    #: (``url``, ``id``), where that organisation's approval groups are asked
    #: ([COORD-GATEWAYS]), over its JSON API with requests this coordinator signs.
    gateways: Mapping[str, RemoteGateway] = field(default_factory=dict)


@dataclass(frozen=True)
class RemoteGateway:
    """A gateway of another organisation: where its JSON API is, and its id (the issuer
    of its signing key, which the keyring must hold: from ``[trust]``)."""

    url: str
    id: str


@dataclass(frozen=True)
class TrustSettings:
    """``[trust]`` entry: where a partner organisation publishes its key set, and the
    thumbprint of its root key, pinned ([KEYSET-PIN], [KEYSET-FETCH])."""

    url: str
    pin: str


@dataclass(frozen=True)
class WebSettings:
    """``[web]``: the approver page. ``rp_id`` is the passkeys' relying party;
    ``origins`` the page's origins (``None``: ``http://localhost:<port>``, for rpId
    ``localhost`` only); ``directory_key`` the directory's private key file, to
    register passkeys from invitations; ``keys`` Ed25519 key files the gateway signs
    votes with for people (each a key on their card). ``trusted_proxies``: the IP
    addresses and networks whose ``X-Forwarded-Proto``/``-For`` are believed (none: the
    request as it arrives); ``https``: the page is served over https whatever a request
    says, so the session cookie is always ``Secure``."""

    rp_id: str
    origins: tuple[str, ...] | None = None
    session_hours: float = 8.0
    directory_key: Path | None = None
    keys: Mapping[str, Path] = field(default_factory=dict)
    trusted_proxies: tuple[str, ...] = ()
    https: bool = False

    def origins_at(self, port: int) -> tuple[str, ...]:
        """The page's origins: as set, or ``http://localhost:<port>`` by default."""
        return self.origins or (f"http://localhost:{port}",)


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``hatp serve`` needs to know; see the module docstring for the file."""

    host: str = "127.0.0.1"
    port: int = 8000
    db: str = "hatp.db"
    keyring: Path | None = None
    only: tuple[Role, ...] | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: ``[server] log_level``: debug, info, warning or error (``--log-level`` overrides it).
    log_level: str = "info"
    gateway: GatewaySettings | None = None
    directory: DirectorySettings | None = None
    coordinator: CoordinatorSettings | None = None
    web: WebSettings | None = None
    #: ``[api] callers``: who may call the JSON API, by the digest of their token
    #: (``None``: the API is open, for a deployment that authenticates in front of it).
    callers: ApiCallers | None = None
    #: ``[store]``: the bound on every wait on the database.
    store: StoreLimits = field(default_factory=StoreLimits)
    #: ``[keys] set``: the organisation's signed key set file, served as it is at
    #: ``/.well-known/hatp-keys.json`` (``None``: no key set is served).
    key_set: Path | None = None
    #: ``[trust]``: partner organisations whose key sets are fetched at start and whose
    #: keys join the keyring.
    trust: Mapping[str, TrustSettings] = field(default_factory=dict)
    #: ``[server] key_cache``: where fetched key sets are kept (the newest version seen).
    key_cache: Path | None = None
    #: ``[api] signed``: requests signed by a key of the keyring are served ([API-SIGNED]).
    signed_callers: bool = False

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
        log_level=server.log_level,
        gateway=None if read.gateway is None else _gateway(read.gateway, base),
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
            read.coordinator.lease_seconds,
            read.coordinator.recover_seconds,
            {
                domain: RemoteGateway(remote.url, remote.id)
                for domain, remote in read.coordinator.gateways.items()
            },
        ),
        web=None
        if read.web is None
        else WebSettings(
            read.web.rp_id,
            None if read.web.origins is None else tuple(read.web.origins),
            read.web.session_hours,
            None if read.web.directory_key is None else base / read.web.directory_key,
            {human: base / path for human, path in read.web.keys.items()},
            trusted_proxies=tuple(read.web.trusted_proxies),
            https=read.web.https,
        ),
        store=StoreLimits(**read.store.model_dump()),
        key_set=None if read.keys is None else base / read.keys.set,
    )
    config = replace(
        config,
        trust={org: TrustSettings(t.url, t.pin) for org, t in read.trust.items()},
        key_cache=base / server.key_cache,
    )
    if read.api is not None:
        if read.api.callers is None and not read.api.signed:
            raise _bad("api", "say who may call the API: callers, signed = true, or both")
        config = replace(
            config,
            callers=None if read.api.callers is None else _callers(read.api.callers),
            signed_callers=read.api.signed,
        )
    _check(config)
    return config


def _gateway(read: _Gateway, base: Path) -> GatewaySettings:
    webhook = email = None
    if read.webhook is not None:
        for human, url in read.webhook.urls.items():
            if not url.startswith(("https://", "http://")):
                raise _bad(
                    "gateway.webhook.urls",
                    f"{human}'s webhook URL {url.split('?')[0][:80]!r} is not an http(s) URL",
                )
        webhook = WebhookSettings(dict(read.webhook.urls), read.webhook.timeout_seconds)
    if read.email is not None:
        mail = read.email
        try:
            smtp = SmtpSettings(
                host=mail.host,
                port=mail.port,
                sender=mail.sender,
                starttls=mail.starttls and not mail.tls,
                use_tls=mail.tls,
                timeout_seconds=mail.timeout_seconds,
            )
        except ValueError as exc:
            raise _bad("gateway.email", str(exc)) from None
        for human, address in mail.addresses.items():
            if "@" not in address or any(c.isspace() for c in address):
                raise _bad("gateway.email.addresses", f"{human}'s address is not an e-mail address")
        if (mail.username is None) != (mail.password_env is None):
            raise _bad(
                "gateway.email",
                "username and password_env go together: set both to log in, or neither",
            )
        email = EmailSettings(smtp, dict(mail.addresses), mail.username, mail.password_env)
    outbox = read.outbox
    try:
        policy = SendPolicy(
            attempts=outbox.attempts,
            first_retry_seconds=outbox.first_retry_seconds,
            max_retry_seconds=outbox.max_retry_seconds,
            claim_seconds=outbox.claim_seconds,
        )
    except ValueError as exc:
        raise _bad("gateway.outbox", str(exc)) from None
    return GatewaySettings(
        read.id,
        base / read.key,
        read.initiator_principals,
        read.recheck_seconds,
        webhook=webhook,
        email=email,
        send_policy=policy,
    )


def _callers(digests: Mapping[str, str]) -> ApiCallers:
    try:
        return ApiCallers(digests)
    except ValueError as exc:
        raise _bad("api.callers", str(exc)) from None


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
    _check_web(config)
    coordinator = config.coordinator
    for pid, url in (coordinator.participants if coordinator else {}).items():
        if not url.startswith(("http://", "https://")):
            raise _bad(
                f"coordinator.participants.{pid}",
                f"participant {pid}'s MCP endpoint is an http:// or https:// URL, not {url!r}",
            )
    for domain, remote in (coordinator.gateways if coordinator else {}).items():
        if not _DOMAIN.fullmatch(domain):
            raise _bad(
                f"coordinator.gateways.{domain}",
                f"{domain!r} is not an organisation's domain (such as globex.com): the "
                "approval groups at addresses of that domain are asked there",
            )
        if not remote.url.startswith(("http://", "https://")):
            raise _bad(
                f"coordinator.gateways.{domain}.url",
                f"the gateway of {domain} is reached at an http:// or https:// URL",
            )
    for organisation, trusted in config.trust.items():
        if not trusted.url.startswith(("http://", "https://")):
            raise _bad(
                f"trust.{organisation}.url",
                f"{organisation}'s key set is fetched from an http:// or https:// URL",
            )
    if config.signed_callers and not config.trust and config.keyring is None:
        raise _bad(
            "api.signed",
            "signed requests are checked against the keyring and [trust]: name one",
        )


def _check_web(config: ServeConfig) -> None:
    web = config.web
    if web is None:
        return
    if config.gateway is None:
        raise _bad("gateway", "the approver page answers the gateway's asks: add [gateway]")
    if web.origins is None and web.rp_id != "localhost":
        raise _bad(
            "web.origins",
            f"name the origins the approver page is served on (https on {web.rp_id} or a "
            'subdomain of it); only rp_id "localhost" has a default',
        )
    if bad := [o for o in web.origins or () if not origin_fits(o, web.rp_id)]:
        raise _bad(
            "web.origins",
            f"{', '.join(bad)} cannot use passkeys of rp_id {web.rp_id!r}: an origin is "
            "https://host[:port] on the rp_id or a subdomain (http only on localhost)",
        )
    if bad := [p for p in web.trusted_proxies if not _is_address(p)]:
        raise _bad(
            "web.trusted_proxies",
            f"{', '.join(map(repr, bad))}: name each proxy by its IP address or network "
            '("10.0.0.7", "10.0.0.0/8", "fd00::/8"; a network without host bits set)',
        )
    if web.https and (plain := [o for o in web.origins_at(config.port) if o.startswith("http:")]):
        raise _bad(
            "web.https",
            f"the page is served over https, but its origins say http ({', '.join(plain)}): "
            "set web.origins to the https origins browsers reach it on",
        )


def _is_address(text: str) -> bool:
    """An IP address, or a network in CIDR form, as uvicorn's proxy headers read them."""
    try:
        if "/" in text:
            ipaddress.ip_network(text)
        else:
            ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _bad(key: str | None, message: str) -> ConfigInvalid:
    """A refusal of the setting ``key``, its message naming it first."""
    return ConfigInvalid(message if key is None else f"{key}: {message}", key=key)
