"""The Directory's JSON API: resolve an address, read the cards, the well-known document.

``directory/resolve`` answers as the MCP binding's (:func:`hatp._edge_params.resolve_answer`);
the cards are served exactly as the directory signed them, so a reader
verifies each against its own keyring before use. ``/.well-known/human-card.json``
is the organisation's :class:`~hatp.model.WellKnown` document (docs/spec.md §17),
``/.well-known/hatp-keys.json`` its signed key set, byte for byte (§4 [KEYSET-SERVE]).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp._edge_params import HatpParams, ResolveAnswer, ResolveParams, resolve_answer
from hatp.clock import Clock, SystemClock, parse_time
from hatp.directory import Directory
from hatp.errors import CardUnknown, HatpError
from hatp.evidence import parse_json
from hatp.http._api import JSON_MEDIA_TYPE, Operation
from hatp.model import KEYSET_PATH, WELL_KNOWN_PATH, HumanCard, KeySet, WellKnown, WireModel

__all__ = [
    "CardParams",
    "DirectoryAnswer",
    "NoParams",
    "directory_operations",
    "key_set_route",
    "well_known_route",
]

#: The longest a reader may cache the key set, in seconds ([KEYSET-SERVE]): a rotation or
#: revocation reaches partners within this, or by the set's expiry if that comes first.
MAX_KEY_SET_AGE = 3600


class NoParams(HatpParams):
    """A request that takes nothing."""


class DirectoryAnswer(WireModel):
    """A directory file: the issuer and every card as it signed them."""

    hatp_version: str
    issuer: str
    cards: list[HumanCard]


class CardParams(HatpParams):
    """One card, by its id (``human://org/name``)."""

    card_id: str = Field(min_length=1, max_length=2048)


def directory_operations(directory: Directory, prefix: str = "/directory") -> list[Operation]:
    """The directory's operations under ``prefix`` (see docs/spec.md §25)."""

    async def resolve(params: ResolveParams) -> dict[str, Any]:
        return resolve_answer(directory, params)

    async def cards(_: NoParams) -> dict[str, Any]:
        return directory.to_json()

    async def card(params: CardParams) -> dict[str, Any]:
        try:
            return directory.signed(params.card_id)
        except KeyError:
            raise CardUnknown(
                f"the directory {directory.issuer} has no card {params.card_id!r}",
                card=params.card_id,
            ) from None

    return [
        Operation(
            "POST",
            f"{prefix}/resolve",
            "directory/resolve",
            "Resolve an address to ranked candidates and everyone passed over",
            ResolveParams,
            resolve,
            ResolveAnswer,
            ("ADDRESS_INVALID",),
        ),
        Operation(
            "GET",
            f"{prefix}/cards",
            "directory/cards",
            "Every card, as a directory file {hatpVersion, issuer, cards}",
            NoParams,
            cards,
            DirectoryAnswer,
            (),
            mcp=False,
        ),
        Operation(
            "GET",
            f"{prefix}/cards/{{cardId:path}}",
            "directory/card",
            "One Human Card, as its directory signed it",
            CardParams,
            card,
            HumanCard,
            ("CARD_UNKNOWN",),
            mcp=False,
        ),
    ]


def well_known_route(document: Mapping[str, Any]) -> Route:
    """``GET /.well-known/human-card.json``: ``document``, once it is a WellKnown.

    Raises:
        ValueError: ``document`` is not a WellKnown document.
    """
    try:
        body = WellKnown.model_validate(document).to_wire()
    except ValidationError as exc:
        raise ValueError(f"not a WellKnown document: {exc.errors()[0]['msg']}") from None

    async def endpoint(_: Request) -> Response:
        return JSONResponse(body)

    return Route(WELL_KNOWN_PATH, endpoint, methods=["GET"], name="hatp-well-known")


def key_set_route(document: bytes, clock: Clock | None = None) -> Route:
    """``GET /.well-known/hatp-keys.json``: ``document``, the exact bytes, once they are a
    key set's form. ``Cache-Control`` lets a reader keep it at most an hour, and never
    past its ``expiresAt`` on ``clock`` (default: the system's). Whether it verifies
    is the caller's to check first (``hatp serve`` does, at start).

    Raises:
        ValueError: ``document`` is not a key set of the KeySet form.
    """
    try:
        expires_at = parse_time(KeySet.model_validate(parse_json(document)).expires_at)
    except (HatpError, ValidationError) as exc:
        raise ValueError(f"not a key set: {str(exc).splitlines()[0]}") from None
    now = (clock or SystemClock()).now

    async def endpoint(_: Request) -> Response:
        left = int((expires_at - now()).total_seconds())
        age = max(0, min(MAX_KEY_SET_AGE, left))
        headers = {"Cache-Control": f"public, max-age={age}"}
        return Response(document, media_type=JSON_MEDIA_TYPE, headers=headers)

    return Route(KEYSET_PATH, endpoint, methods=["GET"], name="hatp-key-set")
