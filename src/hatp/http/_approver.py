"""The approver page over HTTP: HTML pages, their script, and the page's own JSON endpoints.

Under ``/approve`` (docs/spec.md §27): the sign-in page, a person's inbox,
one ask, and the page that registers a passkey from an invitation; the
endpoints the page's script calls sit under ``/approve/api``. Who is asking
comes from the session cookie alone (:class:`~hatp.gateway.ApproverSessions`),
never from the request's body or query. Every request that changes
something must come from one of the page's own origins ([WEB-ORIGIN]: the
``Origin`` header), on top of the cookie's ``SameSite=Strict``, so no other
site can make a signed-in browser vote. The work is the roles':
:class:`~hatp.gateway.WebApprovals` for asks and votes,
:class:`~hatp.directory.PasskeyEnrolment` for passkeys; refusals travel as
typed errors with their status (:data:`~hatp.http.HTTP_STATUS`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any, Literal, TypeVar, cast

from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hatp import _checks
from hatp._edge_params import MAX_ASKED_WAIT_SECONDS
from hatp.clock import format_time
from hatp.directory import PasskeyEnrolment
from hatp.errors import (
    AskUnknown,
    HatpError,
    InvalidJson,
    InviteInvalid,
    OriginRefused,
    Unauthenticated,
)
from hatp.evidence import is_digest, parse_json
from hatp.gateway import AskProgress, WebApprovals
from hatp.gateway._web import MAX_WAIT_SECONDS
from hatp.http._api import DEFAULT_MAX_BODY_BYTES, read_body
from hatp.http._approver_views import ask_page, inbox_item, render, state_words
from hatp.http._errors import error_response, status_of
from hatp.model import WebAuthnKey, WireModel, first_error

__all__ = ["APPROVER_PATH", "SESSION_COOKIE", "approver_error_page", "approver_routes"]

#: Where the approver page is served.
APPROVER_PATH = "/approve"
#: The cookie that carries an approver's session token.
SESSION_COOKIE = "hatp_session"

_M = TypeVar("_M", bound=WireModel)
_R = TypeVar("_R")
_Page = Callable[[Request], Awaitable[Response]]

#: Sent with every page: no framing, no inline script, nothing cached, no referrer.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _Empty(WireModel):
    """A body with nothing in it."""


class _SignIn(WireModel):
    credential: dict[str, Any]


class _Invite(WireModel):
    invite: str = Field(min_length=1, max_length=256)


class _Enrol(_Invite):
    credential: dict[str, Any]


class _Decision(WireModel):
    decision: Literal["approve", "reject"]


class _Vote(_Decision):
    credential: dict[str, Any] | None = None


class _Answer(WireModel):
    value: Any


def approver_routes(
    web: WebApprovals,
    enrolment: PasskeyEnrolment | None = None,
    *,
    prefix: str = APPROVER_PATH,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    https: bool = False,
) -> list[BaseRoute]:
    """The approver page's routes under ``prefix`` (see the module docstring).

    ``enrolment``: registering passkeys from invitations; without it the
    registration page refuses every invitation (``INVITE_INVALID`` ``UNKNOWN``).
    ``https``: the page is served over https whatever a request's scheme says (behind
    a proxy that ends TLS), so the session cookie is always ``Secure``; else it is
    ``Secure`` on https requests.
    """
    return _ApproverPage(web, enrolment, prefix, max_body_bytes, https).routes()


class _ApproverPage:
    """The pages and the page's endpoints over one :class:`WebApprovals`."""

    def __init__(
        self,
        web: WebApprovals,
        enrolment: PasskeyEnrolment | None,
        prefix: str,
        max_body_bytes: int,
        https: bool = False,
    ) -> None:
        self.web = web
        self.sessions = web.sessions
        self.enrolment = enrolment
        self.prefix = prefix
        self.max_body_bytes = max_body_bytes
        self.https = https

    def routes(self) -> list[BaseRoute]:
        prefix = self.prefix
        api = [
            _api("POST", "/sign-in/options", self.sign_in_options),
            Route("/sign-in", _typed(self.sign_in), methods=["POST"]),
            Route("/sign-out", _typed(self.sign_out), methods=["POST"]),
            _api("POST", "/enrol/options", self.enrol_options),
            _api("POST", "/enrol", self.enrol_finish),
            _api("GET", "/inbox", self.inbox),
            _api("POST", "/asks/{ask_id}/options", self.vote_options),
            _api("POST", "/asks/{ask_id}/vote", self.vote),
            _api("POST", "/asks/{ask_id}/answer", self.answer),
            _api("POST", "/asks/{ask_id}/decline", self.decline),
        ]
        static = StaticFiles(directory=str(files("hatp.http").joinpath("static")))
        return [
            Route(prefix, self._html(self.home), methods=["GET"], name="hatp-approve"),
            Route(f"{prefix}/asks/{{ask_id}}", self._html(self.ask), methods=["GET"]),
            Route(f"{prefix}/link/{{token}}", self._html(self.link), methods=["GET"]),
            Route(f"{prefix}/enrol", self._html(self.enrol), methods=["GET"]),
            Mount(f"{prefix}/static", app=static, name="hatp-approve-static"),
            Mount(f"{prefix}/api", routes=api),
        ]

    # -- helpers ----------------------------------------------------------

    def page(self, template: str, status: int = 200, **context: Any) -> Response:
        """An HTML page, sent with the page's security headers."""
        gateway_id = self.web.gateway.gateway_id
        html = render(template, base=self.prefix, gateway_id=gateway_id, **context)
        return HTMLResponse(html, status_code=status, headers=_PAGE_HEADERS)

    async def who(self, request: Request) -> str:
        """The person the request's session names. [WEB-SESSION]

        Raises:
            Unauthenticated: no live session.
            StoreUnavailable: the store failed, or did not answer in time.
        """
        token = request.cookies.get(SESSION_COOKIE)
        return (await self.store(self.sessions.session, token)).human

    async def store(self, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)``, which uses the gateway's store, run off the event loop within
        the store's bound ([STORE-OFF-LOOP])."""
        return cast(_R, await self.web.gateway.asks.store.call(fn, *args))

    def secure(self, request: Request) -> bool:
        """Whether the session cookie is ``Secure``: the page is https, or the request
        is (its scheme as it arrived, or as a trusted proxy's ``X-Forwarded-Proto`` said)."""
        return self.https or request.url.scheme == "https"

    async def read(self, request: Request, model: type[_M]) -> _M:
        """The body of a request that changes something, once it passed [WEB-ORIGIN].

        Raises:
            OriginRefused: not from the page's origin.
            InvalidJson: not strict JSON, or does not fit ``model``.
            BodyTooLarge: larger than the server reads.
        """
        _check_origin(request, self.sessions.origins)
        body = await read_body(request, self.max_body_bytes)
        doc = parse_json(body) if body.strip() else {}
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            where, problem = first_error(exc)
            raise InvalidJson(
                f"the request does not fit {request.url.path}: /{where}: {problem}",
                where=f"/{where}",
            ) from None

    def _html(self, handler: _Page) -> _Page:
        """``handler``, with a hatp error it raises shown as an error page."""

        async def page(request: Request) -> Response:
            try:
                return await handler(request)
            except HatpError as error:
                return self.error_page(error, "This page cannot be shown")

        return page

    def error_page(self, error: HatpError, heading: str, human: str | None = None) -> Response:
        """The page that shows ``error``, with the status it travels with."""
        return self.page(
            "error.html",
            status_of(error),
            human=human,
            heading=heading,
            code=error.code,
            message=error.message,
        )

    # -- pages ------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        try:
            human = await self.who(request)
        except Unauthenticated as exc:
            reason = exc.message if exc.data.get("reason") == "ENDED" else None
            return self.page("sign_in.html", human=None, next="", reason=reason)
        items = [inbox_item(n) for n in await self.store(self.web.inbox, human)]
        version = await self.store(self.web.version, human)
        return self.page("inbox.html", human=human, items=items, version=version)

    async def ask(self, request: Request) -> Response:
        ask_id = request.path_params["ask_id"]
        try:
            human = await self.who(request)
        except Unauthenticated:
            here = f"{self.prefix}/asks/{ask_id}"
            return self.page("sign_in.html", 401, human=None, next=here, reason=None)
        try:
            notice, progress = await self.store(self.web.ask, ask_id, human)
        except AskUnknown as exc:
            return self.error_page(exc, "No such ask for you", human)
        context = ask_page(notice, progress, human, now=self.web.gateway.clock.now())
        return self.page("ask.html", human=human, **context)

    async def link(self, request: Request) -> Response:
        """[OUTBOX-LINK] a notice's single-use link: spent, then on to the ask's page
        (which signs the person in with their passkey first); a second opening is refused."""
        ask_id = await self.web.gateway.open_link(request.path_params["token"])
        headers = {**_PAGE_HEADERS, "Location": f"{self.prefix}/asks/{ask_id}"}
        return Response(status_code=303, headers=headers)

    async def enrol(self, request: Request) -> Response:
        return self.page("enrol.html", human=None)

    # -- signing in -------------------------------------------------------

    async def sign_in_options(self, request: Request) -> dict[str, Any]:
        await self.read(request, _Empty)
        return await self.store(self.sessions.sign_in_options)

    async def sign_in(self, request: Request) -> Response:
        """[WEB-SIGN-IN] the session's token goes to the browser once, as its cookie."""
        body = await self.read(request, _SignIn)
        signed = await self.store(self.sessions.sign_in, body.credential)
        session = signed.session
        response = JSONResponse(
            {"human": session.human, "expiresAt": format_time(session.expires_at)}
        )
        response.set_cookie(
            SESSION_COOKIE,
            signed.token,
            max_age=int((session.expires_at - session.created_at).total_seconds()),
            path=self.prefix,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )
        return response

    async def sign_out(self, request: Request) -> Response:
        await self.read(request, _Empty)
        await self.store(self.sessions.sign_out, request.cookies.get(SESSION_COOKIE))
        response = JSONResponse({})
        response.delete_cookie(
            SESSION_COOKIE,
            path=self.prefix,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )
        return response

    # -- registering a passkey ---------------------------------------------

    async def enrol_options(self, request: Request) -> dict[str, Any]:
        body = await self.read(request, _Invite)
        enrolment = _enrolling(self.enrolment)
        invite = await self.store(enrolment.invitation, body.invite)
        card = self.web.gateway.card(invite.human)
        return {
            "human": invite.human,
            "displayName": None if card is None else card.display_name,
            "options": await self.store(enrolment.options, body.invite),
        }

    async def enrol_finish(self, request: Request) -> dict[str, Any]:
        body = await self.read(request, _Enrol)
        card = await self.store(_enrolling(self.enrolment).register, body.invite, body.credential)
        kids = [key.kid for key in card.keys if isinstance(key, WebAuthnKey)]
        return {"human": card.id, "kid": kids[-1]}  # the new passkey is the card's last

    # -- asks -------------------------------------------------------------

    async def inbox(self, request: Request) -> dict[str, Any]:
        human = await self.who(request)
        if unknown := sorted(set(request.query_params) - {"since", "waitSeconds"}):
            raise InvalidJson(
                f"the inbox takes the query members since and waitSeconds, not {unknown[0]}",
                where=f"/{unknown[0]}",
            )
        since = request.query_params.get("since") or None
        if since is not None and not is_digest(since):
            raise InvalidJson(
                f"since is the version an inbox answer gave (sha256:…), not {since[:80]!r}",
                where="/since",
            )
        wait = _query_number(request, "waitSeconds", float) or 0.0
        if since is None:
            version = await self.store(self.web.version, human)
        else:
            version = await self.web.changed(human, since, min(wait, MAX_WAIT_SECONDS))
        asks = [_camel(inbox_item(n)) for n in await self.store(self.web.inbox, human)]
        return {"version": version, "asks": asks}

    async def vote_options(self, request: Request) -> dict[str, Any]:
        body = await self.read(request, _Decision)
        ask_id = request.path_params["ask_id"]
        return await self.store(
            self.web.vote_options, ask_id, await self.who(request), body.decision
        )

    async def vote(self, request: Request) -> dict[str, Any]:
        body = await self.read(request, _Vote)
        ask_id, human = request.path_params["ask_id"], await self.who(request)
        done = await self.web.vote(ask_id, human, body.decision, body.credential)
        return _progress(done, human)

    async def answer(self, request: Request) -> dict[str, Any]:
        body = await self.read(request, _Answer)
        ask_id, human = request.path_params["ask_id"], await self.who(request)
        return _progress(await self.web.answer(ask_id, human, body.value), human)

    async def decline(self, request: Request) -> dict[str, Any]:
        await self.read(request, _Empty)
        ask_id, human = request.path_params["ask_id"], await self.who(request)
        return _progress(await self.web.decline(ask_id, human), human)


def approver_error_page(
    web: WebApprovals, error: HatpError, prefix: str = APPROVER_PATH
) -> Response:
    """The approver page's HTML error page showing ``error``, with its status (a path
    under the page that no route serves, say)."""
    page = _ApproverPage(web, None, prefix, DEFAULT_MAX_BODY_BYTES)
    return page.error_page(error, "This page cannot be shown")


def _check_origin(request: Request, origins: tuple[str, ...]) -> None:
    """[WEB-ORIGIN] a request that changes something comes from the page's own origin."""
    origin = request.headers.get("origin")
    if origin not in origins and _checks.is_on("WEB-ORIGIN"):
        raise OriginRefused(
            f"this request came from {origin or 'no named origin'}, not from the approver "
            f"page ({', '.join(origins)}); nothing was done: use the page",
            origin=origin,
        )


def _enrolling(enrolment: PasskeyEnrolment | None) -> PasskeyEnrolment:
    if enrolment is None:
        raise InviteInvalid(
            "this server registers no passkeys (it holds no directory key): ask whoever "
            "runs the directory",
            reason="UNKNOWN",
        )
    return enrolment


def _api(method: str, path: str, handler: Callable[[Request], Awaitable[dict[str, Any]]]) -> Route:
    async def endpoint(request: Request) -> Response:
        return JSONResponse(await handler(request))

    return Route(path, _typed(endpoint), methods=[method])


def _typed(endpoint: _Page) -> _Page:
    """The endpoint, with every hatp error answered as its typed JSON and status."""

    async def answering(request: Request) -> Response:
        try:
            return await endpoint(request)
        except HatpError as error:
            return error_response(error)

    return answering


def _query_number(request: Request, name: str, kind: type[int] | type[float]) -> float | None:
    """A query member that is a number that is not negative, or ``None`` when absent.

    Raises:
        InvalidJson: it is not such a number.
    """
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        value = kind(text)
    except ValueError:
        raise InvalidJson(f"{name} is a number, not {text!r}", where=f"/{name}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_ASKED_WAIT_SECONDS:
        raise InvalidJson(
            f"{name} is a number from 0 to {MAX_ASKED_WAIT_SECONDS:g}, not {text[:40]!r}",
            where=f"/{name}",
        )
    return value


def _camel(item: dict[str, Any]) -> dict[str, Any]:
    return {_to_camel(k): v for k, v in item.items()}


def _to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _progress(done: AskProgress, human: str) -> dict[str, Any]:
    """The JSON form of an :class:`~hatp.gateway.AskProgress`, with the line the page
    shows ``human`` for it."""
    return {
        "askId": done.ask_id,
        "state": done.state.value,
        "stateWords": state_words(done, human),
        "decision": done.decision,
        "reason": done.reason,
        "answeredBy": done.answered_by,
        "people": [
            {"id": p.id, "status": p.status, "decision": p.decision, "detail": p.detail}
            for p in done.people
        ],
    }
