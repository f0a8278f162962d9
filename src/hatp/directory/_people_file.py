"""``people.toml``: an organisation's people, written by hand, turned into signed Human Cards.

:func:`parse_people` reads the file and checks it whole (every refusal is
``CONFIG_INVALID`` naming the key, ``data.line`` the line at fault);
:func:`build_directory` turns it into a :class:`Directory` of cards signed by
the directory's key, keeping the passkeys people registered on the cards of
the directory it replaces; :func:`write_directory` does so to a directory file
(docs/spec.md §17, "people.toml").
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

from hatp.directory._cards import sign_card
from hatp.directory._directory import Directory, _File, _locked
from hatp.errors import AddressInvalid, CardInvalid, ConfigInvalid
from hatp.evidence import Keyring, SigningKey
from hatp.model import Channel, Status, parse_address
from hatp.version import PROTOCOL_VERSION

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_ACTION_RE = re.compile(r"[A-Za-z][A-Za-z0-9._/-]{0,127}")
_CURRENCY_RE = re.compile(r"[A-Z]{3}")
_DECIMAL_RE = re.compile(r"(0|[1-9][0-9]{0,17})(\.[0-9]{1,18})?")
_TOP = frozenset({"org", "timezone", "roles", "people"})
_PERSON = frozenset(
    {
        "name",
        "roles",
        "limits",
        "delegates",
        "channels",
        "passkey",
        "timezone",
        "status",
        "decide_seconds",
        "max_open",
    }
)


@dataclass(frozen=True)
class Person:
    """One person of ``people.toml``, checked: ``limits`` is action → currency → amount."""

    name: str
    display_name: str
    roles: tuple[str, ...]
    limits: Mapping[str, Mapping[str, Decimal]]
    delegates: tuple[str, ...]
    channels: tuple[Channel, ...]
    passkey: bool
    timezone: str
    status: Status
    decide_seconds: int
    max_open: int


@dataclass(frozen=True)
class People:
    """An organisation's people as ``people.toml`` states them, checked whole."""

    org: str
    roles: Mapping[str, str]
    people: tuple[Person, ...]

    def address(self, name: str) -> str:
        """The person address of ``name`` in this organisation."""
        return f"human://{self.org}/{name}"

    def card_bodies(self, issuer: str) -> list[dict[str, Any]]:
        """Every person's unsigned Human Card, issued by ``issuer``, in file order
        (no keys: passkeys are registered onto cards, see :func:`build_directory`)."""
        return [self._body(person, issuer) for person in self.people]

    def _body(self, person: Person, issuer: str) -> dict[str, Any]:
        authority = [
            {"action": action, "maxAmount": {"value": str(amount), "currency": currency}}
            for action, per_currency in person.limits.items()
            for currency, amount in per_currency.items()
        ]
        return {
            "hatpVersion": PROTOCOL_VERSION,
            "id": self.address(person.name),
            "displayName": person.display_name,
            "roles": list(person.roles),
            "pools": [],
            "skills": [],
            "authority": authority,
            "channels": [c.value for c in person.channels],
            "availability": {"timezone": person.timezone, "status": person.status.value},
            "sla": {"decideSeconds": person.decide_seconds},
            "capacity": {"maxOpen": person.max_open, "open": 0},
            "delegates": [self.address(d) for d in person.delegates],
            "keys": [],
            "issuer": issuer,
        }


def read_people(path: str | Path) -> People:
    """Read and check a ``people.toml`` file.

    Raises:
        ConfigInvalid: unreadable, or as :func:`parse_people`.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        log.info("cannot read people file %s: %s", path, exc.strerror)
        raise ConfigInvalid(
            f"cannot read {path}: {exc.strerror}", key=None, file=str(path)
        ) from None
    except UnicodeDecodeError:
        log.info("people file %s is not UTF-8", path)
        raise ConfigInvalid(f"{path} is not UTF-8 text", key=None, file=str(path)) from None
    return parse_people(text, source=str(path))


def parse_people(text: str, *, source: str = "people.toml") -> People:
    """Check the text of a ``people.toml`` file whole; return the people it states.

    Raises:
        ConfigInvalid: the text is not TOML, or states something that cannot be a card:
            ``data.key`` the key at fault (``people.bob.delegates``), ``data.line`` its
            line (1-based), ``data.file`` ``source``; the message starts ``source:line:``.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        line = int(found.group(1)) if found else _lines(text)
        log.info("people file %s is not TOML: %s", source, exc)
        raise ConfigInvalid(
            f"{source}:{line}: not TOML: {exc}", key=None, line=line, file=source
        ) from None
    return _Reader(text, source).people(doc)


def build_directory(
    people: People,
    issuer: str,
    directory_key: SigningKey,
    *,
    previous: Directory | None = None,
) -> Directory:
    """Sign every person's card with ``directory_key``; return the directory of them.

    The passkeys on a card of ``previous`` (the directory being replaced) stay on
    the new card of the same person: registering one is the person's act, not the
    file's. A person no longer in ``people`` has no card, and their passkeys go.

    Raises:
        CardInvalid: a card the file describes is not a Human Card (reason ``SHAPE``).
    """
    keyring = Keyring([(directory_key.public, issuer)], trusted_issuers=[issuer])
    held = set() if previous is None else {card.id for card in previous.cards()}
    signed = []
    for body in people.card_bodies(issuer):
        if previous is not None and body["id"] in held:
            kept = previous.signed(body["id"]).get("keys", [])
            body["keys"] = [k for k in kept if k.get("use") == "webauthn"]
        signed.append(sign_card(body, directory_key))
    return Directory(issuer, signed, keyring)


def write_directory(
    people: People, issuer: str, directory_key: SigningKey, path: str | Path
) -> Directory:
    """Sign ``people``'s cards and write the directory file at ``path``; return it.

    A file already at ``path`` is the directory being replaced: it must load, be
    ``issuer``'s and be signed by ``directory_key``, and its passkeys are kept (see
    :func:`build_directory`). The file's lock is held from reading it to writing the
    new one, so a passkey a running server registers meanwhile is not lost.

    Raises:
        ConfigInvalid: ``key`` ``out``: the file at ``path`` does not load with this
            key, or is another issuer's (nothing was written).
        OSError: the file could not be written (it is as it was).
    """
    target = Path(path)
    keyring = Keyring([(directory_key.public, issuer)], trusted_issuers=[issuer])
    with _locked(_File(target, keyring, (0, 0, 0))):
        previous = None
        if target.exists():
            try:
                previous = Directory.load(target, keyring)
            except CardInvalid as exc:
                log.info("refused to replace directory %s: %s", target, exc.message)
                raise ConfigInvalid(
                    f"{target} holds cards this directory key cannot vouch for "
                    f"({exc.message}); its passkeys would be lost: name the right key, or "
                    "move the file away to start afresh",
                    key="out",
                ) from None
        directory = build_directory(people, issuer, directory_key, previous=previous)
        directory.save(target)
    return directory


class _Reader:
    """Checks one parsed file, naming the line of each key it refuses."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.text = text
        self._where = _key_lines(text)

    def refuse(self, path: Sequence[str], message: str) -> NoReturn:
        line = self.line(path)
        key = ".".join(path)
        log.info("refused people file %s line %d, %s: %s", self.source, line, key, message)
        raise ConfigInvalid(
            f"{self.source}:{line}: {key}: {message}", key=key, line=line, file=self.source
        )

    def line(self, path: Sequence[str]) -> int:
        """The line of ``path``, or of the nearest table or key above it that is written."""
        for end in range(len(path), 0, -1):
            if (found := self._where.get(tuple(path[:end]))) is not None:
                return found
        return 1

    def people(self, doc: dict[str, Any]) -> People:
        self._unknown(doc, _TOP, ())
        org = doc.get("org")
        if not isinstance(org, str):
            self.refuse(["org"], 'name the organisation, e.g. org = "acme.example"')
        try:
            parse_address(f"human://{org}/x")
        except AddressInvalid as exc:
            self.refuse(["org"], f"{org!r} is not a lower-case DNS name: {exc.message}")
        timezone = doc.get("timezone", "UTC")
        if not isinstance(timezone, str):
            self.refuse(["timezone"], 'an IANA time zone name, e.g. "Europe/London"')
        roles = self._roles(doc.get("roles", {}))
        table = doc.get("people")
        if not isinstance(table, dict) or not table:
            self.refuse(["people"], "list at least one person, as a table [people.NAME]")
        people = tuple(
            self._person(name, entry, roles, timezone, org) for name, entry in table.items()
        )
        names = {p.name for p in people}
        for person in people:
            for delegate in person.delegates:
                if delegate not in names:
                    self.refuse(
                        ["people", person.name, "delegates"],
                        f"{delegate!r} is not a person of this file: name one of "
                        f"{', '.join(sorted(names))}",
                    )
        return People(org, roles, people)

    def _roles(self, table: Any) -> dict[str, str]:
        if not isinstance(table, dict):
            self.refuse(["roles"], 'a table of role names, e.g. finance-approver = "what it is"')
        for name, description in table.items():
            if not _NAME_RE.fullmatch(name):
                self.refuse(["roles", name], _bad_name("a role", name))
            if not isinstance(description, str):
                self.refuse(["roles", name], "describe the role in a string")
        return dict(table)

    def _person(
        self, name: str, entry: Any, roles: Mapping[str, str], timezone: str, org: str
    ) -> Person:
        at = ["people", name]
        if not _NAME_RE.fullmatch(name) or ".." in name or name in ("role", "pool"):
            self.refuse(at, _bad_name("a person", name))
        try:
            parse_address(f"human://{org}/{name}")
        except AddressInvalid as exc:
            self.refuse(at, f"human://{org}/{name} is not a person's address: {exc.message}")
        if not isinstance(entry, dict):
            self.refuse(at, f"a person is a table: [people.{name}]")
        self._unknown(entry, _PERSON, at)
        display = entry.get("name")
        if not isinstance(display, str) or not display.strip() or len(display) > 200:
            self.refuse([*at, "name"], 'give the name people know them by, e.g. name = "Bob Chen"')
        held = self._names(entry, [*at, "roles"])
        for role in held:
            if role not in roles:
                self.refuse(
                    [*at, "roles"],
                    f"role {role!r} is not declared under [roles]: declare it or fix the name",
                )
        delegates = self._names(entry, [*at, "delegates"])
        if name in delegates:
            self.refuse([*at, "delegates"], "a person does not delegate to themselves")
        channels = self._channels(entry, [*at, "channels"])
        passkey = entry.get("passkey", True)
        if not isinstance(passkey, bool):
            self.refuse([*at, "passkey"], "true or false")
        if passkey and Channel.WEB not in channels:
            self.refuse(
                [*at, "passkey"],
                "a person who approves with a passkey does so on the approver page: add "
                '"web" to channels, or set passkey = false',
            )
        return Person(
            name=name,
            display_name=display,
            roles=held,
            limits=self._limits(entry.get("limits", {}), [*at, "limits"]),
            delegates=delegates,
            channels=channels,
            passkey=passkey,
            timezone=self._timezone(entry.get("timezone", timezone), [*at, "timezone"]),
            status=self._status(entry.get("status", "available"), [*at, "status"]),
            decide_seconds=self._int(entry, [*at, "decide_seconds"], 900, 1, 31_536_000),
            max_open=self._int(entry, [*at, "max_open"], 10, 0, 1_000_000),
        )

    def _names(self, entry: Mapping[str, Any], at: list[str]) -> tuple[str, ...]:
        values = entry.get(at[-1], [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            self.refuse(at, 'a list of names, e.g. ["bob"]')
        for value in values:
            if not _NAME_RE.fullmatch(value):
                self.refuse(at, _bad_name("a name", value))
        if len(set(values)) != len(values):
            self.refuse(at, "lists a name twice")
        return tuple(values)

    def _channels(self, entry: Mapping[str, Any], at: list[str]) -> tuple[Channel, ...]:
        values = entry.get("channels", ["web"])
        known = ", ".join(c.value for c in Channel)
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            self.refuse(at, f"a list of channel types from {known}")
        for value in values:
            if value not in {c.value for c in Channel}:
                self.refuse(at, f"{value!r} is not a channel type: use {known}")
        if len(set(values)) != len(values):
            self.refuse(at, "lists a channel twice")
        return tuple(Channel(v) for v in values)

    def _limits(self, table: Any, at: list[str]) -> dict[str, dict[str, Decimal]]:
        example = '{ "approve.spend" = { USD = "2000" } }'
        if not isinstance(table, dict):
            self.refuse(at, f"a table action → currency → amount, e.g. limits = {example}")
        limits: dict[str, dict[str, Decimal]] = {}
        for action, per_currency in table.items():
            if not _ACTION_RE.fullmatch(action):
                self.refuse([*at, action], f"{action!r} is not an action like approve.spend")
            if not isinstance(per_currency, dict) or not per_currency:
                self.refuse([*at, action], f"a table currency → amount, e.g. limits = {example}")
            limits[action] = {
                currency: self._amount(amount, [*at, action, currency])
                for currency, amount in per_currency.items()
            }
        return limits

    def _amount(self, value: Any, at: list[str]) -> Decimal:
        currency = at[-1]
        if not _CURRENCY_RE.fullmatch(currency):
            self.refuse(at, f"{currency!r} is not an ISO 4217 currency code (three capitals, USD)")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            self.refuse(at, f'write the limit as a decimal string, e.g. {currency} = "2000.00"')
        text = str(value)
        if text.startswith("-"):
            self.refuse(at, f"limit {text} is negative: a limit is 0 or more")
        if not _DECIMAL_RE.fullmatch(text):
            self.refuse(at, f'limit {text!r} is not a decimal like "2000.00"')
        try:
            return Decimal(text)
        except InvalidOperation:  # the pattern admits only decimals; kept for safety
            self.refuse(at, f"limit {text!r} is not a decimal")

    def _timezone(self, value: Any, at: list[str]) -> str:
        from hatp.model.card import Availability

        try:
            Availability.model_validate({"timezone": value, "status": "available"})
        except ValueError:
            self.refuse(at, f'{value!r} is not an IANA time zone name like "Europe/London"')
        return str(value)

    def _status(self, value: Any, at: list[str]) -> Status:
        if value not in {s.value for s in Status}:
            self.refuse(at, f"one of {', '.join(s.value for s in Status)}, not {value!r}")
        return Status(value)

    def _int(
        self, entry: Mapping[str, Any], at: list[str], default: int, low: int, high: int
    ) -> int:
        value = entry.get(at[-1], default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.refuse(at, f"a whole number from {low} to {high}, not {value!r}")
        return value

    def _unknown(
        self, table: Mapping[str, Any], known: frozenset[str], at: list[str] | tuple[()]
    ) -> None:
        for key in table:
            if key not in known:
                self.refuse(
                    [*at, key], f"unknown key {key!r}: known keys are {', '.join(sorted(known))}"
                )


def _bad_name(what: str, name: str) -> str:
    return (
        f"{name!r} is not {what} name: lower-case letters, digits, '.', '_' or '-', "
        "starting with a letter or digit, at most 64 characters"
    )


def _lines(text: str) -> int:
    return max(1, text.count("\n") + 1)


_KEY_PART = r'(?:"[^"\n]*"|\'[^\'\n]*\'|[A-Za-z0-9_-]+)'
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER_RE = re.compile(rf"\s*\[\s*({_DOTTED})\s*\]\s*(?:#.*)?")
_ASSIGN_RE = re.compile(rf"\s*({_DOTTED})\s*=")
_PART_RE = re.compile(_KEY_PART)


def _split(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip("\"'") for part in _PART_RE.findall(dotted))


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each table header and key is written (1-based lines): an approximation
    of TOML's grammar good enough to point at a line, never used to read values."""
    where: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.split("\n"), start=1):
        if header := _HEADER_RE.fullmatch(line):
            table = _split(header.group(1))
            where.setdefault(table, number)
        elif assign := _ASSIGN_RE.match(line):
            path = table + _split(assign.group(1))
            where.setdefault(path, number)
            for inner in re.finditer(rf"({_DOTTED})\s*=", line[assign.end() :]):
                # keys of an inline table on the same line: limits = { "x" = { USD = "1" } }
                where.setdefault(path + _split(inner.group(1)), number)
    return where
