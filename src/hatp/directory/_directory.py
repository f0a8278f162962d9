"""The Directory: verified Human Cards, loaded from a file, and what it publishes.

Routing reads cards through :class:`CardSource`, a one-method protocol, so a
store-backed directory can replace the file-backed one without touching
:func:`resolve`.

A directory loaded from a file follows the file: several processes (the
workers of one ``hatp serve``, a ``hatp invite`` beside them) each hold one,
and a card one of them changes is read by the others at their next look.
Changes go through :meth:`Directory.editing`, which holds the file's lock,
so two processes registering passkeys at once keep both.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from hatp.directory._cards import verify_card
from hatp.directory._resolve import Ask, ExclusionRule, Resolution, resolve_cards
from hatp.errors import CardInvalid, InvalidJson
from hatp.evidence import Keyring, PublicKey, parse_json
from hatp.model import Address, HumanCard, PublicJwk, Requirement, WellKnown, parse_address
from hatp.version import PROTOCOL_VERSION


class CardSource(Protocol):
    """Where routing gets its cards: every card returned is already verified."""

    def cards(self) -> Iterable[HumanCard]:
        """Return every verified card."""
        ...


def resolve(
    source: CardSource,
    address: Address | str,
    requirement: Requirement | str,
    *,
    amounts: Mapping[str, Decimal],
    on_behalf_of: str,
    initiator_principal: str | None = None,
    deadline_seconds: float | None = None,
    passkey_required: bool = False,
    rules: frozenset[ExclusionRule] | None = None,
) -> Resolution:
    """Resolve an address to ranked candidates and everyone passed over (docs/spec.md §17).

    ``amounts`` is what the person must cover per currency (the gateway's
    computed totals plus tolerance); ``requirement`` gives the action.
    ``rules`` limits the exclusion rules that apply (default: all of them).

    Raises:
        AddressInvalid: the address does not parse, or is an agent's.
    """
    ask = Ask(
        address if isinstance(address, Address) else parse_address(address),
        requirement if isinstance(requirement, str) else requirement.action,
        dict(amounts),
        on_behalf_of,
        initiator_principal,
        deadline_seconds,
        passkey_required,
        rules,
    )
    return resolve_cards(source.cards(), ask)


class Directory:
    """Verified Human Cards of one issuer, with the signed documents they came from.

    A directory holds only cards that verified; one bad card refuses the
    whole set (fail closed): routing on the rest could pass over, or fail
    to pass over, the very person whose card was tampered with.
    """

    def __init__(self, issuer: str, signed_cards: Iterable[Any], keyring: Keyring) -> None:
        """Verify every card and keep them.

        Raises:
            CardInvalid: a card does not verify (``data.card``, ``data.index``
                name it), is from another issuer, or two cards share an id.
        """
        self.issuer = issuer
        self._cards = _verified(issuer, signed_cards, keyring)
        # Set by load(): the file this directory follows, and how it looked when read.
        self._file: _File | None = None
        self._editing = threading.RLock()

    def cards(self) -> list[HumanCard]:
        """Return every card, by id."""
        self._follow()
        return [self._cards[key][0] for key in sorted(self._cards)]

    def card(self, card_id: str) -> HumanCard:
        """Return the card with this id.

        Raises:
            KeyError: no such card.
        """
        self._follow()
        return self._cards[card_id][0]

    def signed(self, card_id: str) -> dict[str, Any]:
        """Return the card with this id as the directory signed it (a copy).

        Raises:
            KeyError: no such card.
        """
        self._follow()
        return dict(self._cards[card_id][1])

    def __len__(self) -> int:
        self._follow()
        return len(self._cards)

    @contextlib.contextmanager
    def editing(self) -> Iterator[Directory]:
        """Change cards (:meth:`replace_card`) as one edit; yield this directory.

        One edit at a time in this process. For a directory loaded from a file,
        also one at a time across processes (the file's lock, ``.<name>.lock``
        beside it): the file is read again when the edit starts, so the edit
        works on every change made before it, and written whole when the edit
        ends. If the block raises, nothing is written and the file's cards are
        read back (a directory built in memory keeps what the block changed).

        Raises:
            CardInvalid: the file can no longer be read, or holds a card that
                does not verify (nothing was changed).
            OSError: the file could not be written (its cards are read back).
        """
        with self._editing, _locked(self._file):
            self._follow(always=True)
            try:
                yield self
                if self._file is not None:
                    self._file.stamp = _write(self._file.path, self.to_json())
            except BaseException:
                with contextlib.suppress(CardInvalid):  # the block's error is the one to see
                    self._follow(always=True)
                raise

    def _follow(self, *, always: bool = False) -> None:
        """Read the file again if it changed since it was read (``always``: anyway)."""
        file = self._file
        if file is None or (not always and _stamp(file.path) == file.stamp):
            return
        with self._editing:
            read = Directory.load(file.path, file.keyring)
            if read.issuer != self.issuer:
                raise CardInvalid(
                    f"{file.path} is now issued by {read.issuer!r}, not by this directory's "
                    f"{self.issuer!r}: restart with the settings that name it",
                    reason="ISSUER",
                    card=None,
                )
            self._cards = read._cards
            file.stamp = read._file.stamp if read._file is not None else file.stamp

    def replace_card(self, signed_card: Any, keyring: Keyring) -> HumanCard:
        """Put a new signed version of a card this directory holds in place of the old
        one (a passkey registered onto it, say); return it, verified.

        Raises:
            CardInvalid: the card does not verify against ``keyring``, is another
                issuer's, or has an id this directory holds no card for; nothing changed.
        """
        card = verify_card(signed_card, keyring)
        if card.issuer != self.issuer:
            raise CardInvalid(
                f"card {card.id} is issued by {card.issuer!r}, not by this directory's "
                f"{self.issuer!r}",
                reason="ISSUER",
                card=card.id,
            )
        if card.id not in self._cards:
            raise CardInvalid(
                f"this directory holds no card {card.id} to replace", reason="SHAPE", card=card.id
            )
        self._cards[card.id] = (card, dict(signed_card))
        return card

    def resolve(
        self,
        address: Address | str,
        requirement: Requirement | str,
        *,
        amounts: Mapping[str, Decimal],
        on_behalf_of: str,
        initiator_principal: str | None = None,
        deadline_seconds: float | None = None,
        passkey_required: bool = False,
    ) -> Resolution:
        """:func:`resolve` over this directory's cards."""
        return resolve(
            self,
            address,
            requirement,
            amounts=amounts,
            on_behalf_of=on_behalf_of,
            initiator_principal=initiator_principal,
            deadline_seconds=deadline_seconds,
            passkey_required=passkey_required,
        )

    def to_json(self) -> dict[str, Any]:
        """Return the directory file ``{hatpVersion, issuer, cards}``, cards as signed."""
        self._follow()
        docs = [self._cards[key][1] for key in sorted(self._cards)]
        return {"hatpVersion": PROTOCOL_VERSION, "issuer": self.issuer, "cards": docs}

    @classmethod
    def from_json(cls, doc: Any, keyring: Keyring) -> Directory:
        """Build a directory from its file document.

        Raises:
            CardInvalid: reason ``SHAPE`` if the document is not a directory
                file; any card's refusal otherwise (see :meth:`__init__`).
        """
        if (
            not isinstance(doc, dict)
            or set(doc) != {"hatpVersion", "issuer", "cards"}
            or doc["hatpVersion"] != PROTOCOL_VERSION
            or not isinstance(doc["issuer"], str)
            or not isinstance(doc["cards"], list)
        ):
            raise CardInvalid(
                'a directory file is {"hatpVersion": "'
                + PROTOCOL_VERSION
                + '", "issuer": "...", "cards": [signed Human Cards]}',
                reason="SHAPE",
                card=None,
            )
        return cls(doc["issuer"], doc["cards"], keyring)

    @classmethod
    def load(cls, path: str | Path, keyring: Keyring) -> Directory:
        """Read a directory file with the strict JSON reader and verify every card.

        Raises:
            CardInvalid: unreadable, not strict JSON, not a directory file, or
                any card refused (the whole file is refused).
        """
        stamp = _stamp(Path(path))  # before reading: a change in between is read again later
        try:
            doc = parse_json(Path(path).read_bytes())
        except OSError as exc:
            raise CardInvalid(
                f"cannot read directory {path}: {exc.strerror}", reason="SHAPE", card=None
            ) from None
        except InvalidJson as exc:
            raise CardInvalid(
                f"{path} is not strict JSON: {exc.message}", reason="SHAPE", card=None
            ) from None
        directory = cls.from_json(doc, keyring)
        directory._file = _File(Path(path), keyring, stamp)
        return directory

    def save(self, path: str | Path) -> None:
        """Write the directory file to ``path``, whole or not at all: it is written
        beside it and renamed over it, so a reader never sees half a file.

        A directory loaded from a file writes its changes there itself
        (:meth:`editing`); ``save`` is for one built in memory, or a copy elsewhere.
        """
        _write(Path(path), self.to_json())


def _verified(
    issuer: str, signed_cards: Iterable[Any], keyring: Keyring
) -> dict[str, tuple[HumanCard, dict[str, Any]]]:
    """Every card verified, by id, with the document it came from (see Directory)."""
    cards: dict[str, tuple[HumanCard, dict[str, Any]]] = {}
    for index, doc in enumerate(signed_cards):
        try:
            card = verify_card(doc, keyring)
        except CardInvalid as exc:
            raise CardInvalid(
                f"card {index}: {exc.message}", **{**exc.data, "index": index}
            ) from None
        if card.issuer != issuer:
            raise CardInvalid(
                f"card {index} ({card.id}) is issued by {card.issuer!r}, "
                f"not by this directory's {issuer!r}",
                reason="ISSUER",
                card=card.id,
                index=index,
            )
        if card.id in cards:
            raise CardInvalid(
                f"card {index}: two cards have id {card.id}; keep one",
                reason="SHAPE",
                card=card.id,
                index=index,
            )
        cards[card.id] = (card, dict(doc))
    return cards


class _File:
    """The file a loaded directory follows: where, whom to trust, how it looked when read."""

    def __init__(self, path: Path, keyring: Keyring, stamp: tuple[int, int, int]) -> None:
        self.path = path
        self.keyring = keyring
        self.stamp = stamp


def _stamp(path: Path) -> tuple[int, int, int]:
    """What tells one version of the file from the next: every save renames a new
    file over it (a new inode), with its own time and, usually, size."""
    try:
        found = path.stat()
    except OSError as exc:
        raise CardInvalid(
            f"cannot read directory {path}: {exc.strerror}", reason="SHAPE", card=None
        ) from None
    return found.st_ino, found.st_mtime_ns, found.st_size


@contextlib.contextmanager
def _locked(file: _File | None) -> Iterator[None]:
    """Hold the directory file's lock (an flock on ``.<name>.lock`` beside it)."""
    if file is None:
        yield
        return
    lock = file.path.with_name(f".{file.path.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        yield
    finally:
        os.close(fd)


def _write(path: Path, doc: dict[str, Any]) -> tuple[int, int, int]:
    """Write the directory file whole or not at all (written beside it, renamed over
    it, so a reader never sees half a file); return its new stamp."""
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return _stamp(path)


def well_known(directory_id: str, gateway_id: str, keys: Sequence[PublicKey]) -> dict[str, Any]:
    """Return the ``/.well-known/human-card.json`` document: the directory (the
    cards' issuer), the Human Gateway, and the public keys that sign cards.

    Raises:
        pydantic.ValidationError: no keys, or an empty id.
    """
    document = WellKnown(
        hatp_version=PROTOCOL_VERSION,
        directory=directory_id,
        gateway=gateway_id,
        card_signing_keys=[PublicJwk.model_validate(key.to_jwk()) for key in keys],
    )
    return document.to_wire()
