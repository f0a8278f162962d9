"""The JSON API's machinery: one table of operations, read into routes and into OpenAPI.

An :class:`Operation` names a role method's HTTP form: its method and path,
the params model it takes (the MCP binding's, from :mod:`hatp._edge_params`),
which members come from the path and the query, and what it answers. Its
params are assembled from the path, the query and the JSON body into one
object and read with that model, so a request has one shape on every edge.
:func:`routes` makes the Starlette routes; ``hatp.http._openapi`` describes
the same table. A handler only calls the role and returns its answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatp import _checks
from hatp._edge_params import HatpParams
from hatp.errors import (
    BodyTooLarge,
    HatpError,
    InvalidJson,
    Unauthenticated,
    UnsupportedMediaType,
)
from hatp.evidence import parse_json
from hatp.http._callers import ApiCallers, NamesAgent, Owner, acts_on_own, speaks_for
from hatp.http._errors import error_response
from hatp.http._signed import SIGNATURE_HEADER, SignedCallers
from hatp.model import first_error

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "JSON_MEDIA_TYPE",
    "Carrying",
    "Operation",
    "OwnedBy",
    "read_body",
    "request_target",
    "require_json",
    "routes",
]

#: The request scope's member naming who called (a bearer token or a signature), for the log.
CALLER_SCOPE = "hatp.caller"
#: The request scope's member naming the code a request was refused with, for the metrics.
ERROR_SCOPE = "hatp.error"

_log = logging.getLogger(__name__)

#: The largest request body the API reads by default, in bytes (1 MiB).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
#: The one media type the JSON API reads ([HTTP-MEDIA-TYPE]).
JSON_MEDIA_TYPE = "application/json"

#: An operation's work: the params read (and, with ``takes_caller``, ``by=`` the caller
#: the request authenticated as, or ``None``), the answer's JSON members.
Handler = Callable[..., Awaitable[Mapping[str, Any]]]
#: The agent whose ask or transaction a request reads or changes, from its params.
#:
#: Raises:
#:     HatpError: there is no such ask or transaction (the role's own refusal).
OwnedBy = Callable[[Any], Awaitable[Owner]]

_PATH_MEMBER = re.compile(r"\{([A-Za-z]+)(?::path)?\}")
_NUMBER = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")


@dataclass(frozen=True)
class Carrying:
    """An answer that carries signed documents as they were signed: ``{member: one of
    models}``, or ``{}`` when ``member`` is ``None``. Only OpenAPI reads it."""

    member: str | None
    models: tuple[type[BaseModel], ...] = ()


@dataclass(frozen=True)
class Operation:
    """One route of the API and the role method it carries.

    ``path`` names its path members as ``{askId}`` (wire names; ``{cardId:path}``
    takes slashes too); ``query`` the members read from the query string (a JSON
    number or ``true``/``false`` there is read as one, anything else as text);
    ``fixed`` members the route itself sets (``kind`` of an answered poll);
    every other member of ``params`` comes from the JSON body (POST). ``answer``
    describes the success body for OpenAPI: a model, or a :class:`Carrying`;
    ``refusals`` the hatp error codes it may answer with.
    """

    method: str
    path: str
    name: str
    summary: str
    params: type[HatpParams]
    handler: Handler
    answer: type[BaseModel] | Carrying
    refusals: tuple[str, ...]
    query: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    status: int = 200
    location: Callable[[Mapping[str, Any]], str] | None = None
    #: Whether ``name`` is an MCP method of the binding (else the route's own name).
    mcp: bool = True
    #: When not ``mcp``: what OpenAPI says instead (default: the cards are resources).
    mcp_note: str | None = None
    #: The agent a request speaks for, from its params: an agent's token must be that
    #: agent's ([API-CALLER]).
    names_agent: NamesAgent | None = None
    #: Whose ask or transaction the request reads or changes: an agent's token acts only
    #: on its own ([API-OWNER]).
    owned_by: OwnedBy | None = None
    #: Whether the handler is told who called (``by=``): what it records names them.
    takes_caller: bool = False

    @property
    def path_members(self) -> tuple[str, ...]:
        """The wire names of the members this operation reads from its path."""
        return tuple(_PATH_MEMBER.findall(self.path))

    @property
    def body_members(self) -> tuple[str, ...]:
        """The wire names of the members this operation reads from its JSON body."""
        if self.method != "POST":
            return ()
        taken = {*self.path_members, *self.query, *self.fixed}
        return tuple(n for n in _wire_names(self.params) if n not in taken)

    async def read(
        self, request: Request, max_body_bytes: int, *, body: bytes | None = None
    ) -> HatpParams:
        """This operation's params, from ``request``'s path, query and body (``body``:
        the body's bytes when already read, else it is read here).

        Raises:
            InvalidJson: the body is not strict JSON or not an object, a member comes
                twice or from the wrong place, or the params do not fit their model
                (``data.where`` names the member).
            BodyTooLarge: the body is larger than ``max_body_bytes``.
        """
        members: dict[str, Any] = {}
        if self.method == "POST":
            if body is None:
                body = await read_body(request, max_body_bytes)
            doc = {} if not body.strip() else parse_json(body)
            if not isinstance(doc, dict):
                raise InvalidJson("the request body is a JSON object", where="")
            for name in doc:
                if name not in self.body_members and name in _wire_names(self.params):
                    raise InvalidJson(
                        f"{name} is given in the path or the query of {self.path}, not in the body",
                        where=f"/{name}",
                    )
            members.update(doc)
        for name, text in request.query_params.multi_items():
            if name not in self.query:
                raise InvalidJson(
                    f"{self.method} {self.path} takes no query member {name!r}"
                    + (f"; it takes {', '.join(self.query)}" if self.query else ""),
                    where=f"/{name}",
                )
            if name in members:
                raise InvalidJson(f"{name} is given twice in the query", where=f"/{name}")
            members[name] = _query_value(name, text)
        members.update(request.path_params)
        members.update(self.fixed)
        return _validated(self.params, members, f"{self.method} {self.path}")

    def route(
        self,
        max_body_bytes: int,
        callers: ApiCallers | None = None,
        signed: SignedCallers | None = None,
    ) -> Route:
        """The Starlette route that reads the params, calls the handler and renders;
        with ``callers``, only for a request whose bearer token names one of them; with
        ``signed``, only for a request signed by one of its callers' keys ([API-SIGNED]);
        with both, for either."""

        async def endpoint(request: Request) -> Response:
            try:
                signing = signed is not None and SIGNATURE_HEADER in request.headers
                caller = None if signing else _bearer_caller(request, callers, signed)
                request.scope[CALLER_SCOPE] = caller  # the log names who called
                if self.method == "POST":
                    require_json(request)
                body = None
                if signed is not None and signing:
                    # The signature covers the bytes the params are read from.
                    body = await read_body(request, max_body_bytes)
                    caller = signed.verify(
                        request.method, request_target(request), request.headers, body
                    )
                    request.scope[CALLER_SCOPE] = caller
                params = await self.read(request, max_body_bytes, body=body)
                if caller is not None and self.names_agent is not None:
                    speaks_for(caller, self.names_agent(params))
                if caller is not None and self.owned_by is not None:
                    acts_on_own(caller, await self.owned_by(params))
                done = (
                    self.handler(params, by=caller) if self.takes_caller else self.handler(params)
                )
                answer = dict(await done)
            except HatpError as error:
                request.scope[ERROR_SCOPE] = error.code
                return error_response(error)
            headers = None if self.location is None else {"Location": self.location(answer)}
            return JSONResponse(answer, status_code=self.status, headers=headers)

        name = f"hatp {self.method} {self.path}"
        return Route(self.path, endpoint, methods=[self.method], name=name)


def routes(
    operations: Sequence[Operation],
    max_body_bytes: int,
    callers: ApiCallers | None = None,
    signed: SignedCallers | None = None,
) -> list[Route]:
    """The Starlette routes of ``operations`` (with ``callers`` or ``signed``: for their
    callers alone)."""
    return [op.route(max_body_bytes, callers, signed) for op in operations]


def request_target(request: Request) -> str:
    """The path and query of ``request`` as it arrived (percent-encoding kept): what a
    request signature covers ([API-SIGNED])."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.scope["path"])
    query = request.scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path


def _bearer_caller(
    request: Request, callers: ApiCallers | None, signed: SignedCallers | None
) -> str | None:
    """Who sent an unsigned request, by its bearer token (``None``: the API is open).

    Raises:
        Unauthenticated: ``data.reason`` ``NO_TOKEN`` or ``BAD_TOKEN`` ([API-TOKEN]);
            ``NO_TOKEN`` too when only signed requests are taken ([API-SIGNED]).
    """
    signing = (
        "a request signed with your organisation's published key (Hatp-Caller, Hatp-Key-Id, "
        "Hatp-Timestamp, Hatp-Signature)"
    )
    if callers is None:
        if signed is None:
            return None
        raise Unauthenticated(f"this API takes only {signing}", reason="NO_TOKEN")
    try:
        return callers.caller(request)
    except Unauthenticated as exc:
        if signed is None or exc.data.get("reason") != "NO_TOKEN":
            raise
        raise Unauthenticated(f"{exc.message}; or {signing}", reason="NO_TOKEN") from None


def require_json(request: Request) -> None:
    """Refuse a request whose body is not declared ``application/json`` (parameters such as
    ``charset`` allowed), before the body is read. [HTTP-MEDIA-TYPE]

    A form another site's page posts (``application/x-www-form-urlencoded``,
    ``multipart/form-data``, ``text/plain``, or no type at all) never reaches an
    operation; a browser sends ``application/json`` across sites only after a CORS
    preflight, which this server never grants.

    Raises:
        UnsupportedMediaType: another media type, or none.
    """
    named = request.headers.get("content-type")
    media = (named or "").split(";", 1)[0].strip().lower()
    if media != JSON_MEDIA_TYPE and _checks.is_on("HTTP-MEDIA-TYPE"):
        _log.info("refused %s %s: content type %r", request.method, request.url.path, named)
        raise UnsupportedMediaType(
            f"{request.method} {request.url.path} takes a JSON body sent as Content-Type: "
            f"{JSON_MEDIA_TYPE}, not {named[:100] if named else 'no content type'}; "
            "nothing was read",
            content_type=None if named is None else named[:200],
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, read as streamed.

    Raises:
        BodyTooLarge: larger than ``limit`` bytes, declared or as streamed.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"the request body is larger than the {limit} bytes this server reads; "
        "nothing ran: send a smaller one",
        limit=limit,
    )


def _query_value(name: str, text: str) -> Any:
    """A query member's value: a JSON number or ``true``/``false`` as one, else the text.

    Raises:
        InvalidJson: a number the strict reader refuses (an integer past ±(2**53-1),
            a double that overflows), naming the member. [HTTP-NUMBERS]
    """
    if _NUMBER.match(text):
        try:
            return parse_json(text.encode())
        except InvalidJson as exc:
            _log.info("refused query member %s: %s", name, exc.message[:200])
            raise InvalidJson(
                f"{name} is a number the JSON API reads (an integer within ±(2**53-1), a "
                f"finite double), not {text[:40]}{'…' if len(text) > 40 else ''}",
                where=f"/{name}",
            ) from None
    if text in ("true", "false"):
        return text == "true"
    return text


def _wire_names(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _validated(model: type[HatpParams], members: Mapping[str, Any], label: str) -> HatpParams:
    try:
        return model.model_validate(members)
    except ValidationError as exc:
        where, problem = first_error(exc)
        raise InvalidJson(
            f"the request does not fit {label}: /{where}: {problem}",
            where="/" + where,
        ) from None
