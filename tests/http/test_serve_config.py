"""``hatp serve``'s settings: the TOML file, flags over it, the roles they open, and the
command line's answers to bad settings (a message naming the key, exit 2)."""

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
from hatp.demo import COORDINATOR, GATEWAY, TripWorld, trip_plan
from hatp.demo._people import DIRECTORY
from hatp.errors import ConfigInvalid
from hatp.evidence import Keyring, SigningKey, digest
from hatp.http import ROLES, ServeConfig, load_config, open_services, parse_only
from hatp.model import parse_plan

runner = CliRunner()


def _setup(folder: Path, **sections: str) -> Path:
    """A deployment in ``folder``: acme's keys, directory file and keyring, and a settings
    file; ``sections`` replace or add whole tables, by name."""
    with TripWorld.open(folder / "world", SystemClock()) as world:
        world.directory.save(folder / "directory.json")
        world.keyring.save(folder / "keyring.json")
    tables = {
        "server": 'keyring = "keyring.json"\ndb = "serve.db"\nport = 8123',
        "gateway": f'id = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"',
        "directory": f'issuer = "{DIRECTORY}"\ncards = "directory.json"',
        "coordinator": f'id = "{COORDINATOR}"\nkey = "world/keys/coordinator.jwk"',
        **sections,
    }
    text = "".join(f"[{name}]\n{body}\n\n" for name, body in tables.items() if body is not None)
    (folder / "hatp.toml").write_text(text, encoding="utf-8")
    return folder / "hatp.toml"


def test_a_good_file_is_read_with_paths_relative_to_it(tmp_path: Path) -> None:
    """[SERVE-CONFIG] every table read; relative paths from the file's folder; every role
    configured is served."""
    config = load_config(_setup(tmp_path))
    assert (config.host, config.port, config.db) == ("127.0.0.1", 8123, str(tmp_path / "serve.db"))
    assert config.keyring == tmp_path / "keyring.json"
    assert config.gateway is not None and config.gateway.key == tmp_path / "world/keys/gateway.jwk"
    assert config.directory is not None and config.directory.issuer == DIRECTORY
    assert config.coordinator is not None and config.coordinator.participants == {}
    assert config.served == ROLES
    assert config.gateway.recheck_seconds == 2.0  # [GW-RECHECK] several processes may serve


def test_the_gateway_a_file_opens_rechecks_its_long_polls_as_set(tmp_path: Path) -> None:
    """[SERVE-CONFIG] [GW-RECHECK] gateway.recheck_seconds reaches the gateway served."""
    gateway = f'id = "{GATEWAY}"\nkey = "world/keys/gateway.jwk"\nrecheck_seconds = 0.5'
    config = load_config(_setup(tmp_path, gateway=gateway))

    async def go() -> Any:
        async with open_services(config) as services:
            assert services.gateway is not None
            return services.gateway.recheck_seconds

    assert asyncio.run(asyncio.wait_for(go(), 30)) == 0.5


def test_flags_override_the_file(tmp_path: Path) -> None:
    """[SERVE-CONFIG] --db, --host, --port and --only win over the file."""
    config = load_config(_setup(tmp_path)).with_flags(
        db="postgresql://h/db", host="0.0.0.0", port=9000, only=parse_only("directory, gateway")
    )
    assert (config.db, config.host, config.port) == ("postgresql://h/db", "0.0.0.0", 9000)
    assert config.served == ("gateway", "directory")


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"server": 'keyring = "keyring.json"\nprt = 80'}, "server.prt"),
        ({"server": 'keyring = "keyring.json"\nport = "eighty"'}, "server.port"),
        ({"server": 'keyring = "keyring.json"\nport = 70000'}, "server.port"),
        ({"server": 'keyring = "keyring.json"\nonly = ["approvals"]'}, "server.only.0"),
        ({"gatway": 'id = "x"'}, "gatway"),
        ({"gateway": 'key = "k.jwk"'}, "gateway.id"),
        ({"server": 'keyring = "keyring.json"\nonly = ["coordinator"]', "coordinator": None},
         "coordinator"),
        ({"server": 'db = "x.db"'}, "server.keyring"),
        ({"directory": None}, "directory"),
        ({"coordinator": 'id = "c"\nkey = "k"\nparticipants = { "p" = "ftp://x" }'},
         "coordinator.participants.p"),
        ({"gateway": f'id = "{GATEWAY}"\nkey = "k.jwk"\nrecheck_seconds = 0'},
         "gateway.recheck_seconds"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_refused_naming_its_key(
    tmp_path: Path, sections: dict[str, Any], key: str
) -> None:
    """[SERVE-CONFIG] an unknown key, a wrong type or value, or a role without its table:
    CONFIG_INVALID, ``data.key`` the setting, the message naming it."""
    with pytest.raises(ConfigInvalid) as refused:
        load_config(_setup(tmp_path, **sections))
    assert refused.value.data["key"] == key
    assert key.split(".")[0] in refused.value.message


def test_a_file_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hatp.toml"
    path.write_text("[server\nport = 1\n", encoding="utf-8")
    with pytest.raises(ConfigInvalid, match="not TOML"):
        load_config(path)
    with pytest.raises(ConfigInvalid, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigInvalid) as refused:
        parse_only("gateway,approvals")
    assert refused.value.data["key"] == "only"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("gateway_key", "gateway.key"),
        ("issuer", "directory.issuer"),
        ("keyring", "server.keyring"),
    ],
)
def test_files_that_cannot_be_used_are_refused_at_start(
    tmp_path: Path, change: str, key: str
) -> None:
    """[SERVE-CONFIG] a key file that is no key, cards of another issuer, a keyring that does
    not vouch for the gateway: CONFIG_INVALID naming the setting, nothing served."""
    sections = {}
    if change == "gateway_key":
        sections["gateway"] = f'id = "{GATEWAY}"\nkey = "directory.json"'
    if change == "issuer":
        sections["directory"] = 'issuer = "https://other.example"\ncards = "directory.json"'
    config = load_config(_setup(tmp_path, **sections))
    if change == "keyring":
        Keyring([(SigningKey.generate("x#1").public, "x")], ["x"]).save(tmp_path / "keyring.json")
        with TripWorld.open(tmp_path / "world", SystemClock()) as world:
            only_directory = Keyring(
                [(world.keyring.resolve(f"{DIRECTORY}#key-1")[0], DIRECTORY)], [DIRECTORY]
            )
        only_directory.save(tmp_path / "keyring.json")

    async def go() -> None:
        async with open_services(config):
            pass

    with pytest.raises(ConfigInvalid) as refused:
        asyncio.run(go())
    assert refused.value.data["key"] == key


def test_the_services_a_file_opens_answer_over_http(tmp_path: Path) -> None:
    """[SERVE-CONFIG] the roles the file names, opened and served; an ask is routed and its
    pending vote signed though no channel reaches anyone yet."""
    config = load_config(_setup(tmp_path))

    async def go() -> list[Any]:
        async with open_services(config) as services:
            app = services.app()
            transport = httpx2.ASGITransport(app=app)
            async with (
                app.router.lifespan_context(app),
                httpx2.AsyncClient(transport=transport, base_url="http://hatp.test") as http,
            ):
                return [
                    (await http.get("/")).json(),
                    (await http.get("/.well-known/human-card.json")).json(),
                    await http.get("/coordinator/txns/none"),
                    await http.post("/gateway/asks", json=_ask_body()),
                ]

    index, document, unknown, asked = asyncio.run(asyncio.wait_for(go(), 30))
    assert asked.status_code == 200, asked.text
    assert asked.json()["answer"]["kind"] == "pending"
    assert index["serves"] == ["gateway", "directory", "coordinator"]
    assert (document["directory"], document["gateway"]) == (DIRECTORY, GATEWAY)
    assert unknown.status_code == 404


def test_the_command_line_says_what_is_wrong_and_exits_2(tmp_path: Path) -> None:
    """[SERVE-CLI] a bad setting, no settings at all, or a bad --only: the code, the key, exit 2."""
    bad = _setup(tmp_path, server='keyring = "keyring.json"\nprt = 80')
    results = [
        runner.invoke(cli, ["serve", "--config", str(bad)]),
        runner.invoke(cli, ["serve"]),
        runner.invoke(cli, ["serve", "--demo", "--only", "approvals"]),
    ]
    for result in results:
        assert result.exit_code == 2, result.output
        assert "CONFIG_INVALID" in result.output
    assert "server.prt" in results[0].output
    assert "--demo" in results[1].output
    assert "approvals" in results[2].output


def test_the_help_names_every_setting_a_newcomer_needs() -> None:
    """[SERVE-CLI] ``hatp serve --help`` names the flags, the tables and the demo."""
    result = runner.invoke(cli, ["serve", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for needle in (
        "--config",
        "--db",
        "--host",
        "--port",
        "--only",
        "--demo",
        "[gateway]",
        "postgresql://",
        "/openapi.json",
        "hatp serve --demo",
    ):
        assert needle in text, needle


def test_the_settings_default_to_loopback_and_sqlite() -> None:
    config = ServeConfig()
    assert (config.host, config.port, config.db) == ("127.0.0.1", 8000, "hatp.db")


def _ask_body() -> dict[str, Any]:
    now = SystemClock().now()
    plan = trip_plan("trip-config-1", decide_by=now + timedelta(minutes=15))
    return {
        "txnId": "trip-config-1",
        "plan": plan,
        "planDigest": digest(parse_plan(plan).to_wire()),
        "groupId": "finance",
        "decideBy": plan["deadlines"]["decideBy"],
    }
