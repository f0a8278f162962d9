"""``hatp serve``'s ``[web]`` table: the approver page's settings, what they open, and
``hatp invite``, over a real settings folder (acme's keys, keyring, directory file)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from hatp.cli import app as cli
from hatp.clock import SystemClock
from hatp.demo import GATEWAY, TripWorld, trip_plan
from hatp.demo._people import DIRECTORY
from hatp.directory import Directory, PasskeyEnrolment, sign_card
from hatp.errors import ConfigInvalid
from hatp.evidence import Keyring, SigningKey, digest
from hatp.gateway import WebApprovals
from hatp.http import ServeConfig, Services, load_config, open_services
from hatp.model import parse_plan

runner = CliRunner()

BOB = "human://acme.com/bob"
ACME_PAGE = 'rp_id = "acme.com"\norigins = ["https://approve.acme.com"]'
#: Every [web] setting, as the module docstring of ``hatp.http._config`` shows them.
FULL_WEB = (
    ACME_PAGE + "\nsession_hours = 2.5\n"
    'directory_key = "world/keys/directory.jwk"\n'
    f'keys = {{ "{BOB}" = "world/keys/people/bob.jwk" }}'
)
#: How long one test's services may take to open, answer and close, at most.
BOUND = 30.0


def _setup(folder: Path, **sections: str | None) -> Path:
    """A deployment in ``folder``: acme's keys (``world/keys/``), directory file (every card
    naming the web channel) and keyring, and a settings file with [server], [gateway],
    [directory] and a localhost [web]; ``sections`` replace or add (``None``: drop) whole
    tables, by name. Also writes keys that are not what they claim: ``forged-bob.jwk`` and
    ``forged-directory.jwk`` (bob's and the directory's kids, other key material) and
    ``stranger.jwk`` (a kid nobody vouches for)."""
    with TripWorld.open(folder / "world", SystemClock(), channels=("web",)) as world:
        world.directory.save(folder / "directory.json")
        world.keyring.save(folder / "keyring.json")
        assert world.directory_key is not None
        directory_kid = world.directory_key.kid
        SigningKey.generate(world.people[BOB].kid).save(folder / "forged-bob.jwk")
    SigningKey.generate(directory_kid).save(folder / "forged-directory.jwk")
    SigningKey.generate("https://stranger.example#key-1").save(folder / "stranger.jwk")
    tables = {
        "server": 'keyring = "keyring.json"\ndb = "serve.db"\nport = 8123',
        "gateway": f'id = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"',
        "directory": f'issuer = "{DIRECTORY}"\ncards = "directory.json"',
        "web": 'rp_id = "localhost"',
        **sections,
    }
    text = "".join(f"[{name}]\n{body}\n\n" for name, body in tables.items() if body is not None)
    (folder / "hatp.toml").write_text(text, encoding="utf-8")
    return folder / "hatp.toml"


def _opened(config: ServeConfig, body: Any) -> Any:
    """Open ``config``'s services and return ``await body(services)``, within :data:`BOUND`."""

    async def go() -> Any:
        async with open_services(config) as services:
            return await body(services)

    return asyncio.run(asyncio.wait_for(go(), BOUND))


async def _get(services: Services, *paths: str) -> list[httpx2.Response]:
    """GET each of ``paths`` from ``services.app()`` in process, its lifespan entered."""
    app = services.app()
    transport = httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=transport, base_url="http://localhost:8123") as http,
    ):
        return [await http.get(path) for path in paths]


# -- reading the table ---------------------------------------------------------------


def test_a_web_table_is_read_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    """[SERVE-CONFIG] rp_id, origins, session_hours, directory_key and keys are read; the
    key files are relative to the settings file; set origins are the page's origins."""
    config = load_config(_setup(tmp_path, web=FULL_WEB))
    web = config.web
    assert web is not None
    assert (web.rp_id, web.origins, web.session_hours) == (
        "acme.com",
        ("https://approve.acme.com",),
        2.5,
    )
    assert web.directory_key == tmp_path / "world/keys/directory.jwk"
    assert dict(web.keys) == {BOB: tmp_path / "world/keys/people/bob.jwk"}
    assert web.origins_at(config.port) == ("https://approve.acme.com",)


def test_a_localhost_page_defaults_to_the_servers_own_port(tmp_path: Path) -> None:
    """[SERVE-CONFIG] rp_id "localhost" without origins: the page is http://localhost:<port>
    (the port the server listens on, flags included); 8 hour sessions, no keys, no
    invitations."""
    config = load_config(_setup(tmp_path))
    web = config.web
    assert web is not None
    assert (web.origins, web.session_hours, web.directory_key, dict(web.keys)) == (
        None,
        8.0,
        None,
        {},
    )
    assert web.origins_at(config.port) == ("http://localhost:8123",)
    moved = config.with_flags(port=9000)
    assert moved.web is not None and moved.web.origins_at(moved.port) == ("http://localhost:9000",)


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"gateway": None, "directory": f'issuer = "{DIRECTORY}"\ncards = "directory.json"\n'
          f'gateway = "{GATEWAY}"'}, "gateway"),
        ({"web": 'rp_id = "acme.com"'}, "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = ["https://evil.example"]'}, "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = ["http://acme.com"]'}, "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = ["https://acme.com.evil.example"]'},
         "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = ["https://approve.acme.com/approve"]'},
         "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = ["https://approve.acme.com", "http://x"]'},
         "web.origins"),
        ({"web": 'rp_id = "localhost"\norigins = ["http://127.0.0.1:8123"]'}, "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = []'}, "web.origins"),
        ({"web": 'rp_id = "acme.com"\norigins = "https://approve.acme.com"'}, "web.origins"),
        ({"web": 'origins = ["https://approve.acme.com"]'}, "web.rp_id"),
        ({"web": "rp_id = 5"}, "web.rp_id"),
        ({"web": 'rp_id = "localhost"\nsession_hour = 8'}, "web.session_hour"),
        ({"web": 'rp_id = "localhost"\nsession_hours = 0'}, "web.session_hours"),
        ({"web": 'rp_id = "localhost"\nsession_hours = 721'}, "web.session_hours"),
        ({"web": 'rp_id = "localhost"\nsession_hours = "8"'}, "web.session_hours"),
        ({"web": 'rp_id = "localhost"\ndirectory_key = ""'}, "web.directory_key"),
        ({"web": 'rp_id = "localhost"\nkeys = ["bob.jwk"]'}, "web.keys"),
        ({"web": f'rp_id = "localhost"\nkeys = {{ "{BOB}" = 3 }}'}, f"web.keys.{BOB}"),
    ],
)  # fmt: skip
def test_a_bad_web_setting_is_refused_naming_its_key(
    tmp_path: Path, sections: dict[str, Any], key: str
) -> None:
    """[SERVE-CONFIG] [web] without [gateway], a page with no origins off localhost, an
    origin that cannot use the rp_id's passkeys, an unknown key, a wrong type or value:
    CONFIG_INVALID, ``data.key`` the setting, the message naming it."""
    with pytest.raises(ConfigInvalid) as refused:
        load_config(_setup(tmp_path, **sections))
    assert refused.value.data["key"] == key
    assert key in refused.value.message


def test_the_largest_session_allowed_is_thirty_days(tmp_path: Path) -> None:
    """[SERVE-CONFIG] session_hours up to 720 (30 days) is taken as written."""
    web = load_config(_setup(tmp_path, web='rp_id = "localhost"\nsession_hours = 720')).web
    assert web is not None and web.session_hours == 720


# -- what the table opens --------------------------------------------------------------


@pytest.mark.parametrize(
    ("web", "key"),
    [
        (f'keys = {{ "{BOB}" = "world/keys/people/alice.jwk" }}', f"web.keys.{BOB}"),
        (f'keys = {{ "{BOB}" = "forged-bob.jwk" }}', f"web.keys.{BOB}"),
        (f'keys = {{ "{BOB}" = "directory.json" }}', f"web.keys.{BOB}"),
        (f'keys = {{ "{BOB}" = "missing.jwk" }}', f"web.keys.{BOB}"),
        ('keys = { "human://acme.com/zed" = "world/keys/people/bob.jwk" }',
         "web.keys.human://acme.com/zed"),
        ('directory_key = "world/keys/gateway.jwk"', "web.directory_key"),
        ('directory_key = "forged-directory.jwk"', "web.directory_key"),
        ('directory_key = "stranger.jwk"', "web.directory_key"),
        ('directory_key = "missing.jwk"', "web.directory_key"),
    ],
)  # fmt: skip
def test_key_files_that_cannot_serve_the_page_are_refused_at_start(
    tmp_path: Path, web: str, key: str
) -> None:
    """[SERVE-CONFIG] a web.keys file that is not a key on that person's card (another's, a
    forgery under their kid, no key at all), or a person with no card; a
    web.directory_key that is not the directory's key in the keyring: CONFIG_INVALID
    naming the setting, nothing served."""
    config = load_config(_setup(tmp_path, web=f'rp_id = "localhost"\n{web}'))
    opened: list[Services] = []

    async def body(services: Services) -> None:
        opened.append(services)

    with pytest.raises(ConfigInvalid) as refused:
        _opened(config, body)
    assert refused.value.data["key"] == key
    assert refused.value.message.startswith(key)
    assert opened == []


def test_a_key_for_someone_the_page_never_asks_is_refused_at_start(tmp_path: Path) -> None:
    """[SERVE-CONFIG] web.keys holds bob's own key, but his card (signed by the directory
    as it should be) lists no web channel: the page would never ask him, so the key is
    refused, naming the setting and what to change."""
    settings = _setup(
        tmp_path, web=f'rp_id = "localhost"\nkeys = {{ "{BOB}" = "world/keys/people/bob.jwk" }}'
    )
    keyring = Keyring.load(tmp_path / "keyring.json")
    directory = Directory.load(tmp_path / "directory.json", keyring)
    body = {k: v for k, v in directory.signed(BOB).items() if k != "signature"}
    directory_key = SigningKey.load(tmp_path / "world/keys/directory.jwk")
    with directory.editing():
        directory.replace_card(sign_card({**body, "channels": ["email"]}, directory_key), keyring)

    with pytest.raises(ConfigInvalid) as refused:
        _opened(load_config(settings), lambda services: asyncio.sleep(0))
    assert refused.value.data["key"] == f"web.keys.{BOB}"
    assert "does not list the web channel" in refused.value.message


def test_with_a_web_table_the_gateway_serves_the_approver_page(tmp_path: Path) -> None:
    """[SERVE-CONFIG] with [web]: the approver page's work on the configured rp_id and
    origins, passkeys registered from invitations (directory_key), the person's key held
    for their votes; /approve answers a visitor with the sign-in page, and the index
    names it."""
    config = load_config(_setup(tmp_path, web=FULL_WEB))

    async def body(services: Services) -> tuple[Services, list[httpx2.Response]]:
        return services, await _get(services, "/", "/approve")

    services, (index, page) = _opened(config, body)
    web = services.web
    assert isinstance(web, WebApprovals)
    assert (web.sessions.rp_id, web.sessions.origins) == ("acme.com", ("https://approve.acme.com",))
    assert web.gateway is services.gateway
    held = web.channel.key(BOB)
    bob = SigningKey.load(tmp_path / "world/keys/people/bob.jwk")
    assert held is not None and held.public.raw == bob.public.raw
    assert web.channel.key("human://acme.com/carol") is None
    assert isinstance(services.enrolment, PasskeyEnrolment)
    assert services.enrolment.rp_id == "acme.com"
    assert index.json()["approve"] == "/approve"
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "Sign in with your passkey" in page.text
    assert any("https://approve.acme.com/approve" in note for note in services.notes)


def test_without_directory_key_the_page_registers_no_passkeys(tmp_path: Path) -> None:
    """[SERVE-CONFIG] [web] without directory_key: the page is served on the localhost
    default origin, but nobody registers a passkey through it."""
    config = load_config(_setup(tmp_path))

    async def body(services: Services) -> tuple[Services, list[httpx2.Response]]:
        return services, await _get(services, "/approve")

    services, (page,) = _opened(config, body)
    assert services.web is not None
    assert services.web.sessions.origins == ("http://localhost:8123",)
    assert services.enrolment is None
    assert page.status_code == 200 and "Sign in" in page.text


def test_without_a_web_table_there_is_no_approver_page(tmp_path: Path) -> None:
    """[SERVE-CONFIG] no [web]: no page, no registering, /approve is 404 and the index's
    approve is null; the banner says people are reached on no channel."""
    config = load_config(_setup(tmp_path, web=None))

    async def body(services: Services) -> tuple[Services, list[httpx2.Response]]:
        return services, await _get(services, "/", "/approve")

    services, (index, page) = _opened(config, body)
    assert (services.web, services.enrolment) == (None, None)
    assert index.json()["approve"] is None
    assert page.status_code == 404
    assert any("no channel" in note for note in services.notes)


def test_an_ask_reaches_its_approver_on_the_page_the_settings_open(tmp_path: Path) -> None:
    """[SERVE-CONFIG] the web channel [web] opens is the gateway's: an ask posted to the
    gateway wakes bob's page and waits in his inbox there."""
    config = load_config(_setup(tmp_path, web=FULL_WEB))

    async def body(services: Services) -> tuple[int, list[str], bool]:
        web = services.web
        assert web is not None
        empty = web.version(BOB)
        app = services.app()
        transport = httpx2.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(transport=transport, base_url="http://localhost:8123") as http,
        ):
            asked = await http.post("/gateway/asks", json=_ask_body())
            version = await web.changed(BOB, empty, BOUND)
            moved = version != empty
            return asked.status_code, [n.payload["txnId"] for n in web.inbox(BOB)], moved

    status, inbox, moved = _opened(config, body)
    assert status == 200
    assert moved
    assert inbox == ["trip-web-config-1"]


# -- hatp invite ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("web", "origin"),
    [
        (FULL_WEB, "https://approve.acme.com"),
        ('rp_id = "localhost"\ndirectory_key = "world/keys/directory.jwk"',
         "http://localhost:8123"),
    ],
)  # fmt: skip
def test_an_invitation_printed_by_hatp_invite_registers_on_the_served_page(
    tmp_path: Path, web: str, origin: str
) -> None:
    """[SERVE-CLI] ``hatp invite HUMAN --config FILE --hours H`` prints the page's
    registration link alone on stdout, the token after ``#invite=``, and exits 0; the
    server opened from the same file knows the invitation: bob's, unused, good for H
    hours."""
    path = _setup(tmp_path, web=web)
    result = runner.invoke(cli, ["invite", BOB, "--config", str(path), "--hours", "2"])
    assert result.exit_code == 0, result.output
    link = result.stdout.strip()
    assert "\n" not in link
    prefix = f"{origin}/approve/enrol#invite="
    assert link.startswith(prefix)
    token = link.removeprefix(prefix)
    assert len(token) >= 32
    assert BOB in result.stderr

    async def body(services: Services) -> Any:
        assert services.enrolment is not None
        return services.enrolment.invitation(token)

    invitation = _opened(load_config(path), body)
    assert invitation.human == BOB
    assert invitation.used_at is None
    assert invitation.expires_at - invitation.created_at == timedelta(hours=2)


@pytest.mark.parametrize(
    ("sections", "human", "said"),
    [
        ({}, BOB, "CONFIG_INVALID: web.directory_key"),
        ({"web": None}, BOB, "CONFIG_INVALID: web.directory_key"),
        ({"web": 'rp_id = "localhost"\ndirectory_key = "forged-directory.jwk"'}, BOB,
         "CONFIG_INVALID: web.directory_key"),
        ({"web": 'rp_id = "localhost"\ndirectory_key = "world/keys/directory.jwk"'},
         "human://acme.com/zed", "CARD_UNKNOWN"),
        ({"web": 'rp_id = "acme.com"\ndirectory_key = "world/keys/directory.jwk"'}, BOB,
         "CONFIG_INVALID: web.origins"),
        ({"server": 'keyring = "keyring.json"\ndb = "serve.db"\nport = 0',
          "web": 'rp_id = "localhost"\ndirectory_key = "world/keys/directory.jwk"'}, BOB,
         "CONFIG_INVALID: web.origins"),
    ],
)  # fmt: skip
def test_hatp_invite_without_a_way_to_register_says_why_and_exits_2(
    tmp_path: Path, sections: dict[str, Any], human: str, said: str
) -> None:
    """[SERVE-CLI] settings that register no passkeys (no [web] directory_key, or not the
    directory's key), an unusable [web], or a person with no card: ``error CODE`` on
    stderr, nothing on stdout, exit 2, nobody invited."""
    path = _setup(tmp_path, **sections)
    result = runner.invoke(cli, ["invite", human, "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert f"error {said}" in result.stderr
    assert result.stdout == ""
    assert "#invite=" not in result.output


def _ask_body() -> dict[str, Any]:
    now = SystemClock().now()
    plan = trip_plan("trip-web-config-1", decide_by=now + timedelta(minutes=15))
    return {
        "txnId": "trip-web-config-1",
        "plan": plan,
        "planDigest": digest(parse_plan(plan).to_wire()),
        "groupId": "finance",
        "decideBy": plan["deadlines"]["decideBy"],
    }
