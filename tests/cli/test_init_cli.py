"""``hatp init`` and ``hatp cards``: a folder ``hatp serve`` runs as it is, cards signed
again after an edit, listed and shown; every refusal exit 2 with its code."""

from __future__ import annotations

import asyncio
import json
import stat
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.cli._init import WRITES
from hatp.directory import Directory, verify_card
from hatp.evidence import Keyring
from hatp.http import load_config, open_services

runner = CliRunner()
ORG = "acme.example"
DIRECTORY = f"https://directory.{ORG}"


def _init(folder: Path, *extra: str) -> Any:
    return runner.invoke(app, ["init", str(folder), *extra])


@pytest.fixture
def org(tmp_path: Path) -> Path:
    folder = tmp_path / "org"
    done = _init(folder)
    assert done.exit_code == 0, done.output
    return folder


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_init_writes_a_folder_that_hatp_serve_runs_as_it_is(org: Path) -> None:
    """[INIT-SERVES] open_services(load_config(DIR/hatp.toml)) opens every role; the
    well-known names the new directory and gateway; the store in DIR is ready."""
    config = load_config(org / "hatp.toml")
    assert config.served == ("gateway", "directory", "coordinator")
    assert config.db == str(org / "hatp.db")

    async def go() -> list[Any]:
        async with open_services(config) as services:
            served = services.app()
            transport = httpx2.ASGITransport(app=served)
            async with (
                served.router.lifespan_context(served),
                httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http,
            ):
                return [
                    await http.get("/readyz"),
                    (await http.get("/.well-known/human-card.json")).json(),
                    await http.get("/approve"),
                ]

    ready, known, page = asyncio.run(asyncio.wait_for(go(), 30))
    assert ready.status_code == 200, ready.text
    assert (known["directory"], known["gateway"]) == (DIRECTORY, f"https://gateway.{ORG}")
    assert page.status_code == 200
    assert (org / "hatp.db").exists()


def test_init_keys_are_private_and_vouched_for_in_the_keyring(org: Path) -> None:
    """[INIT-KEYS] each private key file is mode 0600 in a 0700 folder; the keyring holds
    each public half under its role's id."""
    assert stat.S_IMODE((org / "keys").stat().st_mode) == 0o700
    for name in ("directory", "gateway", "coordinator"):
        assert stat.S_IMODE((org / "keys" / f"{name}.jwk").stat().st_mode) == 0o600
    keyring = Keyring.load(org / "keyring.json")
    assert keyring.resolve(f"{DIRECTORY}#key-1")[1] == DIRECTORY
    assert keyring.resolve(f"hatp://{ORG}/coordinator#key-1")[1] == f"hatp://{ORG}/coordinator"
    assert sorted(p.name for p in org.iterdir()) == sorted(
        ["keys", "keyring.json", "people.toml", "directory.json", "hatp.toml"]
    )


def test_init_into_a_folder_holding_its_files_is_refused_and_writes_nothing(org: Path) -> None:
    """[INIT-REFUSE] a second init: CONFIG_INVALID naming the files, exit 2, DIR unchanged."""
    before = _contents(org)
    again = _init(org)
    assert again.exit_code == 2
    assert "CONFIG_INVALID" in again.output and "people.toml" in again.output
    assert _contents(org) == before


def test_init_refuses_when_any_one_of_its_files_is_there(tmp_path: Path) -> None:
    """[INIT-REFUSE] one file of the set is enough: nothing else is written beside it."""
    (tmp_path / "people.toml").write_text("mine\n", encoding="utf-8")
    refused = _init(tmp_path)
    assert refused.exit_code == 2, refused.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["people.toml"]


def test_init_with_force_replaces_the_files_with_new_keys(org: Path) -> None:
    """[INIT-REFUSE] --force writes a new set: new keys, and the keyring agrees with them."""
    before = (org / "keys" / "directory.jwk").read_bytes()
    replaced = _init(org, "--force")
    assert replaced.exit_code == 0, replaced.output
    assert (org / "keys" / "directory.jwk").read_bytes() != before
    keyring = Keyring.load(org / "keyring.json")
    assert len(Directory.load(org / "directory.json", keyring)) == 3


@pytest.mark.parametrize("bad", ["Acme.Example", "acme example", "acme.example:80"])
def test_init_refuses_an_org_that_is_no_dns_name(tmp_path: Path, bad: str) -> None:
    refused = _init(tmp_path / "org", "--org", bad)
    assert refused.exit_code == 2
    assert "CONFIG_INVALID" in refused.output and "--org" in refused.output
    assert not (tmp_path / "org" / "hatp.toml").exists()


def test_init_refuses_a_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    refused = _init(tmp_path / "file")
    assert refused.exit_code == 2
    assert "CONFIG_INVALID" in refused.output and "is a file" in refused.output


def test_cards_build_after_an_edit_signs_the_new_card(org: Path) -> None:
    """[PEOPLE-BUILD] a raised limit is on the card the directory signs again, and the card
    verifies with the keyring init wrote."""
    people = org / "people.toml"
    text = people.read_text(encoding="utf-8")
    people.write_text(text.replace('USD = "2000"', 'USD = "3500.50"'), encoding="utf-8")
    built = runner.invoke(app, ["cards", "build", "--config", str(org / "hatp.toml")])
    assert built.exit_code == 0, built.output
    assert built.stdout.strip() == str(org / "directory.json")
    keyring = Keyring.load(org / "keyring.json")
    doc = json.loads((org / "directory.json").read_text(encoding="utf-8"))
    bob = next(c for c in doc["cards"] if c["id"] == f"human://{ORG}/bob")
    card = verify_card(bob, keyring)
    assert card.limits("approve.spend") == {"USD": Decimal("3500.50")}


def test_cards_build_takes_every_file_from_options(org: Path, tmp_path: Path) -> None:
    """[PEOPLE-BUILD] --people, --key, --issuer and --out without a settings file."""
    out = tmp_path / "cards.json"
    built = runner.invoke(
        app,
        [
            "cards", "build", "--people", str(org / "people.toml"),
            "--key", str(org / "keys" / "directory.jwk"), "--issuer", DIRECTORY,
            "--out", str(out),
        ],
    )  # fmt: skip
    assert built.exit_code == 0, built.output
    assert len(Directory.load(out, Keyring.load(org / "keyring.json"))) == 3


def test_cards_build_names_the_line_of_a_bad_people_file(org: Path) -> None:
    """[PEOPLE-LINE] an unknown role: exit 2, the file and line in the message; the
    directory file is not touched."""
    people = org / "people.toml"
    before = (org / "directory.json").read_bytes()
    text = people.read_text(encoding="utf-8").replace(
        'roles = ["security-lead"]', 'roles = ["security-lead", "auditor"]'
    )
    people.write_text(text, encoding="utf-8")
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "auditor" in row)
    refused = runner.invoke(app, ["cards", "build", "--config", str(org / "hatp.toml")])
    assert refused.exit_code == 2
    assert f"people.toml:{line}:" in refused.output
    assert "auditor" in refused.output
    assert (org / "directory.json").read_bytes() == before


def test_cards_build_refuses_a_directory_file_another_key_signed(org: Path, tmp_path: Path) -> None:
    """[PEOPLE-BUILD] replacing a file whose cards this key cannot vouch for would drop its
    passkeys: refused, the file kept."""
    other = tmp_path / "other"
    assert _init(other).exit_code == 0
    before = (org / "directory.json").read_bytes()
    refused = runner.invoke(
        app,
        [
            "cards", "build", "--config", str(org / "hatp.toml"),
            "--key", str(other / "keys" / "directory.jwk"),
        ],
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "CONFIG_INVALID" in refused.output and "move the file away" in refused.output
    assert (org / "directory.json").read_bytes() == before


def test_cards_build_without_its_settings_names_what_is_missing(tmp_path: Path) -> None:
    refused = runner.invoke(app, ["cards", "build", "--people", str(tmp_path / "p.toml")])
    assert refused.exit_code == 2
    assert "--key" in refused.output and "--issuer" in refused.output and "--out" in refused.output


def test_cards_list_prints_one_line_per_card(org: Path) -> None:
    """[PEOPLE-LIST] one tab-separated line per card, by id."""
    listed = runner.invoke(app, ["cards", "list", "--config", str(org / "hatp.toml")])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        f"human://{ORG}/alice",
        f"human://{ORG}/bob",
        f"human://{ORG}/carol",
    ]
    assert lines[1].split("\t") == [
        f"human://{ORG}/bob",
        "Bob Chen",
        "roles=finance-approver",
        "limits=approve.spend<=2000 USD",
        "channels=web",
        "delegates=alice",
        "passkey=no",
        "busy",
    ]
    by_file = runner.invoke(
        app,
        ["cards", "list", "--cards", str(org / "directory.json"),
         "--keys", str(org / "keyring.json")],
    )  # fmt: skip
    assert by_file.stdout == listed.stdout


def test_cards_show_prints_the_signed_card(org: Path) -> None:
    """[PEOPLE-LIST] the card as signed: it verifies with the keyring."""
    human = f"human://{ORG}/alice"
    shown = runner.invoke(app, ["cards", "show", human, "--config", str(org / "hatp.toml")])
    assert shown.exit_code == 0, shown.output
    card = verify_card(json.loads(shown.stdout), Keyring.load(org / "keyring.json"))
    assert (card.id, card.delegates) == (human, [f"human://{ORG}/bob"])


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["cards", "show", "human://acme.example/zed"], "CARD_UNKNOWN", "no card"),
        (["cards", "list", "--keys", "keyring.json"], "CONFIG_INVALID", "--cards"),
        (["cards", "list", "--config", "hatp.toml", "--cards", "directory.json"],
         "CONFIG_INVALID", "not both"),
        (["cards", "list", "--cards", "directory.json", "--keys", "people.toml"],
         "CONFIG_INVALID", "--keys"),
        (["cards", "list", "--cards", "people.toml", "--keys", "keyring.json"],
         "CONFIG_INVALID", "--cards"),
    ],
)  # fmt: skip
def test_cards_list_and_show_refusals_exit_2(
    org: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], code: str, says: str
) -> None:
    monkeypatch.chdir(org)
    extra = ["--config", "hatp.toml"] if argv[1] == "show" else []
    refused = runner.invoke(app, [*argv, *extra])
    assert refused.exit_code == 2, refused.output
    assert code in refused.output and says in refused.output


def test_init_writes_what_it_lists(org: Path) -> None:
    assert all((org / name).is_file() for name in WRITES)
