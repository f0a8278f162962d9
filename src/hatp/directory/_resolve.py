"""Resolving an address to ranked candidates, and everyone passed over with the rule why.

Pure functions over cards: the directory (file-backed now, store-backed
later) only supplies the cards. Each exclusion rule is one row of
:data:`RULES`, tried in that order; the first that excludes a person is the
one recorded. Every rule asks :func:`hatp._checks.is_on` with its
requirement id before it excludes, so the switch-off tests can prove it is
the rule, and nothing else, that excludes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction

from hatp import _checks
from hatp.errors import AddressInvalid
from hatp.model import Address, AddressKind, HumanCard, Status


class ExclusionRule(StrEnum):
    """Why a person the address matched is not a candidate (the wire ``rule``)."""

    SKILL = "skill"
    SEPARATION_OF_DUTIES = "separation-of-duties"
    AUTHORITY = "authority"
    PASSKEY = "passkey"
    OFFLINE = "offline"
    CAPACITY = "capacity"


@dataclass(frozen=True, slots=True)
class Ask:
    """What a resolution is for: the action, the amounts per currency, and who is asking."""

    address: Address
    action: str
    amounts: Mapping[str, Decimal]
    on_behalf_of: str
    initiator_principal: str | None
    deadline_seconds: float | None
    passkey_required: bool
    #: The exclusion rules that apply (all of :data:`RULES` when ``None``).
    rules: frozenset[ExclusionRule] | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A person who may be asked, with what ranked them."""

    id: str
    card: HumanCard
    status: Status
    load: Fraction
    sla_fits: bool


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A person the address matched who is not a candidate, and the rule that excluded them."""

    id: str
    rule: ExclusionRule
    detail: str

    def to_json(self) -> dict[str, str]:
        """Return the wire form ``{id, result: "excluded", rule, detail}``."""
        return {"id": self.id, "result": "excluded", "rule": self.rule.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Resolution:
    """Ranked candidates, everyone passed over, and how many distinct people are needed."""

    address: Address
    candidates: tuple[Candidate, ...]
    excluded: tuple[Exclusion, ...]

    @property
    def needed(self) -> int:
        """N of the address's quorum N-of-M (1 when it names none)."""
        return self.address.quorum[0]

    @property
    def enough(self) -> bool:
        """Whether there are at least :attr:`needed` candidates."""
        return len(self.candidates) >= self.needed

    @property
    def candidate_ids(self) -> list[str]:
        """The candidates' ids, best first."""
        return [c.id for c in self.candidates]


Rule = Callable[[HumanCard, Ask], "str | None"]


def _skill(card: HumanCard, ask: Ask) -> str | None:
    skill = ask.address.skill
    return None if skill is None or skill in card.skills else f"no skill {skill}"


def _separation(card: HumanCard, ask: Ask) -> str | None:
    if card.id == ask.on_behalf_of:
        return "the agent acts on their behalf"
    if card.id == ask.initiator_principal:
        return "they are the initiator's principal"
    return None


def _authority(card: HumanCard, ask: Ask) -> str | None:
    limits = card.limits(ask.action)
    if not limits:
        return f"no authority for {ask.action}"
    for currency in sorted(ask.amounts):
        amount = ask.amounts[currency]
        # Currencies are never converted: no limit in this currency covers nothing.
        if currency not in limits:
            return f"no limit in {currency} for {ask.action}"
        if limits[currency] < amount:
            return f"limit {limits[currency]} {currency} < {amount} {currency}"
    return None


def _passkey(card: HumanCard, ask: Ask) -> str | None:
    if ask.passkey_required and not card.has_passkey:
        return "the group requires a passkey and the card has no webauthn key"
    return None


def _offline(card: HumanCard, ask: Ask) -> str | None:
    return "status offline" if card.availability.status is Status.OFFLINE else None


def _capacity(card: HumanCard, ask: Ask) -> str | None:
    capacity = card.capacity
    if capacity.open >= capacity.max_open:
        return f"open {capacity.open} >= maxOpen {capacity.max_open}"
    return None


#: Every exclusion rule, its requirement id, and its check, in the order they are tried.
RULES: tuple[tuple[ExclusionRule, str, Rule], ...] = (
    (ExclusionRule.SKILL, "DIR-SKILL", _skill),
    (ExclusionRule.SEPARATION_OF_DUTIES, "DIR-SOD", _separation),
    (ExclusionRule.AUTHORITY, "DIR-AUTHORITY", _authority),
    (ExclusionRule.PASSKEY, "DIR-PASSKEY", _passkey),
    (ExclusionRule.OFFLINE, "DIR-OFFLINE", _offline),
    (ExclusionRule.CAPACITY, "DIR-CAPACITY", _capacity),
)

_STATUS_RANK = {Status.AVAILABLE: 0, Status.BUSY: 1, Status.AWAY: 2, Status.OFFLINE: 3}


def matches(card: HumanCard, address: Address) -> bool:
    """Return whether ``address`` names the card's person (same org; the person,
    a holder of the role, or a member of the pool)."""
    own = card.address
    if own.org != address.org:
        return False
    if address.kind is AddressKind.PERSON:
        return own.name == address.name
    if address.kind is AddressKind.ROLE:
        return address.name in card.roles
    return address.kind is AddressKind.POOL and address.name in card.pools


def resolve_cards(cards: Iterable[HumanCard], ask: Ask) -> Resolution:
    """Resolve ``ask`` over ``cards``: candidates ranked best first, exclusions by id.

    Raises:
        AddressInvalid: reason ``NOT_HUMAN``: the address is an agent's.
    """
    if not ask.address.is_human:
        raise AddressInvalid(
            f"{ask.address} is an agent's address; only human:// addresses resolve to people",
            reason="NOT_HUMAN",
            address=str(ask.address),
        )
    candidates: list[Candidate] = []
    excluded: list[Exclusion] = []
    for card in sorted(cards, key=lambda c: c.id):
        if not matches(card, ask.address):
            continue
        exclusion = _first_exclusion(card, ask)
        if exclusion is not None:
            excluded.append(exclusion)
            continue
        capacity = card.capacity
        load = Fraction(capacity.open, capacity.max_open) if capacity.max_open else Fraction(1)
        fits = ask.deadline_seconds is None or card.sla.decide_seconds <= ask.deadline_seconds
        candidates.append(Candidate(card.id, card, card.availability.status, load, fits))
    # [DIR-RANK] available before busy before away, lighter load, an SLA that
    # fits the deadline, then by id (the sort is stable over id order).
    candidates.sort(key=lambda c: (_STATUS_RANK[c.status], c.load, not c.sla_fits))
    return Resolution(ask.address, tuple(candidates), tuple(excluded))


def _first_exclusion(card: HumanCard, ask: Ask) -> Exclusion | None:
    for rule, check_id, check in RULES:
        if ask.rules is not None and rule not in ask.rules:
            continue
        detail = check(card, ask)
        if detail is not None and _checks.is_on(check_id):
            return Exclusion(card.id, rule, detail)
    return None
