"""The business trip: four participants with their own keys and durable ledgers.

:meth:`TripWorld.open` builds (or reopens) the world in a folder: an airline,
a hotel, a calendar and a payments service, each an ordinary tool server on
the participant SDK with its own store, plus the coordinator's and the
gateway's keys. :func:`trip_plan` writes the plan the demo runs. The world
only holds data; the CLI renders it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from hatp.clock import Clock, format_time
from hatp.coordinator import Coordinator, Gateway
from hatp.demo import _airline, _calendar, _hotel, _payments
from hatp.demo._ledger import LedgerLine, Seed, Service, read_lines
from hatp.demo._payments import CaptureFee
from hatp.demo._people import DIRECTORY, PEOPLE, acme_directory
from hatp.directory import Directory
from hatp.errors import KeyInvalid
from hatp.evidence import Keyring, SigningKey
from hatp.gateway import Channel, HumanGateway, MemoryChannel, Person, SoftwareAuthenticator
from hatp.participant import Participant, ParticipantServer
from hatp.store import AskStore, DecisionLog, Store, open_store
from hatp.version import PROTOCOL_VERSION

__all__ = [
    "AIRLINE",
    "CALENDAR",
    "CARD",
    "COORDINATOR",
    "FINANCE_ADDRESS",
    "FLIGHT",
    "GATEWAY",
    "HOTEL",
    "INITIATOR",
    "LOW_LIMIT_CARD",
    "PARTICIPANT_IDS",
    "TRAVELLER",
    "CaptureFee",
    "LedgerLine",
    "TripWorld",
    "trip_plan",
]

AIRLINE = _airline.PARTICIPANT
HOTEL = _hotel.PARTICIPANT
CALENDAR = _calendar.PARTICIPANT
PAYMENTS = _payments.PARTICIPANT
COORDINATOR = "hatp://acme.com/coordinator"
GATEWAY = "https://gateway.acme.com"
FINANCE_ADDRESS = "human://acme.com/role/finance-approver"
INITIATOR = "agent://acme.com/travel-bot"
TRAVELLER = "human://acme.com/alice"
FLIGHT = _airline.FLIGHT
CARD, LOW_LIMIT_CARD = _payments.CARD, _payments.LOW_LIMIT_CARD

_SERVICES: tuple[Service, ...] = (
    _airline.SERVICE,
    _hotel.SERVICE,
    _calendar.SERVICE,
    _payments.SERVICE,
)
#: The participants in plan order.
PARTICIPANT_IDS: tuple[str, ...] = tuple(s.participant_id for s in _SERVICES)
_BY_ID = {s.participant_id: s for s in _SERVICES}
#: Who holds a key (participant id, "coordinator", "gateway") -> (key file stem, issuer).
_KEY_HOLDERS: dict[str, tuple[str, str]] = {
    **{s.participant_id: (s.name, s.participant_id) for s in _SERVICES},
    "coordinator": ("coordinator", COORDINATOR),
    "gateway": ("gateway", GATEWAY),
}


@dataclass
class TripWorld:
    """The four trip participants, running in-process on their own stores.

    ``keys`` holds the signing keys of the four participants (by participant
    id) and of ``"coordinator"`` and ``"gateway"``; ``keyring`` every public
    key with its issuer, all trusted.
    """

    folder: Path
    clock: Clock
    participants: dict[str, ParticipantServer]
    keys: dict[str, SigningKey]
    keyring: Keyring
    stores: dict[str, Store]
    directory: Directory
    #: Each acme person's own signing key, by their id (what their device holds).
    people: dict[str, SigningKey]
    #: The Human Gateway's durable asks (``folder/gateway.db``).
    asks: AskStore
    #: Each acme person's passkey, by their id, when the world was opened with passkeys.
    passkeys: dict[str, SoftwareAuthenticator] = field(default_factory=dict)
    #: acme's directory key (it signs the cards, and a passkey registered onto one).
    directory_key: SigningKey | None = None

    @classmethod
    def open(
        cls,
        folder: Path,
        clock: Clock,
        *,
        rooms: int = 3,
        seats_free: bool = True,
        store_urls: Mapping[str, str] | None = None,
        passkey_rp_id: str | None = None,
        channels: Sequence[str] = ("terminal",),
        capture_fee: CaptureFee | None = None,
    ) -> TripWorld:
        """Create the world in ``folder``, or reopen the one already there.

        Keys are made once and kept under ``folder/keys/``, so every process
        opening the folder signs with the same keys. Each participant's store
        is ``folder/<name>.db`` unless ``store_urls`` (by participant id) names
        another. Inventory is stocked on first open only (``rooms`` a night at
        the hotel; every seat free, or every seat taken); a reopen keeps what
        is there. With ``passkey_rp_id`` every person also has a passkey for that
        rpId (``folder/keys/people/<name>.passkey.pem``, its sign count always 0,
        as a synced passkey's) on their card, and in :attr:`passkeys`. Every card names
        the channel types ``channels`` (``("web",)`` for the approver page). With
        ``capture_fee`` the card's bank adds that fee to every charge at capture, and
        payments previews its charges as ``predicted`` (the price-changed scenario).

        Raises:
            ValueError: ``store_urls`` names an unknown participant, or ``rooms`` < 0.
            KeyInvalid: a key file under ``folder/keys/`` is unreadable.
            StoreUnavailable: a store cannot be opened or written.
        """
        urls = dict(store_urls or {})
        if unknown := sorted(set(urls) - set(PARTICIPANT_IDS)):
            raise ValueError(f"store_urls names unknown participants {unknown}")
        if rooms < 0:
            raise ValueError("rooms cannot be negative")
        folder = Path(folder)
        (folder / "keys").mkdir(parents=True, exist_ok=True)
        keys = {
            holder: _load_or_make(folder / "keys" / f"{stem}.jwk", f"{issuer}#key-1")
            for holder, (stem, issuer) in _KEY_HOLDERS.items()
        }
        passkeys = (
            {}
            if passkey_rp_id is None
            else {
                p.id: _load_or_make_passkey(
                    folder / "keys" / "people" / f"{p.name}.passkey.pem",
                    passkey_rp_id,
                    f"{p.id}#passkey-1",
                )
                for p in PEOPLE
            }
        )
        directory, people, directory_key = acme_directory(
            folder / "keys", _load_or_make, passkeys, channels
        )
        keyring = Keyring(
            [(keys[holder].public, issuer) for holder, (_, issuer) in _KEY_HOLDERS.items()]
            + [(directory_key.public, DIRECTORY)],
            trusted_issuers=[issuer for _, issuer in _KEY_HOLDERS.values()] + [DIRECTORY],
        )
        stock = Seed(rooms=rooms, seats_free=seats_free)
        stores: dict[str, Store] = {}
        try:
            for service in _SERVICES:
                pid = service.participant_id
                store = open_store(urls.get(pid) or folder / f"{service.name}.db")
                stores[pid] = store
                with store.transaction() as conn:
                    service.metadata.create_all(conn)
                    service.seed(conn, stock)
        except BaseException:
            for store in stores.values():
                store.close()
            raise
        try:
            gateway_store = open_store(folder / "gateway.db")
        except BaseException:
            for store in stores.values():
                store.close()
            raise
        stores[GATEWAY] = gateway_store
        operations = {pid: list(_BY_ID[pid].operations()) for pid in PARTICIPANT_IDS}
        if capture_fee is not None:
            operations[PAYMENTS] = [_payments.Charge(capture_fee), _payments.Refund()]
        participants = {
            pid: ParticipantServer(pid, keys[pid], stores[pid], operations[pid], clock)
            for pid in PARTICIPANT_IDS
        }
        asks = AskStore(gateway_store)
        return cls(
            folder,
            clock,
            participants,
            keys,
            keyring,
            stores,
            directory,
            people,
            asks,
            passkeys,
            directory_key,
        )

    @contextlib.asynccontextmanager
    async def sweeping(self, every: float | None = None) -> AsyncIterator[None]:
        """Inside the ``with`` block, every participant releases its holds whose lease
        ended, every ``every`` seconds (default: the participant's own) [PART-SWEEP]."""
        async with contextlib.AsyncExitStack() as stack:
            for server in self.participants.values():
                sweep = server.sweeping() if every is None else server.sweeping(every)
                await stack.enter_async_context(sweep)
            yield

    @property
    def participant_ids(self) -> tuple[str, ...]:
        """The participants in plan order: airline, hotel, calendar, payments."""
        return PARTICIPANT_IDS

    def ledger(self, participant_id: str) -> list[LedgerLine]:
        """Return every line of a participant's ledger, oldest first.

        Raises:
            ValueError: not one of the world's participants.
        """
        service = _service(participant_id)
        with self.stores[participant_id].transaction() as conn:
            return read_lines(conn, service.ledger)

    def effects(self, txn_id: str) -> dict[str, str]:
        """Judge what ``txn_id`` left at each participant, from its ledger and its tables.

        Returns, by participant id: ``"whole"`` (the effect fully in place:
        seat ticketed, room booked, event present, charge captured once),
        ``"none"`` (nothing lasting: all placed was released, voided or
        removed, or nothing happened), ``"undone"`` (committed whole, then
        taken back by an undo transaction: seat cancelled, booking cancelled,
        event removed, capture refunded less the fees kept), or ``"broken:
        <why>"`` (partial, or done twice). An undo transaction is judged the
        same way: ``"whole"`` once it took its steps back here, ``"none"`` if it
        took nothing back.
        """
        out: dict[str, str] = {}
        for service in _SERVICES:
            with self.stores[service.participant_id].transaction() as conn:
                out[service.participant_id] = service.effect(conn, txn_id)
        return out

    def edit_calendar(
        self,
        owner: str = TRAVELLER,
        title: str = "Dentist",
        *,
        start: str = "2026-12-14T15:00:00.000Z",
        end: str = "2026-12-14T16:00:00.000Z",
    ) -> int:
        """Add an event to ``owner``'s calendar as the owner would; return its new version.

        A dry run that saw the old version no longer matches: its commit is
        refused with ``PRECONDITION_CHANGED``.
        """
        with self.stores[CALENDAR].transaction() as conn:
            return _calendar.edit(conn, owner, title, start, end, self.clock.now())

    def move_seat(self, seat: str, to: str, *, flight: str = FLIGHT) -> None:
        """Move the passenger ticketed on ``seat`` to the free seat ``to``, as the airline
        does on its own: an undo of that booking then finds ``seat`` no longer ticketed
        to it (``ORIGINAL_CHANGED``).

        Raises:
            ValueError: ``seat`` is not ticketed, or ``to`` is not free.
        """
        with self.stores[AIRLINE].transaction() as conn:
            _airline.move(conn, flight, seat, to, self.clock.now())

    def edit_card(self, card_id: str, available: str) -> int:
        """Set a card's available credit as its bank would; return the card's new version.

        Raises:
            KeyError: no such card.
        """
        with self.stores[PAYMENTS].transaction() as conn:
            return _payments.edit(conn, card_id, available, self.clock.now())

    def coordinator(
        self,
        log: DecisionLog,
        gateway: Gateway,
        *,
        links: Mapping[str, Participant] | None = None,
        **options: Any,
    ) -> Coordinator:
        """Return a coordinator for this world's trips.

        It signs with the world's coordinator key, verifies with its keyring,
        runs on its clock and reaches its participants, or ``links`` in front of
        some of them. ``options`` go to :class:`~hatp.coordinator.Coordinator`
        (``owner``, ``lease_seconds``, ``call_timeout``, ``retry_delay``, ``max_attempts``).
        """
        return Coordinator(
            coordinator_id=COORDINATOR,
            key=self.keys["coordinator"],
            log=log,
            participants={**self.participants, **(links or {})},
            gateway=gateway,
            keyring=self.keyring,
            clock=self.clock,
            **options,
        )

    def gateway(self, *channels: Channel) -> HumanGateway:
        """Return acme's Human Gateway: this world's directory, asks, key and clock.

        Every acme card names the ``terminal`` channel type; pass a channel of
        that type (a :class:`~hatp.gateway.TerminalChannel`, or
        :meth:`scripted_people`).
        """
        return HumanGateway(
            GATEWAY, self.keys["gateway"], self.directory, self.asks, channels, self.clock
        )

    def scripted_people(
        self, decision: str = "approve", *, after_seconds: float = 0.0
    ) -> MemoryChannel:
        """A ``terminal``-type channel on which every acme person answers as scripted.

        ``decision`` is what each person asked does (``approve``, ``reject``,
        ``decline`` or ``never``), ``after_seconds`` on the world's clock, with
        a vote signed by their own key, and by their passkey when the ask gave
        them a nonce and the world has passkeys.
        """
        people = {
            pid: Person(key, decision, after_seconds, passkey=self.passkeys.get(pid))  # type: ignore[arg-type]
            for pid, key in self.people.items()
        }
        return MemoryChannel("terminal", clock=self.clock, people=people)

    def close(self) -> None:
        """Close every participant's store and the gateway's."""
        for store in self.stores.values():
            store.close()

    def __enter__(self) -> TripWorld:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def trip_plan(
    txn_id: str,
    *,
    decide_by: datetime,
    traveller: str = TRAVELLER,
    seat: str = "14C",
    card: str = CARD,
    mode: str = "parallel",
    passkey: bool | Mapping[str, Any] = False,
    previews: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Return the business-trip plan's wire form (it passes :func:`hatp.model.parse_plan`);
    ``previews``, the least each tier's effect preview must say (not with parallel).

    Four branches: ``seat`` (airline, hold, 420.00 USD), ``room`` (hotel,
    hold, 2 nights at 155.00 = 310.00 USD), ``calendar`` (compensate, no
    amount) and ``charge`` (payments, final, 730.00 USD, settling seat and
    room); one approval group ``finance`` at :data:`FINANCE_ADDRESS` (its
    requirement's ``passkey`` as given: true, or ``{"above": amount}``). A
    business-class ``seat`` (rows 1-3) costs more than the plan says, so the
    airline votes no; :data:`LOW_LIMIT_CARD` declines the charge.
    """
    who = traveller.rsplit("/", 1)[-1].capitalize()
    policy = {} if previews is None else {"previews": {"minimum": dict(previews)}}
    return {
        **policy,
        "hatpVersion": PROTOCOL_VERSION,
        "txnId": txn_id,
        "initiator": INITIATOR,
        "onBehalfOf": traveller,
        "branches": [
            _branch("seat", AIRLINE, "book_seat", "hold", "420.00", flight=FLIGHT, seat=seat),
            _branch(
                "room",
                HOTEL,
                "hold_room",
                "hold",
                "310.00",
                hotel=_hotel.HOTEL,
                checkIn="2026-12-14",
                nights=2,
            ),
            _branch(
                "calendar",
                CALENDAR,
                "add_event",
                "compensate",
                None,
                owner=traveller,
                title="Acme customer visit, New York",
                start="2026-12-14T13:00:00.000Z",
                end="2026-12-16T22:00:00.000Z",
            ),
            {
                **_branch(
                    "charge",
                    PAYMENTS,
                    "charge",
                    "final",
                    "730.00",
                    card=card,
                    amount={"value": "730.00", "currency": "USD"},
                    payee="Acme Travel",
                ),
                "settles": ["seat", "room"],
            },
        ],
        "approvals": [
            {
                "groupId": "finance",
                "address": FINANCE_ADDRESS,
                "requirement": {
                    "action": "approve.spend",
                    "tolerance": "0",
                    "passkey": passkey if isinstance(passkey, bool) else dict(passkey),
                },
            }
        ],
        "deadlines": {"decideBy": format_time(decide_by)},
        "mode": mode,
        "agentText": {
            "summary": f"Book {who}'s trip to New York: seat {seat} on {FLIGHT}, two nights "
            f"at the Midtown Lodge, the visit in the calendar, all charged to card {card} "
            "(730.00 USD)."
        },
    }


def _branch(
    branch_id: str, participant: str, operation: str, tier: str, value: str | None, **args: Any
) -> dict[str, Any]:
    return {
        "branchId": branch_id,
        "participant": participant,
        "operation": operation,
        "tier": tier,
        "args": args,
        "amount": None if value is None else {"value": value, "currency": "USD"},
    }


def _service(participant_id: str) -> Service:
    try:
        return _BY_ID[participant_id]
    except KeyError:
        raise ValueError(
            f"{participant_id!r} is not a trip participant; one of {', '.join(PARTICIPANT_IDS)}"
        ) from None


def _load_or_make(path: Path, kid: str) -> SigningKey:
    """Load the key at ``path``, or make it there; safe when two processes race."""
    if path.exists():
        return SigningKey.load(path)
    key = SigningKey.generate(kid)
    # Write aside, then link into place: the link either wins whole or finds
    # the other process's complete file, never a half-written one.
    spare = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    key.save(spare)
    try:
        os.link(spare, path)
    except FileExistsError:
        return SigningKey.load(path)
    finally:
        spare.unlink()
    return key


def _load_or_make_passkey(path: Path, rp_id: str, kid: str) -> SoftwareAuthenticator:
    """Load the passkey's P-256 key at ``path`` (PKCS #8 PEM), or make it there; safe
    when two processes race. Its sign count stays 0: every process has its own copy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        made = ec.generate_private_key(ec.SECP256R1())
        pem = made.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        spare = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        try:
            os.link(spare, path)
        except FileExistsError:
            pass  # the other process's key won: load it
        finally:
            spare.unlink()
    key = load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise KeyInvalid(f"{path} is not a P-256 passkey key", kid=kid)
    return SoftwareAuthenticator(rp_id, kid, private_key=key, counting=False)
