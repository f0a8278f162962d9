"""Addresses of people and agents, parsed strictly into a typed value.

Four forms (docs/spec.md §17, [ADDR-FORM])::

    human://acme.com/bob                                  a person
    human://acme.com/role/finance-approver?quorum=2-of-3  N people holding a role
    human://acme.com/pool/security-leads?skill=sox        a pool, filtered by skill
    agent://acme.com/travel-bot                           an agent

Anything else is refused with ``ADDRESS_INVALID`` and a ``data.reason``
(a key of :data:`hatp.errors.ADDRESS_REASONS`). Nothing is normalized on the
way in except the order of query members and an explicit ``quorum=1-of-1``;
``str(address)`` is the canonical form and parses back to the same value.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from hatp.errors import AddressInvalid

__all__ = ["MAX_QUORUM", "Address", "AddressKind", "parse_address"]

#: The largest M of a quorum ``N-of-M``.
MAX_QUORUM = 32
_MAX_LENGTH = 512
_SCHEMES = {"human://": "human", "agent://": "agent"}
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_LABEL_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_QUORUM_RE = re.compile(r"([1-9][0-9]?)-of-([1-9][0-9]?)")
_RESERVED = frozenset({"role", "pool"})
#: Which query keys each kind of address takes.
_QUERY_KEYS: dict[str, frozenset[str]] = {
    "role": frozenset({"quorum"}),
    "pool": frozenset({"skill", "quorum"}),
}


class AddressKind(StrEnum):
    """What an address names: one person, a role, a pool, or an agent."""

    PERSON = "person"
    ROLE = "role"
    POOL = "pool"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed address. Build one with :func:`parse_address`.

    ``name`` is the person's, agent's, role's or pool's name; ``quorum`` is
    ``(n, m)``: n distinct people of a group of m (``(1, 1)`` when not given);
    ``skill`` filters a pool.
    """

    kind: AddressKind
    org: str
    name: str
    quorum: tuple[int, int] = (1, 1)
    skill: str | None = None

    @property
    def is_human(self) -> bool:
        """Whether the address names people (``human://``), not an agent."""
        return self.kind is not AddressKind.AGENT

    def __str__(self) -> str:
        if self.kind is AddressKind.AGENT:
            return f"agent://{self.org}/{self.name}"
        if self.kind is AddressKind.PERSON:
            return f"human://{self.org}/{self.name}"
        query = []
        if self.skill is not None:
            query.append(f"skill={self.skill}")
        if self.quorum != (1, 1):
            query.append(f"quorum={self.quorum[0]}-of-{self.quorum[1]}")
        tail = "?" + "&".join(query) if query else ""
        return f"human://{self.org}/{self.kind.value}/{self.name}{tail}"


def parse_address(text: object) -> Address:
    """Parse one address; return its typed value.

    Raises:
        AddressInvalid: ``data.reason`` names what is wrong (a key of
            :data:`hatp.errors.ADDRESS_REASONS`), ``data.address`` the text.
    """
    if isinstance(text, str):
        return _parse_text(text)
    raise _refuse("NOT_TEXT", f"an address is a string of 1 to {_MAX_LENGTH} characters", text)


# Every card, vote and approval names the same few people again and again; an
# Address is immutable, so each distinct text is parsed once (refusals are not cached).
@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Address:
    if not 0 < len(text) <= _MAX_LENGTH:
        raise _refuse("NOT_TEXT", f"an address is a string of 1 to {_MAX_LENGTH} characters", text)
    if any(c.isspace() or not c.isprintable() for c in text):
        raise _refuse("WHITESPACE", "remove whitespace and control characters", text)
    if "%" in text:
        raise _refuse("PERCENT_ENCODING", "write the address without percent-encoding", text)
    scheme = next((s for s in _SCHEMES if text.startswith(s)), None)
    if scheme is None:
        raise _refuse("SCHEME", "start with human:// or agent://, in lower case", text)
    rest = text[len(scheme) :]
    path, sep, query = rest.partition("?")
    if sep and not query:
        raise _refuse("EMPTY_PART", "drop the empty '?'", text)
    if path.endswith("/"):
        raise _refuse("TRAILING_SLASH", "drop the trailing '/'", text)
    org, *segments = path.split("/")
    _check_org(org, text)
    _check_segments(segments, text)
    if _SCHEMES[scheme] == "agent":
        if len(segments) != 1:
            raise _refuse("PATH", "an agent address is agent://org/name", text)
        if sep:
            raise _refuse("QUERY_KEY", "an agent address takes no query", text)
        return Address(AddressKind.AGENT, org, segments[0])
    if len(segments) == 1:
        if segments[0] in _RESERVED:
            raise _refuse(
                "RESERVED_NAME",
                f"'{segments[0]}' needs a name: human://org/{segments[0]}/NAME",
                text,
            )
        if sep:
            raise _refuse("QUERY_KEY", "a person's address takes no query", text)
        return Address(AddressKind.PERSON, org, segments[0])
    if len(segments) != 2 or segments[0] not in _RESERVED:
        raise _refuse("PATH", "the path is /name, /role/NAME or /pool/NAME", text)
    kind = AddressKind(segments[0])
    members = _query(query, _QUERY_KEYS[kind.value], text) if sep else {}
    skill = members.get("skill")
    if skill is not None:
        _check_name(skill, "skill", text)
    quorum = _quorum(members["quorum"], text) if "quorum" in members else (1, 1)
    return Address(kind, org, segments[1], quorum, skill)


def _check_org(org: str, text: str) -> None:
    labels = org.split(".")
    if not org:
        raise _refuse("EMPTY_PART", "name the org, e.g. human://acme.com/bob", text)
    if len(org) > 253 or not all(_LABEL_RE.fullmatch(label) for label in labels):
        raise _refuse(
            "ORG",
            f"org {org!r} is not a lower-case DNS name like acme.com (no port, no user)",
            text,
        )


def _check_segments(segments: list[str], text: str) -> None:
    if not segments:
        raise _refuse("PATH", "the address names no one: add /name", text)
    for segment in segments:
        if not segment:
            raise _refuse("EMPTY_PART", "remove the empty path segment ('//')", text)
        if segment in (".", "..") or ".." in segment:
            raise _refuse("DOT_SEGMENT", f"segment {segment!r} contains a dot segment", text)
        _check_name(segment, "name", text)


def _check_name(value: str, what: str, text: str) -> None:
    if ".." in value:
        raise _refuse("DOT_SEGMENT", f"{what} {value!r} contains '..'", text)
    if not _NAME_RE.fullmatch(value):
        raise _refuse(
            "NAME",
            f"{what} {value!r} must be [a-z0-9][a-z0-9._-]*, at most 64 characters",
            text,
        )


def _query(query: str, allowed: frozenset[str], text: str) -> dict[str, str]:
    members: dict[str, str] = {}
    for pair in query.split("&"):
        key, eq, value = pair.partition("=")
        if not key or not eq or not value:
            raise _refuse("EMPTY_PART", f"query member {pair!r} is not KEY=VALUE", text)
        if key not in allowed:
            raise _refuse(
                "QUERY_KEY",
                f"unknown query key {key!r}; allowed: {', '.join(sorted(allowed))}",
                text,
            )
        if key in members:
            raise _refuse("DUPLICATE_KEY", f"query key {key!r} appears twice", text)
        members[key] = value
    return members


def _quorum(value: str, text: str) -> tuple[int, int]:
    match = _QUORUM_RE.fullmatch(value)
    if match is None:
        raise _refuse("QUORUM", f"quorum {value!r} is not N-of-M, e.g. 2-of-3", text)
    n, m = int(match.group(1)), int(match.group(2))
    if not 1 <= n <= m <= MAX_QUORUM:
        raise _refuse("QUORUM", f"quorum {value!r} needs 1 <= N <= M <= {MAX_QUORUM}", text)
    return n, m


def _refuse(reason: str, fix: str, text: object) -> AddressInvalid:
    shown = text if isinstance(text, str) else type(text).__name__
    return AddressInvalid(
        f"address {shown!r} is invalid: {fix}",
        reason=reason,
        address=text if isinstance(text, str) else None,
    )
