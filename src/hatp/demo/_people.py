"""The people of acme.com in the trip world: their Human Cards, signed by acme's directory.

Four people hold the finance-approver role, and routing the trip's finance
ask passes over two of them for reasons the record shows:

- ``alice`` is the traveller: separation of duties keeps her off her own trip;
- ``bob`` approves up to 2,000 USD, answers at the terminal, delegates to carol;
- ``carol`` approves up to 10,000 USD and is busy, so she ranks after bob;
- ``erin`` approves up to 500 USD: too little for the 730 USD trip.

Each person's Ed25519 key (``folder/keys/people/<name>.jwk``) is on their
card; their votes are signed with it, so an auditor checks who decided
without taking the gateway's word. A world opened with passkeys also puts
each person's passkey (a :class:`~hatp.gateway.SoftwareAuthenticator`) on
their card.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hatp.directory import Directory, sign_card
from hatp.evidence import Keyring, SigningKey
from hatp.gateway import SoftwareAuthenticator
from hatp.version import PROTOCOL_VERSION

__all__ = ["DIRECTORY", "PEOPLE", "Person", "acme_directory"]

DIRECTORY = "https://directory.acme.com"


@dataclass(frozen=True)
class Person:
    """One acme person as the trip world knows them."""

    name: str
    limit: str
    status: str = "available"
    decide_seconds: int = 900
    delegates: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"human://acme.com/{self.name}"


PEOPLE: tuple[Person, ...] = (
    Person("alice", "5000"),
    Person("bob", "2000", delegates=("carol",)),
    Person("carol", "10000", status="busy"),
    Person("erin", "500"),
)


def _card(
    person: Person,
    key: SigningKey,
    passkey: SoftwareAuthenticator | None = None,
    channels: Sequence[str] = ("terminal",),
) -> dict[str, Any]:
    return {
        "hatpVersion": PROTOCOL_VERSION,
        "id": person.id,
        "displayName": person.name.title(),
        "roles": ["finance-approver"],
        "pools": [],
        "skills": ["travel-policy"],
        "authority": [
            {"action": "approve.spend", "maxAmount": {"value": person.limit, "currency": "USD"}}
        ],
        "channels": list(channels),
        "availability": {"timezone": "America/New_York", "status": person.status},
        "sla": {"decideSeconds": person.decide_seconds},
        "capacity": {"maxOpen": 10, "open": 1},
        "delegates": [f"human://acme.com/{d}" for d in person.delegates],
        "keys": [key.public.to_jwk()] + ([] if passkey is None else [passkey.key_entry()]),
        "issuer": DIRECTORY,
    }


def acme_directory(
    keys_folder: Path,
    load_or_make: Callable[[Path, str], SigningKey],
    passkeys: Mapping[str, SoftwareAuthenticator] | None = None,
    channels: Sequence[str] = ("terminal",),
) -> tuple[Directory, dict[str, SigningKey], SigningKey]:
    """Return acme's directory, each person's key (by id) and the directory's key.

    ``load_or_make(path, kid)`` loads a key file or makes it (shared with the
    trip world, so several processes on one folder agree on every key).
    ``passkeys`` (by person id) puts each one's passkey on their card;
    ``channels`` are the channel types every card names.
    """
    passkeys = passkeys or {}
    (keys_folder / "people").mkdir(parents=True, exist_ok=True)
    directory_key = load_or_make(keys_folder / "directory.jwk", f"{DIRECTORY}#key-1")
    people = {
        p.id: load_or_make(keys_folder / "people" / f"{p.name}.jwk", f"{p.id}#key-1")
        for p in PEOPLE
    }
    cards = [
        sign_card(_card(p, people[p.id], passkeys.get(p.id), channels), directory_key)
        for p in PEOPLE
    ]
    trusting = Keyring([(directory_key.public, DIRECTORY)], trusted_issuers=[DIRECTORY])
    return Directory(DIRECTORY, cards, trusting), people, directory_key
