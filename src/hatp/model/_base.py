"""The base every protocol type shares: wire names, no unknown fields, no coercion."""

from __future__ import annotations

import math
from typing import Annotated, Any, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from hatp.clock import WIRE_TIME_PATTERN, parse_time

#: ``sha256:`` + 43 characters of unpadded base64url (docs/spec.md, DIG-FORM). Match whole.
DIGEST_PATTERN = r"sha256:[A-Za-z0-9_-]{43}"
#: A key id: printable ASCII, no spaces, at most 256 characters. Match whole.
KID_PATTERN = r"[!-~]{1,256}"

Digest = Annotated[str, StringConstraints(pattern=f"^{DIGEST_PATTERN}$")]
Kid = Annotated[str, StringConstraints(pattern=f"^{KID_PATTERN}$")]


def _real_instant(text: str) -> str:
    parse_time(text)  # the pattern is checked first; this checks the calendar and the range
    return text


#: A wire time: RFC 3339 in UTC with milliseconds, e.g. ``2026-12-02T16:48:08.123Z``,
#: naming a real instant in the wire range (docs/spec.md [TIME-REAL]). The one time
#: type of every wire model.
WireTime = Annotated[
    str, StringConstraints(pattern=f"^{WIRE_TIME_PATTERN}$"), AfterValidator(_real_instant)
]


#: The deepest nesting of objects and arrays the strict reader takes (docs/spec.md [JSON-DEPTH]).
MAX_JSON_DEPTH = 64
#: The largest integer magnitude every JSON parser reads exactly ([JSON-INTEGER-RANGE]).
MAX_SAFE_INTEGER = 2**53 - 1
#: From here on RFC 8785 writes a double in exponent form, which the strict reader takes.
_EXPONENT_FORM = 1e21


class Unreadable(NamedTuple):
    """Why a value hatp is about to sign could not be read back by the strict reader."""

    rule: str
    where: str
    detail: str


def unreadable(value: Any, depth: int = 0) -> Unreadable | None:
    """The first part of a parsed JSON value that the strict reader (docs/spec.md §2) would
    refuse once canonicalized: a non-finite double, an integer beyond ±(2^53-1), a
    double RFC 8785 writes as such an integer (between 2^53 and 10^21, e.g. ``1e20``),
    or nesting past 64 levels counted from ``depth`` (the value's own depth in the
    document that will carry it). ``None`` when every part reads back.

    What RFC 8785 itself refuses (lone surrogates, non-string keys, types that
    are not JSON) is left to :func:`hatp.evidence.canonicalize`.
    """
    found = _unreadable(value, depth)
    if found is None:
        return None
    rule, parts, detail = found
    where = "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in reversed(parts))
    return Unreadable(rule, where, detail)


def _unreadable(value: Any, depth: int) -> tuple[str, list[str], str] | None:
    kind = type(value)
    if kind is dict or kind is list:
        if depth >= MAX_JSON_DEPTH:
            return "JSON-DEPTH", [], f"nesting deeper than {MAX_JSON_DEPTH} levels"
        items = value.items() if kind is dict else enumerate(value)
        for key, item in items:
            if type(item) in _PLAIN:
                continue
            found = _unreadable(item, depth + 1)
            if found is not None:
                found[1].append(str(key))
                return found
        return None
    if kind is float:
        if not math.isfinite(value):
            return "JSON-NON-FINITE", [], f"{value} is not a JSON number"
        if MAX_SAFE_INTEGER < abs(value) < _EXPONENT_FORM:
            return (
                "JSON-INTEGER-RANGE",
                [],
                f"number {value!r} canonicalizes to an integer outside ±(2**53-1); "
                "send it as a decimal string",
            )
    elif kind is int and abs(value) > MAX_SAFE_INTEGER:
        return "JSON-INTEGER-RANGE", [], f"integer {value} is outside ±(2**53-1)"
    elif isinstance(value, (dict, list, tuple)):
        return _unreadable(dict(value) if isinstance(value, dict) else list(value), depth)
    return None


_PLAIN = frozenset({str, bool, type(None)})


def _readable(value: Any) -> Any:
    # Only the value's own depth is known here; the document that carries it
    # checks the rest when it is signed (hatp.evidence.sign).
    found = unreadable(value)
    if found is not None:
        where = f" at {found.where}" if found.where else ""
        raise ValueError(f"{found.detail}{where} [{found.rule}]")
    return value


#: A free-form JSON object (plan args, tool arguments, an event body): any JSON
#: whose canonical bytes the strict reader reads back ([JSON-INTEGER-RANGE]).
JsonObject = Annotated[dict[str, Any], AfterValidator(_readable)]
#: Any free-form JSON value (an answer), read back as for :data:`JsonObject`.
JsonValue = Annotated[Any, AfterValidator(_readable)]
#: A JSON number in a wire model: finite, and not a double RFC 8785 writes as an
#: integer the strict reader refuses (between 2^53 and 10^21).
WireNumber = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_readable)]
#: A number of seconds, 0 or more, as :data:`WireNumber` (constraints sit before the
#: check, so that the JSON Schema states them).
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False), AfterValidator(_readable)]
#: A number of seconds above 0, as :data:`Seconds`.
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False), AfterValidator(_readable)]


class WireModel(BaseModel):
    """A protocol type: camelCase on the wire, strict types, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
    )

    def to_wire(self) -> dict[str, object]:
        """Return the JSON-ready wire form (camelCase names, ``None`` members kept)."""
        return self.model_dump(mode="json", by_alias=True)


def first_error(exc: ValidationError) -> tuple[str, str]:
    """The first problem pydantic found: where (member names joined by ``/``, no
    leading slash; empty for the top) and what, for a refusal that names the member."""
    error = exc.errors()[0]
    return "/".join(str(part) for part in error["loc"]), error["msg"]
