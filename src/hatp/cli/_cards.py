"""``hatp cards``: sign the Human Cards of a ``people.toml`` again, list them, show one."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hatp.cli._app import HatpCommand, HatpGroup, app, err, escape, reports_errors
from hatp.errors import CardUnknown, ConfigInvalid

if TYPE_CHECKING:
    from hatp.directory import Directory
    from hatp.model import HumanCard

log = logging.getLogger(__name__)

cards_app = typer.Typer(
    help="Sign the Human Cards of a people.toml, list them, show one.",
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=HatpGroup,
)
app.add_typer(cards_app, name="cards")

_CONFIG_HELP = "hatp serve's settings file: its [directory] and server.keyring."
# The options list and show take alike: where the cards are, and what verifies them.
_Config = Annotated[
    Path | None, typer.Option("--config", "-c", help=_CONFIG_HELP, show_default=False)
]
_Cards = Annotated[
    Path | None,
    typer.Option("--cards", help="A directory file (with --keys).", show_default=False),
]
_Keys = Annotated[
    Path | None,
    typer.Option("--keys", help="The keyring its cards verify with.", show_default=False),
]


@dataclass(frozen=True)
class _Build:
    people: Path
    key: Path
    issuer: str
    out: Path


@cards_app.command("build", cls=HatpCommand)
@reports_errors
def build(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="hatp serve's settings file: its [directory] and web.directory_key.",
            show_default=False,
        ),
    ] = None,
    people: Annotated[
        Path | None,
        typer.Option(
            "--people",
            help="The people file.",
            show_default="people.toml beside --config",
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="The directory's private key file.",
            show_default="web.directory_key of --config",
        ),
    ] = None,
    issuer: Annotated[
        str | None,
        typer.Option("--issuer", help="The cards' issuer.", show_default="directory.issuer"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The directory file to write.", show_default="directory.cards"),
    ] = None,
) -> None:
    """Sign every card of a people.toml with the directory's key; write the directory file.

    Passkeys registered on the cards of the file being replaced are kept. Exit 2
    when the people file is inconsistent (the message names its line), or a
    file cannot be used; nothing is written then.
    """
    from hatp.cli._paths import file_to_write
    from hatp.directory import read_people, write_directory
    from hatp.evidence import SigningKey

    chosen = _build_settings(config, people, key, issuer, out)
    file_to_write(chosen.out, "--out")
    read = read_people(chosen.people)
    directory_key = SigningKey.load(chosen.key)
    directory = write_directory(read, chosen.issuer, directory_key, chosen.out)
    err.print(
        f"signed {len(directory)} cards of {escape(chosen.people)} as "
        f"{escape(chosen.issuer)} into {escape(chosen.out)}"
    )
    typer.echo(str(chosen.out))


def _build_settings(
    config: Path | None,
    people: Path | None,
    key: Path | None,
    issuer: str | None,
    out: Path | None,
) -> _Build:
    if config is not None:
        from hatp.http import load_config

        settings = load_config(config)
        cards = settings.directory
        if cards is not None:
            issuer = issuer or cards.issuer
            out = out or cards.cards
        if key is None and settings.web is not None:
            key = settings.web.directory_key
        people = people or config.parent / "people.toml"
    missing = [
        option
        for option, value in (("--people", people), ("--key", key), ("--issuer", issuer))
        if value is None
    ] + (["--out"] if out is None else [])
    if missing or people is None or key is None or issuer is None or out is None:
        log.info("hatp cards build refused: %s not given", ", ".join(missing))
        raise ConfigInvalid(
            f"{', '.join(missing)}: name them, or give --config with [directory] and "
            "web.directory_key",
            key=missing[0].lstrip("-") if missing else None,
        )
    return _Build(people, key, issuer, out)


@cards_app.command("list", cls=HatpCommand)
@reports_errors
def list_cards(
    config: _Config = None,
    cards: _Cards = None,
    keys: _Keys = None,
) -> None:
    """Print one line per card, each verified: id, name, roles, limits, channels,
    delegates, whether a passkey is registered, status (tab-separated)."""
    for card in _directory(config, cards, keys).cards():
        typer.echo(_line(card))


@cards_app.command("show", cls=HatpCommand)
@reports_errors
def show(
    human: Annotated[str, typer.Argument(help="The person's address, e.g. human://acme/bob.")],
    config: _Config = None,
    cards: _Cards = None,
    keys: _Keys = None,
) -> None:
    """Print one card as the directory signed it (JSON), after verifying it.

    Exit 2 (CARD_UNKNOWN) when the directory holds no card for HUMAN.
    """
    directory = _directory(config, cards, keys)
    try:
        signed = directory.signed(human)
    except KeyError:
        log.info("hatp cards show: no card %s", human)
        raise CardUnknown(
            f"the directory holds no card {human}: `hatp cards list` names every card",
            card=human,
        ) from None
    typer.echo(json.dumps(signed, indent=2, ensure_ascii=False))


def _directory(config: Path | None, cards: Path | None, keys: Path | None) -> Directory:
    """The directory a command reads: --config's, or --cards verified with --keys."""
    from hatp.directory import Directory
    from hatp.errors import CardInvalid, KeyringInvalid
    from hatp.evidence import Keyring

    if config is not None and (cards is not None or keys is not None):
        raise ConfigInvalid(
            "--config: give --config, or --cards with --keys, not both", key="config"
        )
    if config is not None:
        from hatp.http import load_config

        settings = load_config(config)
        if settings.directory is None or settings.keyring is None:
            raise _refused(
                "directory", f"--config: {config} has no [directory] with server.keyring"
            )
        cards, keys = settings.directory.cards, settings.keyring
    if cards is None or keys is None:
        raise _refused(
            "cards",
            "--cards: name a directory file and the keyring it verifies with (--cards, --keys), "
            "or --config",
        )
    try:
        keyring = Keyring.load(keys)
    except KeyringInvalid as exc:
        log.info("hatp cards: keyring %s refused: %s", keys, exc.message)
        raise ConfigInvalid(f"--keys: {exc.message}", key="keys") from None
    try:
        return Directory.load(cards, keyring)
    except CardInvalid as exc:
        log.info("hatp cards: directory %s refused: %s", cards, exc.message)
        raise ConfigInvalid(f"--cards: {exc.message}", key="cards") from None


def _refused(key: str, message: str) -> ConfigInvalid:
    log.info("hatp cards refused %s: %s", key, message)
    return ConfigInvalid(message, key=key)


def _line(card: HumanCard) -> str:
    limits = ",".join(
        f"{a.action}<={a.max_amount.value} {a.max_amount.currency}" for a in card.authority
    )
    delegates = ",".join(d.rsplit("/", 1)[-1] for d in card.delegates)
    return "\t".join(
        (
            card.id,
            card.display_name,
            "roles=" + ",".join(card.roles),
            "limits=" + limits,
            "channels=" + ",".join(c.value for c in card.channels),
            "delegates=" + delegates,
            "passkey=" + ("yes" if card.has_passkey else "no"),
            card.availability.status.value,
        )
    )
