"""``hatp serve``'s push channels: ``[gateway.webhook]``, ``[gateway.email]`` and
``[gateway.outbox]`` read, refused when wrong, and served: a served gateway tells the
finance approver by webhook (a real receiver on 127.0.0.1) and, when that is refused, by
e-mail (a real mail server), through its outbox."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from gateway.servers import Receiver, bound_socket, mail_server, serving
from hatp.clock import SystemClock
from hatp.demo import COORDINATOR, GATEWAY, TripWorld, trip_plan
from hatp.demo._people import DIRECTORY
from hatp.demo.scenarios import APPROVER
from hatp.errors import ConfigInvalid
from hatp.evidence import Keyring, digest
from hatp.gateway import verify_webhook
from hatp.http import load_config, open_services
from hatp.model import parse_plan
from hatp.store import OutboxState

BOUND = 30.0
BOB_MAIL = "bob@acme.example"


def _setup(folder: Path, **sections: str | None) -> Path:
    """acme's deployment in ``folder``, every card on webhook then e-mail, and a settings
    file; ``sections`` add or replace whole tables by name (``None`` drops one)."""
    with TripWorld.open(folder / "world", SystemClock(), channels=("webhook", "email")) as world:
        world.directory.save(folder / "directory.json")
        world.keyring.save(folder / "keyring.json")
    tables: dict[str, str | None] = {
        "server": 'keyring = "keyring.json"\ndb = "serve.db"\nport = 8123',
        "gateway": f'id = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"',
        "gateway.outbox": "first_retry_seconds = 0.2\nmax_retry_seconds = 1",
        "directory": f'issuer = "{DIRECTORY}"\ncards = "directory.json"',
        "coordinator": f'id = "{COORDINATOR}"\nkey = "world/keys/coordinator.jwk"',
        **sections,
    }
    text = "".join(f"[{name}]\n{body}\n\n" for name, body in tables.items() if body is not None)
    (folder / "hatp.toml").write_text(text, encoding="utf-8")
    return folder / "hatp.toml"


def _webhook(url: str = "http://127.0.0.1:9/hook") -> str:
    return f'urls = {{ "{APPROVER}" = "{url}" }}\ntimeout_seconds = 5'


def _email(port: int = 25, **extra: str) -> str:
    lines = [
        'host = "127.0.0.1"',
        f"port = {port}",
        'sender = "approvals@acme.example"',
        "starttls = false",
        f'addresses = {{ "{APPROVER}" = "{BOB_MAIL}" }}',
        *(f"{key} = {value}" for key, value in extra.items()),
    ]
    return "\n".join(lines)


def test_push_settings_are_read_SERVE_CONFIG(tmp_path: Path) -> None:
    """[SERVE-CONFIG] the webhook URLs, the mail server and addresses, and the retry policy
    reach the gateway's settings."""
    config = load_config(
        _setup(tmp_path, **{"gateway.webhook": _webhook(), "gateway.email": _email(2525)})
    )
    settings = config.gateway
    assert settings is not None and settings.webhook is not None and settings.email is not None
    assert settings.webhook.urls == {APPROVER: "http://127.0.0.1:9/hook"}
    assert (settings.email.smtp.port, settings.email.smtp.starttls) == (2525, False)
    assert settings.email.addresses == {APPROVER: BOB_MAIL}
    assert (settings.send_policy.first_retry_seconds, settings.send_policy.attempts) == (0.2, 5)


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"gateway.webhook": _webhook("ftp://chat.acme.example/bob")}, "gateway.webhook.urls"),
        ({"gateway.webhook": "urls = {}"}, "gateway.webhook.urls"),
        ({"gateway.email": _email(70000)}, "gateway.email.port"),
        ({"gateway.email": _email(25).replace(BOB_MAIL, "bob at acme")},
         "gateway.email.addresses"),
        ({"gateway.email": _email(25, username='"approvals"')}, "gateway.email"),
        ({"gateway.email": _email(25, password="\"secret\"")}, "gateway.email.password"),
        ({"gateway.outbox": "attempts = 0"}, "gateway.outbox.attempts"),
        ({"gateway.outbox": "first_retry_seconds = 10\nmax_retry_seconds = 5"},
         "gateway.outbox"),
    ],
)  # fmt: skip
def test_a_bad_push_setting_is_refused_naming_its_key_SERVE_CONFIG(
    tmp_path: Path, sections: dict[str, str], key: str
) -> None:
    """[SERVE-CONFIG] a URL that is not http(s), no URL, a port out of range, an address
    that is none, a username without the password's variable, a password in the file,
    retries that cannot work: CONFIG_INVALID naming the setting."""
    with pytest.raises(ConfigInvalid) as refused:
        load_config(_setup(tmp_path, **sections))
    assert refused.value.data["key"] == key


@pytest.mark.parametrize(
    ("extra", "environ", "said"),
    [
        ({"username": '"approvals"', "password_env": '"HATP_TEST_SMTP"'}, {}, "is not set"),
        (
            {"username": '"approvals"', "password_env": '"HATP_TEST_SMTP"'},
            {"HATP_TEST_SMTP": "secret"},
            "password",
        ),
    ],
)
def test_an_smtp_login_that_cannot_be_used_is_refused_at_start_SERVE_CONFIG(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, str],
    environ: dict[str, str],
    said: str,
) -> None:
    """[SERVE-CONFIG] the password's variable unset, or a password to be sent in clear (no
    STARTTLS, no TLS): CONFIG_INVALID at start, nothing served, the password never shown."""
    monkeypatch.delenv("HATP_TEST_SMTP", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config = load_config(_setup(tmp_path, **{"gateway.email": _email(25, **extra)}))

    async def go() -> None:
        async with open_services(config):
            pass

    with pytest.raises(ConfigInvalid) as refused:
        asyncio.run(go())
    assert refused.value.data["key"].startswith("gateway.email")
    assert said in refused.value.message and "secret" not in refused.value.message


def test_a_served_gateway_tells_the_approver_by_webhook_then_mail_OUTBOX(tmp_path: Path) -> None:
    """[OUTBOX] [GW-CHANNEL-NEXT] an ask posted to the served gateway: bob's webhook is
    signed by the gateway and verifies, his receiver answers 410, and the mail server gets
    the e-mail; the outbox holds both, and the ask lists him asked over e-mail."""
    receiver = Receiver(answers=[410])
    sock = bound_socket()
    receiver.port = sock.getsockname()[1]

    async def go(port: int) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
        sections = {"gateway.webhook": _webhook(receiver.url()), "gateway.email": _email(port)}
        config = load_config(_setup(tmp_path, **sections))
        async with serving(receiver, sock), open_services(config) as services:
            gateway = services.gateway
            assert gateway is not None
            transport = httpx2.ASGITransport(app=services.app())
            async with httpx2.AsyncClient(transport=transport, base_url="http://t") as http:
                answer = await http.post("/gateway/asks", json=_ask_body())
                assert answer.status_code == 200, answer.text
            ask_id = answer.json()["answer"]["askId"]
            outbox = gateway.outbox.outbox
            while True:
                rows = outbox.for_ask(ask_id)
                if len(rows) == 2 and all(r.state is not OutboxState.PENDING for r in rows):
                    break
                await asyncio.sleep(0.05)
            ask = gateway.asks.get(ask_id)
            (bob,) = [p for p in ask.doc["people"] if p["id"] == APPROVER]
            keyring = Keyring.load(tmp_path / "keyring.json")
            now = gateway.clock.now()
            hooks = [verify_webhook(g.body, g.headers, keyring, now=now) for g in receiver.got]
            return hooks, [(r.channel, r.state) for r in rows], bob

    with mail_server() as (keeper, port):
        try:
            hooks, rows, bob = asyncio.run(asyncio.wait_for(go(port), BOUND))
        finally:
            sock.close()
        mails = keeper.mails()
    assert [(h["event"], h["human"]) for h in hooks] == [("ask", APPROVER)]
    assert sorted(rows) == [("email", OutboxState.DELIVERED), ("webhook", OutboxState.FAILED)]
    assert (bob["channel"], bob["failedChannels"]) == ("email", ["webhook"])
    assert [m["To"] for m in mails] == [BOB_MAIL]


def _ask_body() -> dict[str, Any]:
    now = SystemClock().now()
    plan = trip_plan("trip-push-1", decide_by=now + timedelta(minutes=15))
    return {
        "txnId": "trip-push-1",
        "plan": plan,
        "planDigest": digest(parse_plan(plan).to_wire()),
        "groupId": "finance",
        "decideBy": plan["deadlines"]["decideBy"],
    }


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"gateway.webhook": _webhook("http://")}, "gateway.webhook.urls"),
        ({"gateway.email": _email(25).replace(BOB_MAIL, "bob@")}, "gateway.email.addresses"),
    ],
)
def test_contact_details_a_channel_cannot_use_are_refused_at_start_SERVE_CONFIG(
    tmp_path: Path, sections: dict[str, str], key: str
) -> None:
    """[SERVE-CONFIG] a webhook URL with no host, an address with no domain: CONFIG_INVALID
    naming the setting when the channel is made, nothing served."""
    config = load_config(_setup(tmp_path, **sections))

    async def go() -> None:
        async with open_services(config):
            pass

    with pytest.raises(ConfigInvalid) as refused:
        asyncio.run(go())
    assert refused.value.data["key"] == key
