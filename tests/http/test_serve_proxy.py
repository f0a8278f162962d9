"""``hatp serve`` behind a reverse proxy that ends TLS: ``[web] trusted_proxies`` and
``https``, the approver page's session cookie, and its origin check, over a real settings
folder (acme's keys, keyring, directory file) and, once, a real uvicorn process."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hatp.clock import SystemClock
from hatp.demo import GATEWAY, TripWorld
from hatp.demo._people import DIRECTORY
from hatp.errors import ConfigInvalid
from hatp.evidence._b64 import b64url_decode
from hatp.gateway import SoftwareAuthenticator
from hatp.http import ServeConfig, Services, load_config, open_services

BOB = "human://acme.com/bob"
#: Where browsers reach the page: the proxy's https origin.
PAGE = "https://approve.acme.com"
#: Where the proxy reaches hatp serve: plain http inside the deployment.
INSIDE = "http://hatp.internal:8123"
#: The proxy's address, and an address of nobody trusted.
PROXY, STRANGER = "10.0.0.7", "192.0.2.9"
ACME_PAGE = f'rp_id = "acme.com"\norigins = ["{PAGE}"]\ndirectory_key = "world/keys/directory.jwk"'
FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.5"}
#: How long one test's services may take to open, answer and close, at most.
BOUND = 60.0
SERVE = "from hatp.cli import main; main()"


def _setup(folder: Path, web: str, *, port: int = 8123) -> Path:
    """acme's gateway and directory (every card on the web channel) in ``folder``, with
    the [web] table ``web``; returns the settings file."""
    with TripWorld.open(folder / "world", SystemClock(), channels=("web",)) as world:
        world.directory.save(folder / "directory.json")
        world.keyring.save(folder / "keyring.json")
    (folder / "hatp.toml").write_text(
        f'[server]\nkeyring = "keyring.json"\ndb = "serve.db"\nport = {port}\n\n'
        f'[gateway]\nid = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"\n\n'
        f'[directory]\nissuer = "{DIRECTORY}"\ncards = "directory.json"\n\n'
        f"[web]\n{web}\n",
        encoding="utf-8",
    )
    return folder / "hatp.toml"


def _opened(config: ServeConfig, body: Any) -> Any:
    """Open ``config``'s services and return ``await body(services)``, within :data:`BOUND`."""

    async def go() -> Any:
        async with open_services(config) as services:
            return await body(services)

    return asyncio.run(asyncio.wait_for(go(), BOUND))


def _client(app: Any, address: str, headers: dict[str, str]) -> httpx2.AsyncClient:
    """A client whose requests reach ``app`` from ``address``, as the page's script sends
    them (its ``Origin``), with ``headers``."""
    transport = httpx2.ASGITransport(app=app, client=(address, 41000))
    return httpx2.AsyncClient(
        transport=transport, base_url=INSIDE, headers={"Origin": PAGE, **headers}
    )


async def _sign_in_and_out(
    services: Services, address: str, headers: dict[str, str]
) -> tuple[str, str]:
    """bob registers a passkey from an invitation, signs in and out through the page, his
    requests arriving from ``address`` with ``headers``; the cookie set, and the one
    clearing it."""
    assert services.enrolment is not None
    device = SoftwareAuthenticator("acme.com", f"{BOB}#device", origin=PAGE)
    token = services.enrolment.invite(BOB)
    app = services.app()
    async with app.router.lifespan_context(app), _client(app, address, headers) as http:
        begun = await http.post("/approve/api/enrol/options", json={"invite": token})
        assert begun.status_code == 200, begun.text
        challenge = b64url_decode(begun.json()["options"]["challenge"])
        credential = device.register(challenge)
        done = await http.post(
            "/approve/api/enrol", json={"invite": token, "credential": credential}
        )
        assert done.status_code == 200, done.text
        options = await http.post("/approve/api/sign-in/options", json={})
        assert options.status_code == 200, options.text
        assertion = device.assertion(b64url_decode(options.json()["challenge"]))
        signed = await http.post("/approve/api/sign-in", json={"credential": assertion})
        assert signed.status_code == 200, signed.text
        out = await http.post("/approve/api/sign-out", json={})
        assert out.status_code == 200, out.text
        return signed.headers["set-cookie"], out.headers["set-cookie"]


def _secure(cookie: str) -> bool:
    return "secure" in [part.strip().lower() for part in cookie.split(";")]


async def _redirected(services: Services, address: str, headers: dict[str, str]) -> str:
    """Where ``GET /openapi.json/`` is sent: Starlette names the scheme the request had."""
    app = services.app()
    async with _client(app, address, headers) as http:
        return str((await http.get("/openapi.json/")).headers["location"])


# -- reading the settings ------------------------------------------------------------------


def test_proxy_settings_are_read_and_default_to_none(tmp_path: Path) -> None:
    """[SERVE-CONFIG] web.trusted_proxies (addresses and networks, IPv4 and IPv6) and
    web.https are read as written; without them nobody's forwarded headers count and the
    page is https only when a request is."""
    web = load_config(
        _setup(
            tmp_path,
            ACME_PAGE + '\ntrusted_proxies = ["10.0.0.7", "10.1.0.0/16", "fd00::/8"]\nhttps = true',
        )
    ).web
    assert web is not None
    assert (web.trusted_proxies, web.https) == (("10.0.0.7", "10.1.0.0/16", "fd00::/8"), True)
    plain = load_config(_setup(tmp_path / "plain", ACME_PAGE)).web
    assert plain is not None and (plain.trusted_proxies, plain.https) == ((), False)


@pytest.mark.parametrize(
    ("web", "key"),
    [
        (ACME_PAGE + '\ntrusted_proxies = ["proxy.acme.com"]', "web.trusted_proxies"),
        (ACME_PAGE + '\ntrusted_proxies = ["10.0.0.7", "*"]', "web.trusted_proxies"),
        (ACME_PAGE + '\ntrusted_proxies = ["10.0.0.7/8"]', "web.trusted_proxies"),
        (ACME_PAGE + '\ntrusted_proxies = ["10.0.0.0/33"]', "web.trusted_proxies"),
        (ACME_PAGE + '\ntrusted_proxies = ["10.0.0.7:443"]', "web.trusted_proxies"),
        (ACME_PAGE + '\ntrusted_proxies = [""]', "web.trusted_proxies"),
        (ACME_PAGE + '\ntrusted_proxies = "10.0.0.7"', "web.trusted_proxies"),
        (ACME_PAGE + "\ntrusted_proxies = [10]", "web.trusted_proxies.0"),
        (ACME_PAGE + '\nhttps = "yes"', "web.https"),
        (ACME_PAGE + "\nhttps = 1", "web.https"),
        ('rp_id = "localhost"\nhttps = true', "web.https"),
        ('rp_id = "localhost"\norigins = ["http://localhost:8123"]\nhttps = true', "web.https"),
    ],
)
def test_bad_proxy_settings_are_refused_naming_the_key(tmp_path: Path, web: str, key: str) -> None:
    """[WEB-PROXY] [SERVE-CONFIG] a trusted proxy that is not an IP address or CIDR
    network (a host name, ``*``, host bits under the mask, a port), a list that is not a
    list of strings, an https that is not a boolean, or https with the page's origins
    http: CONFIG_INVALID, ``data.key`` the setting, the message naming it."""
    with pytest.raises(ConfigInvalid) as refused:
        load_config(_setup(tmp_path, web))
    assert refused.value.data["key"] == key
    assert key in refused.value.message


# -- the session cookie ----------------------------------------------------------------------


def test_https_forwarded_by_a_trusted_proxy_gets_a_secure_cookie(tmp_path: Path) -> None:
    """[WEB-PROXY] [WEB-SIGN-IN] the proxy at a trusted address says the browser came over
    https: the session cookie is Secure, and so is the one that clears it at sign-out."""
    config = load_config(_setup(tmp_path, ACME_PAGE + '\ntrusted_proxies = ["10.0.0.0/8"]'))
    cookie, cleared = _opened(config, lambda s: _sign_in_and_out(s, PROXY, FORWARDED))
    assert cookie.startswith("hatp_session=")
    assert _secure(cookie) and _secure(cleared)
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()


@pytest.mark.parametrize(
    ("trusted", "address"),
    [
        ('["10.0.0.0/8"]', STRANGER),
        ("[]", "127.0.0.1"),
        ('["10.0.0.7"]', "10.0.0.8"),
    ],
)
def test_forwarded_headers_from_an_untrusted_address_are_ignored(
    tmp_path: Path, trusted: str, address: str
) -> None:
    """[WEB-PROXY] X-Forwarded-Proto and X-Forwarded-For from an address the settings do not
    trust (loopback included, when none is set): the request stays http, so the cookie is
    not Secure and the server's own redirects name http."""
    config = load_config(_setup(tmp_path, ACME_PAGE + f"\ntrusted_proxies = {trusted}"))

    async def body(services: Services) -> tuple[tuple[str, str], str]:
        cookies = await _sign_in_and_out(services, address, FORWARDED)
        return cookies, await _redirected(services, address, FORWARDED)

    (cookie, cleared), location = _opened(config, body)
    assert not _secure(cookie) and not _secure(cleared)
    assert location == f"{INSIDE}/openapi.json"


def test_a_trusted_proxy_names_the_scheme_of_the_servers_own_redirects(tmp_path: Path) -> None:
    """[WEB-PROXY] the request's scheme is the trusted proxy's X-Forwarded-Proto for the
    whole app, not only for the cookie; without the header it stays http."""
    config = load_config(_setup(tmp_path, ACME_PAGE + '\ntrusted_proxies = ["10.0.0.0/8"]'))

    async def body(services: Services) -> tuple[str, str]:
        return (
            await _redirected(services, PROXY, FORWARDED),
            await _redirected(services, PROXY, {}),
        )

    forwarded, plain = _opened(config, body)
    assert forwarded == "https://hatp.internal:8123/openapi.json"
    assert plain == f"{INSIDE}/openapi.json"


def test_with_https_set_the_cookie_is_always_secure(tmp_path: Path) -> None:
    """[WEB-PROXY] web.https: the deployment is https whatever a request says, so a plain
    http request with no forwarded headers, from anyone, gets a Secure cookie."""
    config = load_config(_setup(tmp_path, ACME_PAGE + "\nhttps = true"))
    cookie, cleared = _opened(config, lambda s: _sign_in_and_out(s, STRANGER, {}))
    assert _secure(cookie) and _secure(cleared)


def test_over_plain_http_with_no_proxy_settings_the_cookie_is_not_secure(tmp_path: Path) -> None:
    """[WEB-SIGN-IN] neither setting, a plain http request: the cookie is not Secure (a
    browser on http://localhost would not keep it otherwise)."""
    config = load_config(_setup(tmp_path, ACME_PAGE))
    cookie, _ = _opened(config, lambda s: _sign_in_and_out(s, "127.0.0.1", {}))
    assert cookie.startswith("hatp_session=") and not _secure(cookie)


# -- the origin check behind the proxy ---------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "status"),
    [(PAGE, 200), (INSIDE, 403), ("https://hatp.internal:8123", 403), (None, 403)],
)
def test_the_origin_check_holds_behind_a_trusted_proxy(
    tmp_path: Path, origin: str | None, status: int
) -> None:
    """[WEB-PROXY] [WEB-ORIGIN] behind the proxy, a POST of the page passes only with the
    page's public origin, as the browser names it; the address the proxy reaches the
    server on (http or, as forwarded, https) or no Origin at all is 403 ORIGIN_REFUSED."""
    config = load_config(_setup(tmp_path, ACME_PAGE + '\ntrusted_proxies = ["10.0.0.0/8"]'))

    async def body(services: Services) -> httpx2.Response:
        app = services.app()
        async with _client(app, PROXY, FORWARDED) as http:
            if origin is None:
                del http.headers["Origin"]
            else:
                http.headers["Origin"] = origin
            return await http.post("/approve/api/sign-in/options", json={})

    answer = _opened(config, body)
    assert answer.status_code == status, answer.text
    if status == 403:
        assert answer.json()["code"] == "ORIGIN_REFUSED"
        assert answer.json()["data"]["origin"] == origin


# -- hatp serve itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(("trusted", "scheme"), [("[]", "http"), ('["127.0.0.1"]', "https")])
def test_hatp_serve_trusts_forwarded_headers_only_from_the_settings(
    tmp_path: Path, trusted: str, scheme: str
) -> None:
    """[WEB-PROXY] [SERVE-CLI] uvicorn's own proxy headers are off (it would trust
    127.0.0.1 by default): a real ``hatp serve`` believes X-Forwarded-Proto from loopback
    only when web.trusted_proxies names it."""
    path = _setup(tmp_path, ACME_PAGE + f"\ntrusted_proxies = {trusted}", port=0)

    async def go() -> tuple[str, int, bytes]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SERVE, "serve", "--config", str(path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            url = (await asyncio.wait_for(process.stdout.readline(), BOUND)).decode().strip()
            assert url.startswith("http://127.0.0.1:"), url
            async with httpx2.AsyncClient(base_url=url) as http:
                moved = await asyncio.wait_for(http.get("/openapi.json/", headers=FORWARDED), BOUND)
            location = moved.headers["location"]
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), BOUND)
        return location, await process.wait(), stderr

    location, code, stderr = asyncio.run(go())
    assert code == 0, stderr.decode()
    assert location.startswith(f"{scheme}://127.0.0.1:"), location
