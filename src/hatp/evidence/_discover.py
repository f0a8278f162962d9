"""Fetching an organisation's key set from its URL (docs/spec.md [KEYSET-FETCH]), with a
cache that keeps the newest version seen across restarts.

httpx2 is imported when a set is fetched, not with the evidence layer: verifying a
record offline never loads an HTTP client ([VFY-STANDALONE]).
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from hatp.clock import SystemClock, format_time, parse_time
from hatp.errors import ConfigInvalid, InvalidJson, KeySetInvalid, VersionUnsupported
from hatp.evidence._digest import digest, is_digest
from hatp.evidence._keyset import VerifiedKeySet, verify_key_set
from hatp.evidence._strict_json import parse_json
from hatp.model import KEYSET_PATH

if TYPE_CHECKING:
    import httpx2

_log = logging.getLogger("hatp.evidence.discover")

#: The largest key set document fetched, in bytes (1 MiB).
MAX_KEY_SET_BYTES = 1024 * 1024
#: Redirects followed, each to the same origin only.
_MAX_REDIRECTS = 5
#: An RFC 7638 thumbprint as hatp writes it: 32 bytes, unpadded base64url.
_PIN_RE = re.compile(r"[A-Za-z0-9_-]{43}")
#: Reasons a cached set is refused for its time alone: it verified up to that step.
_AGED = ("EXPIRED", "NOT_YET_ISSUED")
#: How long a cached set is used without asking for a newer one (a revocation published
#: since is seen at most this late, when the organisation's server answers).
MAX_CACHE_AGE = timedelta(hours=1)


def discover_key_set(
    url: str,
    *,
    pin: str,
    cache_dir: str | Path | None = None,
    now: datetime | None = None,
    timeout_seconds: float = 10.0,
    client: httpx2.Client | None = None,
    max_age: timedelta = MAX_CACHE_AGE,
) -> VerifiedKeySet:
    """Fetch the key set at ``url`` and verify it against the pinned root thumbprint
    ``pin`` at ``now`` (default: the system clock), as [KEYSET-ORDER] says.

    ``url`` is the organisation's base URL (``https://acme.com``; the document is at
    ``/.well-known/hatp-keys.json`` under it) or the document's own URL. With
    ``cache_dir``, the file ``<cache_dir>/<pin>.json`` keeps the last set accepted for
    this pin: for ``max_age`` after it was fetched (default an hour), while it verifies
    and is unexpired, it is used without fetching; after that the set is fetched again,
    and the cached one used only if that fails (logged: a revocation published since is
    not seen). A set fetched is refused when older than the cached one (rollback,
    across restarts). A cache file that does not verify is ignored (a warning is
    logged) and the set fetched.
    ``client`` is an ``httpx2.Client`` to fetch through (default: one made here);
    redirects are followed only within the URL's origin.

    Raises:
        KeySetInvalid: ``data.reason`` ``UNREACHABLE``: no answer within
            ``timeout_seconds``, not HTTP 200, a redirect to another origin, more than
            1 MiB, or not JSON (``data.url``); ``ROOT_MISMATCH`` for a ``pin`` that is
            not a thumbprint; else any reason of :func:`verify_key_set`.
        VersionUnsupported: the set names a version this build does not know.
        ConfigInvalid: ``cache_dir`` cannot be written (``data.key`` ``cache_dir``).
        ValueError: ``now`` is a naive datetime.
    """
    moment = SystemClock().now() if now is None else now
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    _check_pin(pin)
    target = _document_url(url)
    path = None if cache_dir is None else Path(cache_dir) / f"{pin}.json"
    seen = None if path is None else _read_cache(path, pin, moment)
    fresh = seen is not None and seen.fetched_at is not None and moment < seen.fetched_at + max_age
    if seen is not None and seen.usable is not None and fresh:
        _log.info(
            "key set of %s version %d from the cache %s (expires %s)",
            seen.usable.organisation,
            seen.version,
            path,
            format_time(seen.usable.expires_at),
        )
        return seen.usable
    try:
        doc = _fetch(target, timeout_seconds, client)
    except KeySetInvalid as exc:
        if seen is None or seen.usable is None:
            raise
        _log.warning(
            "could not fetch a newer key set from %s (%s); using the cached version %d, "
            "fetched %s: a revocation published since is not seen",
            target,
            exc.message,
            seen.version,
            "at an unknown time" if seen.fetched_at is None else format_time(seen.fetched_at),
        )
        return seen.usable
    try:
        verified = verify_key_set(
            doc,
            pin=pin,
            now=moment,
            newest_seen=None if seen is None else seen.version,
            newest_digest=None if seen is None else seen.digest,
        )
    except (KeySetInvalid, VersionUnsupported) as exc:
        _log.warning("refused the key set fetched from %s: %s", target, exc.message)
        raise
    _log.info(
        "fetched the key set of %s version %d from %s (expires %s)",
        verified.organisation,
        verified.version,
        target,
        format_time(verified.expires_at),
    )
    if path is not None:
        _write_cache(path, pin, doc, verified, moment)
    return verified


def _document_url(url: str) -> str:
    """The URL of the key set: ``url`` itself, or with no path (or ``/``) the well-known
    path under it. The fragment is dropped.

    Raises:
        KeySetInvalid: reason ``UNREACHABLE``: not an http:// or https:// URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _unreachable(
            url,
            "it is not an http:// or https:// URL: give the organisation's base URL "
            f"(https://acme.com) or its key set's (https://acme.com{KEYSET_PATH})",
        )
    path = KEYSET_PATH if parts.path in ("", "/") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _check_pin(pin: str) -> None:
    if not _PIN_RE.fullmatch(pin):
        raise KeySetInvalid(
            f"the pin {pin[:60]!r} is not an RFC 7638 thumbprint (43 characters of "
            "base64url): pin what `hatp keys thumbprint ROOT_KEY` prints, as the "
            "organisation gave it to you",
            reason="ROOT_MISMATCH",
            rule="KEYSET-PIN",
            pin=pin[:100],
        )


# --- fetching ---------------------------------------------------------------------------------


def _fetch(url: str, timeout_seconds: float, client: httpx2.Client | None) -> Any:
    import httpx2

    http = (
        httpx2.Client(timeout=timeout_seconds, follow_redirects=False) if client is None else client
    )
    try:
        body = _get(http, url, timeout_seconds)
    finally:
        if client is None:
            http.close()
    try:
        return parse_json(body)
    except InvalidJson as exc:
        raise _unreachable(
            url,
            f"its answer is not JSON ({exc.message}): check that the URL is the "
            "organisation's key set",
        ) from None


def _get(http: httpx2.Client, url: str, timeout_seconds: float) -> bytes:
    import httpx2

    # A server trickling bytes keeps each read alive: bound the whole exchange too.
    deadline = time.monotonic() + timeout_seconds
    current = httpx2.URL(url)
    for _ in range(_MAX_REDIRECTS + 1):
        try:
            with http.stream(
                "GET",
                current,
                headers={"Accept": "application/json"},
                timeout=timeout_seconds,
                follow_redirects=False,
            ) as response:
                if response.is_redirect:
                    current = _same_origin(url, current, response)
                    continue
                if response.status_code != 200:
                    raise _unreachable(
                        url,
                        f"it answered HTTP {response.status_code}: check the URL, and that "
                        f"the organisation publishes its key set at {KEYSET_PATH}",
                        status=response.status_code,
                    )
                return _read_limited(url, response, deadline, timeout_seconds)
        except httpx2.TimeoutException:
            raise _unreachable(
                url, f"no answer within {timeout_seconds:g} s: check the URL and the network"
            ) from None
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _unreachable(
                url, f"it cannot be reached ({exc}): check the URL and the network"
            ) from None
    raise _unreachable(url, f"more than {_MAX_REDIRECTS} redirects: give the set's own URL")


def _same_origin(url: str, current: httpx2.URL, response: httpx2.Response) -> httpx2.URL:
    """Where a redirect leads, if it stays on ``current``'s origin (scheme, host, port)."""
    target = current.join(response.headers["location"])
    if (target.scheme, target.host, target.port) != (current.scheme, current.host, current.port):
        raise _unreachable(
            url,
            f"it redirects to another origin ({target.scheme}://{target.host}"
            f"{'' if target.port is None else f':{target.port}'}), which is not followed: "
            "give the URL the organisation publishes its key set at",
            location=str(target)[:300],
        )
    return target


def _read_limited(
    url: str, response: httpx2.Response, deadline: float, timeout_seconds: float
) -> bytes:
    too_large = (
        f"its answer is larger than {MAX_KEY_SET_BYTES} bytes, more than a key set holds: "
        "check the URL"
    )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_KEY_SET_BYTES:
        raise _unreachable(url, too_large, limit=MAX_KEY_SET_BYTES)
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_KEY_SET_BYTES:
            raise _unreachable(url, too_large, limit=MAX_KEY_SET_BYTES)
        if time.monotonic() > deadline:
            raise _unreachable(
                url, f"its answer took longer than {timeout_seconds:g} s: check the network"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _unreachable(url: str, why: str, **data: Any) -> KeySetInvalid:
    _log.warning("cannot fetch the key set at %s: %s", url, why)
    return KeySetInvalid(
        f"cannot fetch the key set at {url}: {why}",
        reason="UNREACHABLE",
        rule="KEYSET-FETCH",
        url=url,
        **data,
    )


# --- the cache ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the cache holds for a pin: the newest version and digest accepted, and the set
    itself when it may be used now (``None``: expired, or not yet issued)."""

    version: int
    digest: str
    usable: VerifiedKeySet | None
    fetched_at: datetime | None = None


def _read_cache(path: Path, pin: str, now: datetime) -> _Seen | None:
    """The cache of ``pin``, or ``None`` when there is none or it cannot be trusted (then
    it is ignored, with a warning, and the set fetched as if it were not there)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _ignored(path, f"it cannot be read: {exc.strerror}")
    try:
        doc = parse_json(data)
    except InvalidJson as exc:
        return _ignored(path, f"it is not JSON: {exc.message}")
    if not isinstance(doc, dict) or doc.get("pin") != pin:
        return _ignored(path, "it is not this pin's cache")
    version, seen_digest, key_set = (
        doc.get("newestVersion"),
        doc.get("newestDigest"),
        doc.get("keySet"),
    )
    if type(version) is not int or not is_digest(seen_digest) or not isinstance(key_set, dict):
        return _ignored(path, "it is not {pin, newestVersion, newestDigest, keySet}")
    try:
        consistent = key_set.get("version") == version and digest(key_set) == seen_digest
    except InvalidJson:
        consistent = False
    if not consistent:
        return _ignored(path, "its set is not the newest version and digest it names")
    try:
        usable = verify_key_set(
            key_set, pin=pin, now=now, newest_seen=version, newest_digest=seen_digest
        )
    except KeySetInvalid as exc:
        if exc.reason not in _AGED:
            return _ignored(path, f"its set does not verify: {exc.message}")
        # Signed by the pinned root (every step before the time passed): its version
        # still bounds what is accepted next.
        _log.info("the cached key set %s is not current (%s); fetching it again", path, exc.reason)
        return _Seen(version, str(seen_digest), None)
    except VersionUnsupported as exc:
        return _ignored(path, exc.message)
    fetched = doc.get("fetchedAt")
    try:
        fetched_at = parse_time(fetched) if isinstance(fetched, str) else None
    except ValueError:
        fetched_at = None  # not when it was fetched: fetched again
    return _Seen(version, usable.digest, usable, fetched_at)


def _ignored(path: Path, why: str) -> _Seen | None:
    """Nothing to use: the cache is not trusted (logged)."""
    _log.warning("ignored the key set cache %s, %s; fetching the set again", path, why)
    return None


def _write_cache(
    path: Path, pin: str, doc: Any, verified: VerifiedKeySet, fetched_at: datetime
) -> None:
    """Replace the cache of ``pin`` with ``doc`` atomically: a reader sees the old file
    or the new one, never a part."""
    text = json.dumps(
        {
            "pin": pin,
            "newestVersion": verified.version,
            "newestDigest": verified.digest,
            "fetchedAt": format_time(fetched_at),
            "keySet": doc,
        },
        indent=2,
        ensure_ascii=False,
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{pin}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ConfigInvalid(
            f"cannot write the key set cache {path}: {exc.strerror}; give a cache folder "
            "this process may write (it keeps the newest version seen, against rollback)",
            key="cache_dir",
        ) from None
