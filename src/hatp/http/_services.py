"""What ``hatp serve`` runs: the store, keys, directory, gateway, coordinator and approver page.

:func:`open_services` opens what a :class:`~hatp.http.ServeConfig` names and
closes it again (``hatp serve --demo`` composes the demo world's at the CLI edge).
Every file a setting names is loaded and checked before anything is served
(``CONFIG_INVALID`` naming the setting). No rule lives here: each role
checks its own requests.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.client import Client, advertise
from starlette.applications import Starlette

from hatp.clock import Clock, SystemClock, format_time
from hatp.coordinator import Coordinator, Gateway, GatewayRoutes, Recovery
from hatp.directory import Directory, PasskeyEnrolment, well_known
from hatp.errors import (
    CardInvalid,
    ConfigInvalid,
    InvalidJson,
    KeyInvalid,
    KeyringInvalid,
    KeySetInvalid,
    SignatureInvalid,
    VersionUnsupported,
)
from hatp.evidence import (
    Keyring,
    PublicKey,
    SigningKey,
    VerifiedKeySet,
    card_keyring,
    discover_key_set,
    parse_json,
    thumbprint,
    verify_key_set,
)
from hatp.gateway import (
    ApproverSessions,
    EmailChannel,
    HumanGateway,
    WebApprovals,
    WebChannel,
    WebhookChannel,
)
from hatp.http._api import DEFAULT_MAX_BODY_BYTES
from hatp.http._approver import APPROVER_PATH
from hatp.http._callers import ApiCallers
from hatp.http._config import (
    CoordinatorSettings,
    DirectorySettings,
    GatewaySettings,
    Role,
    ServeConfig,
    WebSettings,
)
from hatp.http._gateway_client import HttpGateway
from hatp.http._serve import hatp_app
from hatp.http._signed import SignedCallers
from hatp.mcp import EXTENSION_ID
from hatp.model import KEYSET_PATH, Channel
from hatp.participant import Participant
from hatp.store import AskStore, DecisionLog, PasskeyBook, Store, WebBook, open_store

if TYPE_CHECKING:
    from hatp.mcp import McpLink

__all__ = ["Services", "enrol_link", "invite", "open_services", "open_web"]


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
    #: The approver page's work, served with the gateway (``[web]``).
    web: WebApprovals | None = None
    #: Registering passkeys from invitations (``web.directory_key``).
    enrolment: PasskeyEnrolment | None = None
    #: Who may call the JSON API (``[api] callers``); ``None``: anyone who reaches it.
    callers: ApiCallers | None = None
    #: Finishing what a stopped coordinator left open (served with the coordinator role).
    recovery: Recovery | None = None
    #: ``web.https``: the approver page's session cookie is always ``Secure``.
    https: bool = False
    #: ``web.trusted_proxies``: whose ``X-Forwarded-Proto``/``-For`` are believed.
    trusted_proxies: tuple[str, ...] = ()
    #: ``[keys] set``: the organisation's key set, verified at start, served as read.
    key_set: bytes | None = None
    #: ``[api] signed``: requests signed by a key of the keyring (partners' from
    #: ``[trust]``), [API-SIGNED].
    signed_callers: SignedCallers | None = None

    def app(self) -> Starlette:
        """The app serving the roles in :attr:`served` (the approver page with the gateway)."""
        serving = set(self.served)
        with_gateway = "gateway" in serving
        return hatp_app(
            gateway=self.gateway if with_gateway else None,
            directory=self.directory if "directory" in serving else None,
            coordinator=self.coordinator if "coordinator" in serving else None,
            well_known=self.well_known if "directory" in serving else None,
            web=self.web if with_gateway else None,
            enrolment=self.enrolment if with_gateway else None,
            max_body_bytes=self.max_body_bytes,
            callers=self.callers,
            https=self.https,
            trusted_proxies=self.trusted_proxies,
            recovery=self.recovery if "coordinator" in serving else None,
            key_set=self.key_set,
            signed_callers=self.signed_callers,
        )


@contextlib.asynccontextmanager
async def open_services(config: ServeConfig) -> AsyncIterator[Services]:
    """Open the store, keys, directory, gateway, coordinator and approver page ``config``
    names.

    The gateway's background loop (SLAs, escalations, deadlines, the outbox) runs
    while the services are open. With ``[web]`` it reaches people on the approver page
    (channel type ``web``; people sign in with a passkey on their card); with
    ``[gateway.webhook]`` and ``[gateway.email]`` it tells them by webhook and e-mail
    (their cards' ``webhook`` and ``email`` channels) through its outbox ([OUTBOX]);
    with none of them, on no channel: every ask is routed and its pending vote signed,
    and it closes at its ``decideBy`` as a withdrawn reject.

    With ``[keys] set``, the key set file is read and verified under its own root at
    start (its signature, its form, unexpired), then served as read.

    Raises:
        ConfigInvalid: a file the settings name cannot be used (``data.key``), e.g. a
            key set that does not verify or has expired (``keys.set``).
        StoreUnavailable: the database cannot be opened.
        SchemaMismatch: the database is behind this hatp (run ``hatp db upgrade``) or
            newer than it (upgrade hatp); nothing was served.
    """
    clock = SystemClock()
    keyring = None if config.keyring is None else _keyring(config.keyring)
    partners = _partners(config, clock)
    if partners:
        keyring = _with_partners(Keyring() if keyring is None else keyring, partners)
    key_set = None if config.key_set is None else _key_set(config.key_set, clock)
    async with contextlib.AsyncExitStack() as stack:
        store = open_store(config.db, limits=config.store)
        stack.callback(store.close)
        notes = [f"store: {config.db} (schema revision {store.schema.after})"]
        if key_set is not None:
            published = key_set[1]
            notes.append(
                f"keys: {KEYSET_PATH}, the key set of {published.organisation} version "
                f"{published.version}, expiring {format_time(published.expires_at)} (publish "
                "the next version before then)"
            )
        directory = gateway = coordinator = document = web = enrolment = None
        if config.directory is not None and keyring is not None:
            directory = _directory(config.directory, keyring)
            gateway_id = config.gateway.id if config.gateway else config.directory.gateway
            keys = keyring.issued_by(directory.issuer)
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
            origins = None if config.web is None else config.web.origins_at(config.port)
            channel = None if config.web is None else _web_channel(config.web, directory, clock)
            pushed = _push_channels(settings, key, clock)
            for push in pushed:
                if isinstance(push, WebhookChannel):
                    stack.push_async_callback(push.close)
            gateway = HumanGateway(
                settings.id,
                key,
                directory,
                AskStore(store),
                [*pushed, *([] if channel is None else [channel])],
                clock,
                initiator_principals=settings.initiator_principals,
                passkey_origins=origins,
                recheck_seconds=settings.recheck_seconds,
                approver_url=None if origins is None else f"{origins[0]}{APPROVER_PATH}",
                send_policy=settings.send_policy,
            )
            if pushed:
                kinds = " and ".join(p.channel_type for p in pushed)
                notes.append(
                    f"people: also told by {kinds} (cards listing them; contact details in "
                    "[gateway.webhook] / [gateway.email]), through the outbox"
                )
            if config.web is None or channel is None or origins is None or keyring is None:
                notes.append(
                    "people: reached on no channel (add [web] for the approver page); asks "
                    "are routed and signed, and close at their decideBy"
                )
            else:
                web, enrolment = open_web(gateway, channel, store, config.web, origins, keyring)
                notes.append(
                    f"people: on the approver page {origins[0]}{APPROVER_PATH} (cards with "
                    "the web channel; sign in with a passkey)"
                )
            if config.coordinator is not None and keyring is not None:
                _check_trusted(keyring, key, settings.id)
                coordinator, links = _coordinator(
                    config.coordinator, gateway, keyring, store, clock
                )
                for link in links:
                    stack.push_async_callback(link.aclose)
                for domain, remote in config.coordinator.gateways.items():
                    notes.append(
                        f"approvals at {domain}: asked at its gateway {remote.id} ({remote.url}), "
                        "requests signed with the coordinator's key"
                    )
        if gateway is not None:
            gateway.start()
            stack.push_async_callback(gateway.stop)
        recovery = None
        # Recover at start and keep looking ([COORD-RECOVER]), where the coordinator role
        # is served: a process that does not serve it claims none of its work.
        coordinating = config.coordinator
        if coordinator is not None and coordinating is not None and "coordinator" in config.served:
            recovery = Recovery(coordinator, every=coordinating.recover_seconds)
            await stack.enter_async_context(recovery.running())
            notes.append(recovery.summary)
        if config.callers is not None:
            notes.append(f"api: bearer tokens of {', '.join(config.callers.callers)}")
        if config.signed_callers:
            notes.append("api: requests signed by a key of the keyring (partners' included)")
        if config.callers is None and not config.signed_callers:
            notes.append(
                "api: open to whoever reaches it (add [api] callers, from hatp api-token, "
                "or authenticate in front of it)"
            )
        yield Services(
            config.served,
            gateway,
            directory,
            coordinator,
            document,
            config.max_body_bytes,
            notes,
            web=web,
            enrolment=enrolment,
            callers=config.callers,
            recovery=recovery,
            https=config.web is not None and config.web.https,
            trusted_proxies=() if config.web is None else config.web.trusted_proxies,
            key_set=None if key_set is None else key_set[0],
            signed_callers=(
                SignedCallers(keyring) if config.signed_callers and keyring is not None else None
            ),
        )


def open_web(
    gateway: HumanGateway,
    channel: WebChannel,
    store: Store,
    settings: WebSettings,
    origins: tuple[str, ...],
    keyring: Keyring,
) -> tuple[WebApprovals, PasskeyEnrolment | None]:
    """The approver page's work over ``gateway`` and its web ``channel``: passkey
    sessions on the gateway's ``store``, and with ``settings.directory_key``,
    passkeys registered from invitations onto the cards (a directory loaded from
    its file writes each registration there, under the file's lock).

    Raises:
        ConfigInvalid: ``web.directory_key`` cannot be read or is not the directory's
            key in ``keyring``.
    """
    directory = gateway.directory
    sessions = ApproverSessions(
        directory,
        WebBook(store),
        PasskeyBook(store),
        gateway.clock,
        rp_id=settings.rp_id,
        origins=origins,
        lifetime=timedelta(hours=settings.session_hours),
    )
    web = WebApprovals(gateway, channel, sessions)
    if settings.directory_key is None or not isinstance(directory, Directory):
        return web, None
    directory_key = _key(settings.directory_key, "web.directory_key")
    _check_issuer(keyring, directory_key, directory.issuer, "web.directory_key")
    enrolment = PasskeyEnrolment(
        directory,
        directory_key,
        keyring,
        WebBook(store),
        gateway.clock,
        rp_id=settings.rp_id,
        origins=origins,
    )  # the directory was loaded from its file: a registration writes it there
    return web, enrolment


def invite(config: ServeConfig, human: str, *, valid_for: timedelta) -> str:
    """Invite ``human`` to register a passkey on the approver page ``config`` serves;
    return the link to hand them (it holds the invitation's token after ``#``, so it
    is never sent to a server in a request line or a log).

    Raises:
        ConfigInvalid: no ``[web]`` with ``directory_key``, no ``[directory]``, no origin
            known (``web.origins`` unset with ``server.port`` 0), or a file the settings
            name cannot be used.
        CardUnknown: the directory holds no card for ``human``.
        StoreUnavailable: the store failed; nobody was invited.
    """
    web, cards = config.web, config.directory
    if web is None or web.directory_key is None or cards is None or config.keyring is None:
        raise ConfigInvalid(
            "web.directory_key: invitations are for a server that registers passkeys: set "
            "[web] directory_key, with [directory] and server.keyring",
            key="web.directory_key",
        )
    if web.origins is None and config.port == 0:
        raise ConfigInvalid(
            "web.origins: the link names the page's origin, and with server.port 0 the port "
            "is only chosen when the server starts: set web.origins or server.port",
            key="web.origins",
        )
    keyring = _keyring(config.keyring)
    directory = _directory(cards, keyring)
    directory_key = _key(web.directory_key, "web.directory_key")
    _check_issuer(keyring, directory_key, directory.issuer, "web.directory_key")
    origins = web.origins_at(config.port)
    store = open_store(config.db)
    try:
        enrolment = PasskeyEnrolment(
            directory,
            directory_key,
            keyring,
            WebBook(store),
            SystemClock(),
            rp_id=web.rp_id,
            origins=origins,
        )
        token = enrolment.invite(human, valid_for=valid_for)
    finally:
        store.close()
    return enrol_link(origins[0], token)


def enrol_link(origin: str, token: str) -> str:
    """The link that registers a passkey with invitation ``token`` on the page at ``origin``."""
    return f"{origin}{APPROVER_PATH}/enrol#invite={token}"


def _push_channels(
    settings: GatewaySettings, key: SigningKey, clock: Clock
) -> list[WebhookChannel | EmailChannel]:
    """The gateway's push channels ``[gateway.webhook]`` and ``[gateway.email]`` name.

    Raises:
        ConfigInvalid: ``password_env`` names a variable that is not set, or the SMTP
            settings with the password refuse (a password over a connection in clear).
    """
    found: list[WebhookChannel | EmailChannel] = []
    if settings.webhook is not None:
        hook = settings.webhook
        try:
            found.append(
                WebhookChannel(
                    key, settings.id, hook.urls, timeout_seconds=hook.timeout_seconds, clock=clock
                )
            )
        except ValueError as exc:
            raise ConfigInvalid(
                f"gateway.webhook.urls: {exc}", key="gateway.webhook.urls"
            ) from None
    if settings.email is not None:
        mail = settings.email
        smtp = mail.smtp
        if mail.username is not None and mail.password_env is not None:
            password = os.environ.get(mail.password_env)
            if not password:
                raise ConfigInvalid(
                    f"gateway.email.password_env: the environment variable {mail.password_env} "
                    "is not set; set it to the SMTP password",
                    key="gateway.email.password_env",
                )
            try:
                smtp = replace(smtp, username=mail.username, password=password)
            except ValueError as exc:
                raise ConfigInvalid(f"gateway.email: {exc}", key="gateway.email") from None
        try:
            found.append(EmailChannel(smtp, mail.addresses, gateway_name=settings.id))
        except ValueError as exc:
            raise ConfigInvalid(
                f"gateway.email.addresses: {exc}", key="gateway.email.addresses"
            ) from None
    return found


def _web_channel(settings: WebSettings, directory: Directory, clock: Clock) -> WebChannel:
    """The web channel, with the Ed25519 keys ``web.keys`` names: each one on its person's
    card, and that card lists the web channel."""
    keys = {}
    for human, path in settings.keys.items():
        setting = f"web.keys.{human}"
        key = _key(path, setting)
        try:
            card = directory.card(human)
        except KeyError:
            raise ConfigInvalid(
                f"{setting}: the directory holds no card {human}", key=setting
            ) from None
        if Channel.WEB not in card.channels:
            raise ConfigInvalid(
                f"{setting}: {human}'s card does not list the web channel, so the approver "
                "page never asks them; add web to the card's channels or drop the key",
                key=setting,
            )
        try:
            public, _ = card_keyring(card).resolve(key.kid)
        except SignatureInvalid:
            public = None
        if public is None or public.raw != key.public.raw:
            raise ConfigInvalid(
                f"{setting}: key {key.kid!r} is not on {human}'s card; votes signed with it "
                "would be refused",
                key=setting,
            )
        keys[human] = key
    return WebChannel(clock, keys)


def _coordinator(
    settings: CoordinatorSettings,
    gateway: HumanGateway,
    keyring: Keyring,
    store: Store,
    clock: SystemClock,
) -> tuple[Coordinator, list[McpLink | HttpGateway]]:
    from hatp.mcp import McpLink  # a reconnecting MCP client per participant

    links = [
        McpLink(pid, _connector(url), keyring, timeout=settings.call_timeout)
        for pid, url in settings.participants.items()
    ]
    participants: dict[str, Participant] = {link.participant_id: link for link in links}
    key = _key(settings.key, "coordinator.key")
    # [COORD-GATEWAYS] another organisation's groups are asked at its own gateway.
    remotes = {
        domain: HttpGateway(
            remote.url, remote.id, signer=key, caller=settings.id, timeout=settings.call_timeout
        )
        for domain, remote in settings.gateways.items()
    }
    asked: Gateway = GatewayRoutes(gateway, remotes) if remotes else gateway
    coordinator = Coordinator(
        coordinator_id=settings.id,
        key=key,
        log=DecisionLog(store),
        participants=participants,
        gateway=asked,
        keyring=keyring,
        clock=clock,
        call_timeout=settings.call_timeout,
        lease_seconds=settings.lease_seconds,
    )
    return coordinator, [*links, *remotes.values()]


def _partners(config: ServeConfig, clock: Clock) -> list[VerifiedKeySet]:
    """The key sets ``[trust]`` names, fetched (or read from the cache) and verified
    against their pinned roots ([KEYSET-FETCH]).

    Raises:
        ConfigInvalid: a set that cannot be fetched or is refused, or is another
            organisation's than the entry names (``data.key`` ``trust.<organisation>``).
    """
    found = []
    for organisation, trusted in config.trust.items():
        key = f"trust.{organisation}"
        try:
            verified = discover_key_set(
                trusted.url, pin=trusted.pin, cache_dir=config.key_cache, now=clock.now()
            )
        except (KeySetInvalid, VersionUnsupported) as exc:
            raise ConfigInvalid(f"{key}: {exc.message}", key=key) from None
        if verified.organisation != organisation:
            raise ConfigInvalid(
                f"{key}: the key set at {trusted.url} is {verified.organisation}'s, not "
                f"{organisation}'s; check the URL and the pin",
                key=key,
            )
        found.append(verified)
    return found


def _with_partners(keyring: Keyring, partners: list[VerifiedKeySet]) -> Keyring:
    """``keyring`` with every key of the partners' sets, each with its issuer and period,
    its issuers trusted.

    Raises:
        ConfigInvalid: a partner's key has a kid the keyring holds for another key, or
            another issuer or period (``data.key`` ``trust``).
    """
    for partner in partners:
        try:
            keyring.include(partner.keyring())
        except KeyringInvalid as exc:
            raise ConfigInvalid(
                f"trust.{partner.organisation}: {exc.message}", key="trust"
            ) from None
    return keyring


def _connector(url: str) -> Callable[[], Client]:
    return lambda: Client(url, extensions=[advertise(EXTENSION_ID)])


def _keyring(path: Path) -> Keyring:
    try:
        return Keyring.load(path)
    except (KeyringInvalid, VersionUnsupported) as exc:
        raise ConfigInvalid(f"server.keyring: {exc.message}", key="server.keyring") from None


def _key_set(path: Path, clock: Clock) -> tuple[bytes, VerifiedKeySet]:
    """The key set file ``[keys] set`` names: its bytes as read, and the set, once it
    verifies under its own root (its signature, its form) and is unexpired now."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigInvalid(
            f"keys.set: cannot read {path}: {exc.strerror}", key="keys.set"
        ) from None
    try:
        doc = parse_json(data)
        verified = verify_key_set(doc, pin=_own_pin(doc), now=clock.now())
    except (InvalidJson, KeySetInvalid, VersionUnsupported) as exc:
        raise ConfigInvalid(
            f"keys.set: {path} is not a key set partners would take: {exc.message}; write "
            "it again with `hatp keys publish` (--from it, and a higher --version)",
            key="keys.set",
        ) from None
    return data, verified


def _own_pin(doc: Any) -> str:
    """The thumbprint of the root a set names (empty when it names none: the set's form
    is then refused before its root is compared)."""
    root = doc.get("root") if isinstance(doc, dict) else None
    try:
        return thumbprint(PublicKey.from_jwk(root)) if isinstance(root, dict) else ""
    except KeyInvalid:
        return ""


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


def _check_trusted(keyring: Keyring, key: SigningKey, gateway_id: str) -> None:
    """The coordinator checks the gateway's approvals against the keyring: fail at start,
    not at the first approval, when it would refuse them."""
    _check_issuer(keyring, key, gateway_id, "server.keyring")


def _check_issuer(keyring: Keyring, key: SigningKey, issuer: str, setting: str) -> None:
    """``key`` is ``issuer``'s in ``keyring``: what it signs will be checked there."""
    try:
        public, by = keyring.resolve(key.kid)
    except SignatureInvalid as exc:
        raise ConfigInvalid(
            f"{setting}: what key {key.kid!r} signs could not be checked against the "
            f"keyring: {exc.message}",
            key=setting,
        ) from None
    if by != issuer or public.raw != key.public.raw:
        raise ConfigInvalid(
            f"{setting}: key {key.kid!r} is not {issuer}'s in the keyring "
            f"(vouched for by {by!r}, or other key material)",
            key=setting,
        )
