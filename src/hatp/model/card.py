"""The Human Card: who a person is to routing, signed by their directory.

A card says what a person may approve (``authority``), how to reach them
(channel types only, never contact details), whether they are around
(``availability``, ``sla``, ``capacity``), who takes over (``delegates``) and
their public keys. The directory signs it (docs/spec.md §5, §17); the
signature and issuer checks live in :mod:`hatp.directory`. This module only
checks the form: :func:`parse_card` refuses anything else with
``CARD_INVALID`` reason ``SHAPE``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from decimal import Decimal
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, Literal, TypeVar
from zoneinfo import available_timezones

from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, EllipticCurvePublicNumbers
from pydantic import AfterValidator, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from hatp.errors import AddressInvalid, CardInvalid, VersionUnsupported
from hatp.model._base import Kid, WireModel, first_error
from hatp.model.address import Address, AddressKind, parse_address
from hatp.model.keys import PublicJwk
from hatp.model.plan import Amount
from hatp.model.signature import Signature
from hatp.version import require_supported

__all__ = [
    "WELL_KNOWN_PATH",
    "Authority",
    "Availability",
    "Capacity",
    "CardKey",
    "Channel",
    "HumanCard",
    "HumanCardBody",
    "Sla",
    "Status",
    "WebAuthnKey",
    "WellKnown",
    "parse_card",
    "parse_card_body",
]

#: Where an organisation publishes its directory, gateway and card-signing keys.
WELL_KNOWN_PATH = "/.well-known/human-card.json"
_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_B64_32 = r"^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$"
_TZ_RE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*")
#: Names in the tz database that are not places: refused as a card's timezone.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})

Name = Annotated[str, StringConstraints(pattern=_NAME)]
Action = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9._/-]{0,127}$")]


def _person(value: str) -> str:
    try:
        address = parse_address(value)
    except AddressInvalid as exc:
        raise PydanticCustomError("ADDRESS_INVALID", "{msg}", {"msg": exc.message}) from None
    if address.kind is not AddressKind.PERSON:
        raise PydanticCustomError(
            "NOT_A_PERSON", "{value} is not a person's address (human://org/name)", {"value": value}
        )
    return value


PersonAddress = Annotated[str, AfterValidator(_person)]


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_ZONES


def _timezone(value: str) -> str:
    if not _TZ_RE.fullmatch(value) or value not in _zones():
        raise PydanticCustomError(
            "TIMEZONE",
            "timezone {value!r} is not an IANA time zone name like 'America/New_York'",
            {"value": value},
        )
    return value


class Channel(StrEnum):
    """A kind of channel a person can be asked on. Contact details stay in the gateway."""

    SLACK = "slack"
    SMS = "sms"
    VOICE = "voice"
    EMAIL = "email"
    WEBHOOK = "webhook"
    TERMINAL = "terminal"
    WEB = "web"


class Status(StrEnum):
    """Whether a person is around: routing prefers available, then busy, then away."""

    AVAILABLE = "available"
    BUSY = "busy"
    AWAY = "away"
    OFFLINE = "offline"


class Authority(WireModel):
    """What a person may approve: an action, up to an amount in one currency."""

    action: Action
    max_amount: Amount


class Availability(WireModel):
    """Where a person's day is (an IANA time zone) and whether they are around."""

    timezone: Annotated[str, AfterValidator(_timezone)]
    status: Status = Field(strict=False)


class Sla(WireModel):
    """How long a person usually takes to decide."""

    decide_seconds: int = Field(gt=0, le=31_536_000)


class Capacity(WireModel):
    """How many asks a person takes at once, and how many they have open now."""

    max_open: int = Field(ge=0, le=1_000_000)
    open: int = Field(ge=0, le=1_000_000)


class WebAuthnKey(WireModel):
    """A passkey's public key (WebAuthn, ES256 on P-256)."""

    kid: Kid
    use: Literal["webauthn"]
    kty: Literal["EC"]
    crv: Literal["P-256"]
    x: str = Field(pattern=_B64_32, description="32 bytes, base64url")
    y: str = Field(pattern=_B64_32, description="32 bytes, base64url")
    credential_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,1366}$", description="base64url")
    rp_id: str = Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")

    @model_validator(mode="after")
    def _on_the_curve(self) -> WebAuthnKey:
        x, y = (int.from_bytes(base64.urlsafe_b64decode(v + "="), "big") for v in (self.x, self.y))
        try:
            EllipticCurvePublicNumbers(x, y, SECP256R1()).public_key()
        except ValueError:
            raise PydanticCustomError(
                "NOT_ON_CURVE", "key {kid}: (x, y) is not a point on P-256", {"kid": self.kid}
            ) from None
        return self


#: A key on a card: an Ed25519 JWK (``kty: OKP``) or a passkey (``kty: EC``).
CardKey = Annotated[PublicJwk | WebAuthnKey, Field(discriminator="kty")]


def _unique(values: list[str], what: str) -> None:
    if len(values) != len(set(values)):
        raise PydanticCustomError("DUPLICATE", "{what} lists a value twice", {"what": what})


class HumanCardBody(WireModel):
    """A Human Card before the directory signs it (see :class:`HumanCard`)."""

    hatp_version: str
    id: PersonAddress
    display_name: str = Field(min_length=1, max_length=200)
    roles: list[Name] = Field(default_factory=list, max_length=64)
    pools: list[Name] = Field(default_factory=list, max_length=64)
    skills: list[Name] = Field(default_factory=list, max_length=64)
    authority: list[Authority] = Field(default_factory=list, max_length=64)
    channels: list[Annotated[Channel, Field(strict=False)]] = Field(
        default_factory=list, max_length=8
    )
    availability: Availability
    sla: Sla
    capacity: Capacity
    delegates: list[PersonAddress] = Field(default_factory=list, max_length=16)
    keys: list[CardKey] = Field(default_factory=list, max_length=16)
    issuer: str = Field(min_length=1, max_length=512)

    @model_validator(mode="after")
    def _rules(self) -> HumanCardBody:
        for what, values in (
            ("roles", self.roles),
            ("pools", self.pools),
            ("skills", self.skills),
            ("channels", [c.value for c in self.channels]),
            ("delegates", self.delegates),
            ("keys (kid)", [k.kid for k in self.keys]),
            ("authority (action, currency)", [_grant(a) for a in self.authority]),
        ):
            _unique(values, what)
        if self.id in self.delegates:
            raise PydanticCustomError("SELF_DELEGATE", "a card does not name itself a delegate")
        return self

    @property
    def address(self) -> Address:
        """The card's id as a parsed address."""
        return parse_address(self.id)

    @property
    def has_passkey(self) -> bool:
        """Whether the card holds a WebAuthn key."""
        return any(isinstance(key, WebAuthnKey) for key in self.keys)

    def limits(self, action: str) -> dict[str, Decimal]:
        """Return the person's limit per currency for ``action`` (empty: no authority)."""
        return {
            a.max_amount.currency: a.max_amount.decimal
            for a in self.authority
            if a.action == action
        }


def _grant(entry: Authority) -> str:
    return f"{entry.action} {entry.max_amount.currency}"


class HumanCard(HumanCardBody):
    """A Human Card as the directory signed it: the body plus ``signature`` (§5)."""

    signature: Signature


_Card = TypeVar("_Card", bound=HumanCardBody)


class WellKnown(WireModel):
    """``/.well-known/human-card.json``: an organisation's directory, gateway and the
    keys that sign its Human Cards."""

    hatp_version: str
    directory: str = Field(min_length=1, max_length=512, description="the cards' issuer")
    gateway: str = Field(min_length=1, max_length=512, description="the Human Gateway's id")
    card_signing_keys: list[PublicJwk] = Field(min_length=1, max_length=16)


def parse_card(doc: Mapping[str, Any] | HumanCard) -> HumanCard:
    """Check the form of a signed Human Card (not its signature); return it.

    Raises:
        CardInvalid: reason ``SHAPE``, with ``data.where`` a JSON Pointer.
    """
    if isinstance(doc, HumanCard):
        return doc
    return _parse(HumanCard, doc)


def parse_card_body(doc: Mapping[str, Any]) -> HumanCardBody:
    """Check the form of an unsigned Human Card; return it.

    Raises:
        CardInvalid: reason ``SHAPE``, with ``data.where`` a JSON Pointer.
    """
    return _parse(HumanCardBody, doc)


def _parse(model: type[_Card], doc: Mapping[str, Any]) -> _Card:
    if not isinstance(doc, Mapping):
        raise CardInvalid("a Human Card is a JSON object", reason="SHAPE", card=None)
    card_id = doc.get("id") if isinstance(doc.get("id"), str) else None
    try:
        require_supported(doc, "Human Card")
        return model.model_validate(doc)
    except VersionUnsupported as exc:
        raise CardInvalid(exc.message, reason="SHAPE", card=card_id, where="/hatpVersion") from None
    except ValidationError as exc:
        path, msg = first_error(exc)
        where = "/" + path
        raise CardInvalid(
            f"card {card_id or '(no id)'}: {where}: {msg}",
            reason="SHAPE",
            card=card_id,
            where=where,
        ) from None
