"""What hatp's HTTP clients share: an HTTP client they own or borrow, and reading a
refusal back as the typed hatp error the server raised."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import httpx2

from hatp.errors import HatpError, PeerIncompatible, PeerUnavailable, error_from_dict
from hatp.evidence import parse_json


class HttpClientBase:
    """The server at ``base_url``, with routes under ``prefix``, reached through
    ``client`` (borrowed), or through an HTTP client made here and closed by
    :meth:`aclose` (``timeout`` seconds per request). An async context manager."""

    def __init__(
        self,
        base_url: str,
        prefix: str,
        client: httpx2.AsyncClient | None,
        timeout: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.prefix = prefix.rstrip("/")
        self._owned = client is None
        if client is not None:
            self._client = client
        elif timeout is None:
            self._client = httpx2.AsyncClient()
        else:
            self._client = httpx2.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object made it."""
        if self._owned:
            await self._client.aclose()


def refusal(response: httpx2.Response, method: str, url: str) -> HatpError:
    """The typed error an error answer carries (or says by its silence): the body's
    ``{code, message, data}`` rebuilt; else ``PEER_UNAVAILABLE`` for a 5xx (it may
    have taken effect: asking again is safe), ``PEER_INCOMPATIBLE`` otherwise."""
    try:
        body = parse_json(response.content)
    except HatpError:
        body = None
    if (
        isinstance(body, dict)
        and isinstance(body.get("code"), str)
        and isinstance(body.get("message"), str)
        and isinstance(body.get("data") or {}, dict)
    ):
        try:
            return error_from_dict(body)
        except TypeError:  # data members that clash with the error's own arguments
            pass
    status = response.status_code
    if status >= 500:
        return PeerUnavailable(
            f"{method} {url} failed with HTTP {status} and no hatp error; it may have "
            "taken effect: asking again is safe",
            status=status,
        )
    return PeerIncompatible(
        f"{method} {url} answered HTTP {status} without a hatp error: it does not serve "
        "this hatp endpoint",
        reason="METHOD",
        status=status,
    )
