"""Who calls the JSON API: bearer tokens, kept as digests, each naming its caller.

With ``[api] callers`` in the settings, every request to the JSON API carries
``Authorization: Bearer <token>``; the server keeps only each token's
SHA-256 (``hatp api-token`` makes a token and the line to add), so the
settings file holds no secret. The token names its caller, and a caller that
is an agent (``agent://``) speaks only for itself: a plan it begins or has
asked about names it as the initiator, a call request as the requester, a
question as the asker ([API-CALLER]); and it reads and changes only its own
asks and transactions: those whose plan, call or question names it
([API-OWNER]). A service (a coordinator asking the gateway, say) may speak
for any agent. What else a caller may do is the
deployment's to decide, in front of this server.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from hatp import _checks
from hatp._edge_params import HatpParams
from hatp.errors import CallerRefused, Unauthenticated

__all__ = [
    "ApiCallers",
    "NamesAgent",
    "Owner",
    "acts_on_own",
    "api_token_digest",
    "member",
    "new_api_token",
    "speaks_for",
]

_log = logging.getLogger(__name__)

#: Random bytes in a token.
TOKEN_BYTES = 32
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: The scheme's name is case-insensitive (RFC 9110 §11.1); the token is base64url.
_BEARER = re.compile(r"^(?i:bearer) +([A-Za-z0-9_\-]{16,512})$")

#: What agent a request speaks for, read from its params (``None``: it names none).
NamesAgent = Callable[[HatpParams], str | None]


def api_token_digest(token: str) -> str:
    """How a token is kept in the settings: ``sha256:`` and the hex SHA-256 of it."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def new_api_token() -> tuple[str, str]:
    """A fresh token (base64url of 32 random bytes) and the digest the settings keep."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token, api_token_digest(token)


class ApiCallers:
    """The callers the JSON API serves, each by the digest of its token.

    Raises:
        ValueError: no caller, a caller id that is empty or has spaces, a digest that
            is not ``sha256:`` and 64 lowercase hex digits, or one token for two callers.
    """

    def __init__(self, digests: Mapping[str, str]) -> None:
        if not digests:
            raise ValueError("name at least one caller and the digest of its token")
        self._by_digest: dict[str, str] = {}
        for caller, kept in digests.items():
            if not caller or caller != caller.strip() or " " in caller:
                raise ValueError(f"caller {caller!r} must be an id with no spaces")
            if not _DIGEST.match(kept):
                raise ValueError(
                    f"the digest of {caller}'s token must be sha256: and 64 lowercase hex "
                    "digits, as hatp api-token prints it"
                )
            if kept in self._by_digest:
                raise ValueError(f"{caller} and {self._by_digest[kept]} have the same token")
            self._by_digest[kept] = caller

    @property
    def callers(self) -> list[str]:
        """The callers' ids, sorted."""
        return sorted(self._by_digest.values())

    def caller(self, request: Request) -> str:
        """Return who sent ``request``, by its bearer token. [API-TOKEN]

        Raises:
            Unauthenticated: ``data.reason`` ``NO_TOKEN`` (no ``Authorization: Bearer``
                header of a token's form) or ``BAD_TOKEN`` (no caller has this token).
        """
        header = request.headers.get("authorization", "")
        found = _BEARER.match(header)
        if found is None:
            if not _checks.is_on("API-TOKEN"):
                return "(unchecked)"
            raise Unauthenticated(
                "this API needs Authorization: Bearer <token>, with the token hatp api-token "
                "made for you",
                reason="NO_TOKEN",
            )
        caller = self._by_digest.get(api_token_digest(found.group(1)))
        if caller is not None:
            return caller
        if not _checks.is_on("API-TOKEN"):
            return "(unchecked)"
        raise Unauthenticated(
            "this token names no caller of this server: ask for a token", reason="BAD_TOKEN"
        )


def speaks_for(caller: str, named: str | None) -> None:
    """Refuse an agent's token speaking for another agent. [API-CALLER]

    Raises:
        CallerRefused: ``caller`` is an agent and the request names another agent.
    """
    if (
        caller.startswith("agent://")
        and named is not None
        and named != caller
        and _checks.is_on("API-CALLER")
    ):
        raise CallerRefused(
            f"this token is {caller}'s, and the request speaks for {named}: an agent's "
            "token speaks only for that agent",
            caller=caller,
            named=named,
        )


@dataclass(frozen=True)
class Owner:
    """Whose an ask or a transaction is: the agent its plan, call or question names
    (``None``: it names none), and what it is, for a refusal (``"ask ask-1"``)."""

    agent: str | None
    about: str


def acts_on_own(caller: str, owner: Owner) -> None:
    """Refuse an agent's token reading or changing another agent's ask or transaction.
    [API-OWNER]

    Raises:
        CallerRefused: ``caller`` is an agent, and ``owner`` names another agent or none.
    """
    if caller.startswith("agent://") and owner.agent != caller and _checks.is_on("API-OWNER"):
        _log.info("refused %s acting on %s, which is %s's", caller, owner.about, owner.agent)
        raise CallerRefused(
            f"{owner.about} is {owner.agent or 'no agent'}'s and this token is {caller}'s: an "
            "agent's token reads and changes only that agent's own asks and transactions",
            caller=caller,
            named=owner.agent,
            about=owner.about,
        )


def member(params: HatpParams, name: str, inner: str) -> str | None:
    """``params.<name>[inner]`` when it is a string (what a request names), else ``None``."""
    doc: Any = getattr(params, name, None)
    value = doc.get(inner) if isinstance(doc, Mapping) else None
    return value if isinstance(value, str) else None
