"""The strict JSON reader for everything that comes from outside.

Two parsers that disagree about one document are an attack surface: a
signature checked by one can cover different values than the other acts on.
So every untrusted document is read here, and anything on which JSON parsers
are known to differ is refused instead of resolved: duplicate keys,
NaN and Infinity, lone surrogates, integers no IEEE double holds exactly, and
nesting deep enough to exhaust a recursive parser.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hatp import _checks
from hatp.errors import InvalidJson
from hatp.model import MAX_JSON_DEPTH, MAX_SAFE_INTEGER

#: The deepest nesting of objects and arrays a document may have.
MAX_DEPTH = MAX_JSON_DEPTH


class _Refused:
    """A value the parse hooks could not accept; reported with its path later."""

    __slots__ = ("detail", "rule")

    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        self.detail = detail


class _DuplicateKeys(dict[str, Any]):
    """An object that repeated a key; reported with its path later."""

    duplicate: str = ""


class _Located(Exception):
    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        self.detail = detail
        self.parts: list[str] = []


def parse_json(document: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse an untrusted JSON document, refusing anything ambiguous.

    Returns plain ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``.

    Raises:
        InvalidJson: the document is not UTF-8, not JSON, or has a duplicate
            key, NaN/Infinity, a lone surrogate, an integer outside
            ±(2**53-1), or nesting deeper than ``max_depth``.
            ``data.rule`` names the rule and ``data.where`` the place: a JSON
            Pointer, ``line L column C``, or ``byte N``.
    """
    text = _decode(document)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_int=_integer,
            parse_float=_number,
        )
    except json.JSONDecodeError as exc:
        raise InvalidJson(
            f"not JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            rule="JSON-SYNTAX",
            where=f"line {exc.lineno} column {exc.colno}",
        ) from None
    except RecursionError:
        raise _too_deep(text, max_depth) from None
    except ValueError as exc:  # int() past its digit limit, only with the range check off
        raise InvalidJson(
            f"a number cannot be read: {exc}", rule="JSON-INTEGER-RANGE", where="(document)"
        ) from None
    try:
        _inspect(value, 0, max_depth)
    except _Located as found:
        pointer = "".join("/" + _escape_pointer(p) for p in reversed(found.parts))
        raise InvalidJson(
            f"{found.detail} at {pointer!r} (JSON Pointer)"
            if pointer
            else f"{found.detail} at the top level",
            rule=found.rule,
            where=pointer,
        ) from None
    except RecursionError:
        raise _too_deep(text, max_depth) from None
    return value


def _decode(document: str | bytes) -> str:
    if isinstance(document, str):
        return document
    if document.startswith(b"\xef\xbb\xbf"):
        raise InvalidJson(
            "the document starts with a byte-order mark; save it as UTF-8 without one",
            rule="JSON-SYNTAX",
            where="byte 0",
        )
    try:
        return document.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJson(
            f"the document is not UTF-8 (bad byte at offset {exc.start})",
            rule="JSON-SYNTAX",
            where=f"byte {exc.start}",
        ) from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) == len(pairs) or not _checks.is_on("JSON-DUPLICATE-KEY"):
        return result
    seen: set[str] = set()
    flagged = _DuplicateKeys(result)
    for key, _ in pairs:
        if key in seen:
            flagged.duplicate = key
            break
        seen.add(key)
    return flagged


def _constant(name: str) -> Any:
    if not _checks.is_on("JSON-NON-FINITE"):
        return float(name.replace("Infinity", "inf"))
    return _Refused("JSON-NON-FINITE", f"{name} is not a JSON number")


def _integer(text: str) -> Any:
    # 2**53 has 16 digits: a longer literal is out of range without reading
    # it, and int() refuses literals past 4,300 digits anyway.
    if len(text.lstrip("-")) <= 16:
        value = int(text)
        if abs(value) <= MAX_SAFE_INTEGER:
            return value
    if _checks.is_on("JSON-INTEGER-RANGE"):
        shown = text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"
        return _Refused(
            "JSON-INTEGER-RANGE",
            f"integer {shown} is outside ±(2**53-1); send it as a decimal string",
        )
    return int(text)


def _number(text: str) -> Any:
    value = float(text)
    if not math.isfinite(value) and _checks.is_on("JSON-NON-FINITE"):
        return _Refused("JSON-NON-FINITE", f"number {text} overflows a double")
    # RFC 8785 writes these doubles as integer literals, which this reader
    # refuses; accepting them would sign bytes that cannot be read back.
    if MAX_SAFE_INTEGER < abs(value) < 1e21 and _checks.is_on("JSON-INTEGER-RANGE"):
        return _Refused(
            "JSON-INTEGER-RANGE",
            f"number {text} canonicalizes to an integer outside ±(2**53-1); "
            "send it as a decimal string",
        )
    return value


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        if _checks.is_on("JSON-LONE-SURROGATE"):
            raise _Located(
                "JSON-LONE-SURROGATE", "a string holds a lone UTF-16 surrogate"
            ) from None


def _inspect(value: Any, depth: int, limit: int) -> None:
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_text(value)
    elif kind is dict or kind is _DuplicateKeys:
        if depth >= limit and _checks.is_on("JSON-DEPTH"):
            raise _Located("JSON-DEPTH", f"nesting deeper than {limit} levels")
        if kind is _DuplicateKeys:
            raise _Located("JSON-DUPLICATE-KEY", f"duplicate key {value.duplicate!r}")
        for key, item in value.items():
            try:
                if not key.isascii():
                    _check_text(key)
                _inspect(item, depth + 1, limit)
            except _Located as found:
                found.parts.append(key)
                raise
    elif kind is list:
        if depth >= limit and _checks.is_on("JSON-DEPTH"):
            raise _Located("JSON-DEPTH", f"nesting deeper than {limit} levels")
        for index, item in enumerate(value):
            try:
                _inspect(item, depth + 1, limit)
            except _Located as found:
                found.parts.append(str(index))
                raise
    elif kind is _Refused:
        raise _Located(value.rule, value.detail)


def _too_deep(text: str, limit: int) -> InvalidJson:
    """Locate where nesting first passes ``limit`` (only after the parser gave up)."""
    depth, in_string, escaped = 0, False, False
    for offset, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return InvalidJson(
                    f"nesting deeper than {limit} levels at character {offset}",
                    rule="JSON-DEPTH",
                    where=f"char {offset}",
                )
        elif char in "]}":
            depth -= 1
    return InvalidJson(f"nesting deeper than {limit} levels", rule="JSON-DEPTH", where="(document)")


def _escape_pointer(part: str) -> str:
    # A key holding a lone surrogate cannot be printed as it is; show its escape.
    printable = part.encode("utf-8", "backslashreplace").decode("utf-8")
    return printable.replace("~", "~0").replace("/", "~1")
