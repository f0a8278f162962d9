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

from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hatp import _checks
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
from hatp.evidence import parse_json
from hatp.gateway import AskProgress, WebApprovals
from hatp.gateway._web import MAX_WAIT_SECONDS
from hatp.http._api import DEFAULT_MAX_BODY_BYTES, read_body
from hatp.http._approver_views import ask_page, inbox_item, render, state_words
from hatp.http._errors import error_response, status_of
from hatp.model import WireModel, first_error

__all__ = ["APPROVER_PATH", "SESSION_COOKIE", "approver_routes"]

#: Where the approver page is served.
APPROVER_PATH = "/approve"
#: The cookie that carries an approver's session token.
SESSION_COOKIE = "hatp_session"

_M = TypeVar("_M", bound=WireModel)
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
) -> list[BaseRoute]:
    """The approver page's routes under ``prefix`` (see the module docstring).

    ``enrolment``: registering passkeys from invitations; without it the
    registration page refuses every invitation (``INVITE_INVALID`` ``UNKNOWN``).
    """
    sessions = web.sessions
    gateway_id = web.gateway.gateway_id

    def page(template: str, request: Request, status: int = 200, **context: Any) -> Response:
        html = render(template, base=prefix, gateway_id=gateway_id, **context)
        return HTMLResponse(html, status_code=status, headers=_PAGE_HEADERS)

    def who(request: Request) -> str:
        return sessions.session(request.cookies.get(SESSION_COOKIE)).human

    async def read(request: Request, model: type[_M]) -> _M:
        _check_origin(request, sessions.origins)
        body = await read_body(request, max_body_bytes)
        doc = parse_json(body) if body.strip() else {}
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            where, problem = first_error(exc)
            raise InvalidJson(
                f"the request does not fit {request.url.path}: /{where}: {problem}",
                where=f"/{where}",
            ) from None

    # -- pages ------------------------------------------------------------

    async def home(request: Request) -> Response:
        try:
            human = who(request)
        except Unauthenticated as exc:
            reason = exc.message if exc.data.get("reason") == "ENDED" else None
            return page("sign_in.html", request, human=None, next="", reason=reason)
        items = [inbox_item(n) for n in web.inbox(human)]
        return page("inbox.html", request, human=human, items=items, version=_version(human))

    async def ask(request: Request) -> Response:
        ask_id = request.path_params["ask_id"]
        try:
            human = who(request)
        except Unauthenticated:
            here = f"{prefix}/asks/{ask_id}"
            return page("sign_in.html", request, 401, human=None, next=here, reason=None)
        try:
            notice, progress = web.ask(ask_id, human)
        except AskUnknown as exc:
            return _error_page(page, request, human, exc, "No such ask for you")
        context = ask_page(notice, progress, human, now=web.gateway.clock.now())
        return page("ask.html", request, human=human, **context)

    async def enrol(request: Request) -> Response:
        return page("enrol.html", request, human=None)

    # -- the page's JSON endpoints ---------------------------------------

    async def sign_in_options(request: Request) -> dict[str, Any]:
        await read(request, _Empty)
        return sessions.sign_in_options()

    async def sign_in(request: Request) -> Response:
        body = await read(request, _SignIn)
        signed = sessions.sign_in(body.credential)
        response = JSONResponse(
            {"human": signed.session.human, "expiresAt": format_time(signed.session.expires_at)}
        )
        lifetime = signed.session.expires_at - signed.session.created_at
        response.set_cookie(
            SESSION_COOKIE,
            signed.token,
            max_age=int(lifetime.total_seconds()),
            path=prefix,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def sign_out(request: Request) -> Response:
        await read(request, _Empty)
        sessions.sign_out(request.cookies.get(SESSION_COOKIE))
        response = JSONResponse({})
        response.delete_cookie(SESSION_COOKIE, path=prefix, httponly=True, samesite="strict")
        return response

    async def enrol_options(request: Request) -> dict[str, Any]:
        body = await read(request, _Invite)
        registry = _enrolling(enrolment)
        invite = registry.invitation(body.invite)
        card = web.card(invite.human)
        return {
            "human": invite.human,
            "displayName": None if card is None else card.display_name,
            "options": registry.options(body.invite),
        }

    async def enrol_finish(request: Request) -> dict[str, Any]:
        body = await read(request, _Enrol)
        card = _enrolling(enrolment).register(body.invite, body.credential)
        kids = [key.kid for key in card.keys if getattr(key, "use", None) == "webauthn"]
        return {"human": card.id, "kid": kids[-1]}

    async def inbox(request: Request) -> dict[str, Any]:
        human = who(request)
        if unknown := sorted(set(request.query_params) - {"since", "waitSeconds"}):
            raise InvalidJson(
                f"the inbox takes the query members since and waitSeconds, not {unknown[0]}",
                where=f"/{unknown[0]}",
            )
        since = _query_number(request, "since", int)
        wait = _query_number(request, "waitSeconds", float) or 0.0
        version = web.channel.version(human)
        if since is not None:
            version = await web.channel.changed(human, int(since), min(wait, MAX_WAIT_SECONDS))
        return {"version": version, "asks": [_camel(inbox_item(n)) for n in web.inbox(human)]}

    async def vote_options(request: Request) -> dict[str, Any]:
        body = await read(request, _Decision)
        return web.vote_options(request.path_params["ask_id"], who(request), body.decision)

    async def vote(request: Request) -> dict[str, Any]:
        body = await read(request, _Vote)
        ask_id = request.path_params["ask_id"]
        human = who(request)
        return _progress(await web.vote(ask_id, human, body.decision, body.credential), human)

    async def answer(request: Request) -> dict[str, Any]:
        body = await read(request, _Answer)
        human = who(request)
        return _progress(await web.answer(request.path_params["ask_id"], human, body.value), human)

    async def decline(request: Request) -> dict[str, Any]:
        await read(request, _Empty)
        human = who(request)
        return _progress(await web.decline(request.path_params["ask_id"], human), human)

    def _version(human: str) -> int:
        return web.channel.version(human)

    api = [
        _api("POST", "/sign-in/options", sign_in_options),
        Route("/sign-in", _typed(sign_in), methods=["POST"]),
        Route("/sign-out", _typed(sign_out), methods=["POST"]),
        _api("POST", "/enrol/options", enrol_options),
        _api("POST", "/enrol", enrol_finish),
        _api("GET", "/inbox", inbox),
        _api("POST", "/asks/{ask_id}/options", vote_options),
        _api("POST", "/asks/{ask_id}/vote", vote),
        _api("POST", "/asks/{ask_id}/answer", answer),
        _api("POST", "/asks/{ask_id}/decline", decline),
    ]
    static = StaticFiles(directory=str(files("hatp.http").joinpath("static")))
    return [
        Route(prefix, home, methods=["GET"], name="hatp-approve"),
        Route(f"{prefix}/asks/{{ask_id}}", ask, methods=["GET"], name="hatp-approve-ask"),
        Route(f"{prefix}/enrol", enrol, methods=["GET"], name="hatp-approve-enrol"),
        Mount(f"{prefix}/static", app=static, name="hatp-approve-static"),
        Mount(f"{prefix}/api", routes=api),
    ]


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


def _error_page(
    page: Callable[..., Response], request: Request, human: str, error: HatpError, heading: str
) -> Response:
    return page(
        "error.html",
        request,
        status_of(error),
        human=human,
        heading=heading,
        code=error.code,
        message=error.message,
    )


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
    if value < 0:
        raise InvalidJson(f"{name} is not negative", where=f"/{name}")
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
