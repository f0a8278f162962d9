"""One hatp request over an MCP session, both ends: send it, and serve it.

The ``mcp`` SDK carries the JSON-RPC; this module only names the request,
turns a hatp refusal into a JSON-RPC error on the way out (:func:`method`) and
back into the same typed error on the way in (:func:`request`), and tells a
refusal apart from no answer at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.client import Client
from mcp.server.context import ServerRequestContext
from mcp.server.extension import MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, RequestParams, Result
from pydantic import ConfigDict, ValidationError

from hatp._edge_params import HatpParams
from hatp.errors import HatpError, ParticipantUnavailable, PeerIncompatible
from hatp.mcp._wire import hatp_error, mcp_error
from hatp.model import first_error

__all__ = ["HatpParams", "method", "request"]

P = TypeVar("P", bound="HatpParams")


class _Params(RequestParams):
    model_config = ConfigDict(extra="allow")


class _Request(types.Request[_Params, str]):
    method: str
    params: _Params


class _Result(Result):
    model_config = ConfigDict(extra="allow")


async def request(
    client: Client,
    name: str,
    params: Mapping[str, Any],
    *,
    server: str,
    timeout: float | None = None,
    silence: Callable[[str], HatpError] = lambda why: ParticipantUnavailable(why),
) -> dict[str, Any]:
    """Send the hatp request ``name`` (a full method name) and return its result's members.

    Args:
        client: an MCP client; one that is closed (or was never entered) is no answer.
        server: the server's id, for messages.
        timeout: seconds to wait for the answer (the session's default if ``None``).
        silence: builds the error raised when no answer came (a timeout, a
            closed connection): not a refusal, the request may have taken effect.

    Raises:
        HatpError: the server refused: the same typed error it raised.
        PeerIncompatible: reason ``METHOD``: the server does not serve ``name``,
            or not with these params.
    """
    try:
        session = client.session
    except RuntimeError:  # closed, or never entered: there is nobody to ask
        raise silence(f"the MCP client to {server} is not connected") from None
    try:
        result = await session.send_request(
            _Request(method=name, params=_Params(**params)),
            _Result,
            request_read_timeout_seconds=timeout,
        )
    except MCPError as exc:
        refusal = hatp_error(exc)
        if refusal is not None:
            raise refusal from None
        if exc.code in (METHOD_NOT_FOUND, INVALID_PARAMS):
            raise PeerIncompatible(
                f"{server} does not serve {name} with these params: {exc.message}",
                reason="METHOD",
                server=server,
                method=name,
                detail=exc.data if isinstance(exc.data, str | dict | list) else None,
            ) from None
        raise silence(f"{server} gave no answer to {name}: {exc.message}") from None
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
        raise silence(f"{server} gave no answer to {name}: {type(exc).__name__}") from None
    members = dict(result.model_extra or {})
    members.pop("resultType", None)
    return members


def method(
    name: str,
    params_type: type[P],
    handler: Callable[[P, ServerRequestContext[Any, Any]], Awaitable[Mapping[str, Any]]],
) -> MethodBinding:
    """Bind the hatp method ``name`` to ``handler``; its hatp refusals go out as JSON-RPC errors."""

    async def serve(ctx: ServerRequestContext[Any, Any], raw: _Params) -> dict[str, Any]:
        try:
            return dict(await handler(_read(name, params_type, raw), ctx))
        except HatpError as exc:
            raise mcp_error(exc) from None

    return MethodBinding(name, _Params, serve)


def _read(name: str, params_type: type[P], raw: _Params) -> P:
    try:
        return params_type.model_validate(raw.model_extra or {})
    except ValidationError as exc:
        path, msg = first_error(exc)
        at = "/" + path
        raise PeerIncompatible(
            f"the params of {name} do not fit: {at}: {msg}",
            reason="METHOD",
            method=name,
            where=at,
        ) from None
