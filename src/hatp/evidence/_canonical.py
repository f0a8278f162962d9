"""RFC 8785 canonical JSON, the bytes every signature and digest is computed over."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import orjson
import rfc8785

from hatp.errors import InvalidJson
from hatp.model._base import MAX_JSON_DEPTH, MAX_SAFE_INTEGER

_T = TypeVar("_T")
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
# What orjson would otherwise turn into JSON of its own choosing (a datetime into
# a string, a dataclass into an object): refused, so copy_json deep-copies them.
_COPY_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def canonicalize(value: Any) -> bytes:
    """Return the RFC 8785 canonical JSON bytes of a parsed JSON value.

    ``rfc8785`` is the reference. It is pure Python and costs about four
    Ed25519 signatures for a 2 KB plan, so plain values (no floats, only
    ASCII keys: :func:`canonical_plain`) go through ``orjson`` instead: for
    those, orjson's sorted compact output is byte-for-byte RFC 8785 (same
    escapes, same key order, same integers), which the test suite checks
    against ``rfc8785`` with hypothesis. Everything else, and anything orjson
    refuses, takes the reference path, which names the problem.

    Raises:
        InvalidJson: the value has no canonical form (a non-finite or
            out-of-range number, a lone surrogate, a non-string key, a type
            that is not JSON).
    """
    plain = canonical_plain(value)
    if plain is not None:
        return plain
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, RecursionError, UnicodeError) as exc:
        raise InvalidJson(f"value has no RFC 8785 canonical form: {exc}", where="(value)") from None


def canonical_plain(value: Any, depth: int = 0) -> bytes | None:
    """The canonical bytes of ``value`` if it is plain JSON, else ``None``.

    Plain: objects with ASCII string keys, arrays, strings, booleans, nulls
    and integers within ±(2**53-1), nested less than 64 levels deep counted
    from ``depth`` (the value's own depth in the document that carries it).
    For such a value :func:`canonicalize` takes ``orjson``'s fast path and
    the strict reader reads the bytes back ([JCS-READBACK]), so one walk
    answers both questions that signing asks. ``None`` sends the caller to
    :func:`canonicalize` and :func:`hatp.model.unreadable`, which name any
    problem exactly as before.
    """
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        if not _plain(value, depth):
            return None
    elif not (kind is str or kind is bool or value is None or (kind is int and _safe(value))):
        return None
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return None  # a lone surrogate: the reference path names it


def plain_bytes(value: Any) -> bytes:
    """The canonical bytes of a value known to be plain (see :func:`canonical_plain`):
    a plain object with members of plain ASCII text added, such as a signature."""
    return orjson.dumps(value, option=_ORJSON_OPTIONS)


def json_bytes(value: Any, canonical: bytes) -> bytes:
    """JSON bytes of ``value`` in its own member order, to parse copies from (a record
    writer's events); ``canonical`` (its canonical bytes, equal to it as JSON) if
    ``orjson`` refuses it."""
    try:
        return orjson.dumps(value, option=_COPY_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return canonical


def _safe(number: int) -> bool:
    return -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER


def _plain(value: dict[str, Any] | list[Any] | tuple[Any, ...], depth: int) -> bool:
    """The walk behind :func:`canonical_plain`; ``value`` is a dict, list or tuple.

    Hand-written: no library answers "is this orjson-exact and strict-readable"
    in one pass. Text, booleans and null, most of any document, are passed by one
    set lookup on their type; the two loops are one written twice, for speed.
    """
    if depth >= MAX_JSON_DEPTH:
        return False
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str or not key.isascii():
                return False
            kind = type(item)
            if kind in _LEAVES:
                continue
            if kind is dict or kind is list or kind is tuple:
                if _plain(item, depth + 1):
                    continue
            elif kind is int and -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return False
        return True
    members: Any = value  # a list or a tuple here
    for item in members:
        kind = type(item)
        if kind in _LEAVES:
            continue
        if kind is dict or kind is list or kind is tuple:
            if _plain(item, depth + 1):
                continue
        elif kind is int and -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
            continue
        return False
    return True


_LEAVES = frozenset({str, bool, type(None)})


def copy_json(value: _T) -> _T:
    """Return a deep copy of a parsed JSON value, such as a signed event or a stored document.

    The copy is made by an ``orjson`` round trip, several times faster than
    :func:`copy.deepcopy` on a Transaction Record (hatp copies events and
    records on every transaction's path). It is equal to the value as JSON:
    tuples come back as lists. ``value`` must be JSON (a value with a
    canonical form: a NaN would come back as ``None``). Anything else orjson
    refuses (a datetime, an int subclass, an integer past 64 bits) is copied
    by :func:`copy.deepcopy` instead.
    """
    try:
        copied: _T = orjson.loads(orjson.dumps(value, option=_COPY_OPTIONS))
    except (TypeError, orjson.JSONEncodeError):
        return copy.deepcopy(value)
    return copied


def json_number(value: float) -> float:
    """Return ``value`` as hatp puts a number into a document: a whole number as an ``int``.

    RFC 8785 writes ``1200.0`` as ``1200`` anyway, so nothing signed changes;
    but a document without floats takes :func:`canonicalize`'s fast path, and
    documents on a transaction's path are canonicalized several times each.
    """
    return int(value) if float(value).is_integer() else value
