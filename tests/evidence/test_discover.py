"""Discovering key sets over real HTTP ([KEYSET-FETCH]): fetch and verify, the cache and its
expiry, rollback refused across restarts, what cannot be fetched, and rotation and
revocation as a partner sees them."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from evidence.keysets import (
    COORD,
    COORDINATOR,
    GATEWAY,
    GATEWAY_NEW,
    GATEWAY_OLD,
    NOW,
    ORG,
    OTHER_ROOT,
    PIN,
    ROOT,
    listed,
)
from hatp.clock import format_time
from hatp.errors import KEYSET_REASONS, ConfigInvalid, KeySetInvalid, SignatureInvalid
from hatp.evidence import (
    Keyring,
    SigningKey,
    VerifiedKeySet,
    discover_key_set,
    sign,
    sign_key_set,
    thumbprint,
    verify,
)
from hatp.model import KEYSET_PATH
from hatp.version import PROTOCOL_VERSION
from threaded_server import serving_in_thread

LOGGER = "hatp.evidence.discover"


def _set(
    version: int = 1,
    *,
    keys: list[dict[str, Any]] | None = None,
    root: SigningKey = ROOT,
    issued_at: datetime = NOW - timedelta(hours=1),
    expires_at: datetime = NOW + timedelta(days=7),
) -> dict[str, Any]:
    chosen = keys or [
        listed(GATEWAY_OLD, "gateway", GATEWAY),
        listed(COORD, "coordinator", COORDINATOR),
    ]
    return sign_key_set(
        root,
        organisation=ORG,
        version=version,
        issued_at=issued_at,
        expires_at=expires_at,
        keys=chosen,
    )


def _bytes(doc: Any) -> bytes:
    return json.dumps(doc, indent=2).encode()


@dataclass
class Publisher:
    """What the organisation's server answers at the well-known path, changed by a test
    between fetches; ``fetched`` counts the requests it answered there."""

    body: bytes = b""
    status: int = 200
    fetched: int = 0
    chunks: list[bytes] = field(default_factory=list)

    def app(self) -> Starlette:
        async def key_set(_: Request) -> Response:
            self.fetched += 1
            if self.chunks:
                return StreamingResponse(_stream(self.chunks), media_type="application/json")
            return Response(self.body, status_code=self.status, media_type="application/json")

        async def elsewhere(_: Request) -> Response:
            return RedirectResponse(KEYSET_PATH, status_code=302)

        async def away(_: Request) -> Response:
            return RedirectResponse(f"http://localhost:1{KEYSET_PATH}", status_code=302)

        return Starlette(
            routes=[
                Route(KEYSET_PATH, key_set),
                Route("/keys/moved", elsewhere),
                Route("/keys/away", away),
            ]
        )


async def _stream(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@pytest.fixture
def publisher() -> Iterator[tuple[Publisher, str]]:
    published = Publisher(body=_bytes(_set()))
    with serving_in_thread(published.app()) as url:
        yield published, url


def _closed_port_url() -> str:
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nobody listens there now
    return f"http://127.0.0.1:{port}"


def _refusal(url: str, **options: Any) -> KeySetInvalid:
    with pytest.raises(KeySetInvalid) as caught:
        discover_key_set(url, **{"pin": PIN, "now": NOW, **options})
    assert caught.value.reason in KEYSET_REASONS
    return caught.value


def _object(by: SigningKey) -> dict[str, Any]:
    return sign({"hatpVersion": PROTOCOL_VERSION, "type": "approval", "amount": "10.00"}, by)


# --- fetching and verifying ----------------------------------------------------------------------


def test_a_published_set_gives_a_keyring_that_verifies_its_keys_signatures(
    publisher: tuple[Publisher, str],
) -> None:
    """[KEYSET-FETCH] the base URL gets the well-known path; the set verifies under the pin,
    and its keyring checks what the gateway key signed (with its period)."""
    _, url = publisher
    verified = discover_key_set(url, pin=PIN, now=NOW)
    assert (verified.organisation, verified.version) == (ORG, 1)
    assert verified.root_thumbprint == PIN
    ring = verified.keyring()
    assert verify(_object(GATEWAY_OLD), ring, at=NOW).issuer == GATEWAY
    same = discover_key_set(url + KEYSET_PATH, pin=PIN, now=NOW)
    assert same == verified
    assert discover_key_set(url + "/", pin=PIN, now=NOW) == verified


def test_keyring_discover_is_the_keyring_of_the_set(publisher: tuple[Publisher, str]) -> None:
    """[KEYSET-FETCH] Keyring.discover gives the keyring of the verified set, periods kept."""
    _, url = publisher
    ring = Keyring.discover(url, pin=PIN, now=NOW)
    assert ring.kids() == sorted([GATEWAY_OLD.kid, COORD.kid])
    assert ring.trusted_issuers == sorted([GATEWAY, COORDINATOR])
    period = ring.period(COORD.kid)
    assert period is not None and (period.organisation, period.set_version) == (ORG, 1)
    with pytest.raises(SignatureInvalid) as caught:
        verify(_object(ROOT), ring, at=NOW)
    assert caught.value.reason == "KID_UNKNOWN"  # the root signs key sets only


def test_a_set_signed_by_another_root_than_the_pin_is_refused(
    publisher: tuple[Publisher, str],
) -> None:
    """[KEYSET-PIN] [KEYSET-FETCH] ROOT_MISMATCH: the published set is another root's."""
    published, url = publisher
    published.body = _bytes(_set(root=OTHER_ROOT))
    refusal = _refusal(url)
    assert refusal.reason == "ROOT_MISMATCH"
    assert refusal.data["thumbprint"] == thumbprint(OTHER_ROOT.public)


def test_a_pin_that_is_not_a_thumbprint_is_refused_before_fetching(
    publisher: tuple[Publisher, str], tmp_path: Path
) -> None:
    """[KEYSET-PIN] a pin of another form is ROOT_MISMATCH at once: nothing is fetched,
    and no cache file is named after it."""
    published, url = publisher
    for pin in ("", "../../etc/passwd", PIN[:-1], PIN + "A"):
        refusal = _refusal(url, pin=pin, cache_dir=tmp_path)
        assert refusal.reason == "ROOT_MISMATCH"
        assert "thumbprint" in refusal.message
    assert published.fetched == 0
    assert list(tmp_path.iterdir()) == []


def test_an_unsigned_set_is_refused(publisher: tuple[Publisher, str]) -> None:
    """[KEYSET-ORDER] [KEYSET-FETCH] UNSIGNED: a set served without its signature."""
    published, url = publisher
    doc = _set()
    del doc["signature"]
    published.body = _bytes(doc)
    assert _refusal(url).reason == "UNSIGNED"


def test_an_expired_set_is_refused(publisher: tuple[Publisher, str]) -> None:
    """[KEYSET-ORDER] [KEYSET-FETCH] EXPIRED: the server still serves a set past its expiry."""
    published, url = publisher
    published.body = _bytes(_set(expires_at=NOW))
    refusal = _refusal(url)
    assert refusal.reason == "EXPIRED"
    assert refusal.data["expiresAt"] == format_time(NOW)


# --- what cannot be fetched -----------------------------------------------------------------------


def test_a_server_that_is_not_there_is_unreachable() -> None:
    """[KEYSET-FETCH] UNREACHABLE: a refused connection; the message names the URL."""
    url = _closed_port_url()
    refusal = _refusal(url)
    assert refusal.reason == "UNREACHABLE"
    assert refusal.data["rule"] == "KEYSET-FETCH"
    assert refusal.data["url"] == url + KEYSET_PATH
    assert "check the URL" in refusal.message


def test_a_server_that_does_not_answer_in_time_is_unreachable() -> None:
    """[KEYSET-FETCH] UNREACHABLE: a socket that takes the connection and never answers."""
    silent = socket.create_server(("127.0.0.1", 0))  # listens; never accepts or answers
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        refusal = _refusal(url, timeout_seconds=0.2)
    finally:
        silent.close()
    assert refusal.reason == "UNREACHABLE"
    assert "no answer within 0.2 s" in refusal.message


@pytest.mark.parametrize(
    ("status", "body", "fragment"),
    [
        (404, b'{"code": "NOT_FOUND"}', "HTTP 404"),
        (500, b"oops", "HTTP 500"),
        (200, b"<html>not a key set</html>", "not JSON"),
        (200, b'{"keys": [1, 2], "keys": []}', "not JSON"),
        (200, b"x" * (1024 * 1024 + 1), "larger than 1048576 bytes"),
    ],
    ids=["not-found", "server-error", "html", "duplicate-member", "too-large"],
)
def test_what_is_not_a_json_answer_of_200_is_unreachable(
    publisher: tuple[Publisher, str], status: int, body: bytes, fragment: str
) -> None:
    """[KEYSET-FETCH] UNREACHABLE: an error status, what is not strict JSON, more than 1 MiB
    (declared by Content-Length)."""
    published, url = publisher
    published.status, published.body = status, body
    refusal = _refusal(url)
    assert refusal.reason == "UNREACHABLE"
    assert fragment in refusal.message, refusal.message


def test_a_body_streamed_past_the_limit_is_unreachable(publisher: tuple[Publisher, str]) -> None:
    """[KEYSET-FETCH] UNREACHABLE: no Content-Length (chunked), and more than 1 MiB comes."""
    published, url = publisher
    published.chunks = [b"[" + b"1," * 1000] * 700
    refusal = _refusal(url)
    assert refusal.reason == "UNREACHABLE"
    assert refusal.data["limit"] == 1024 * 1024


def test_a_redirect_is_followed_on_the_same_origin_only(publisher: tuple[Publisher, str]) -> None:
    """[KEYSET-FETCH] a redirect to the same origin is followed; to another origin
    (localhost is not 127.0.0.1) it is UNREACHABLE, naming where it led."""
    _, url = publisher
    assert discover_key_set(f"{url}/keys/moved", pin=PIN, now=NOW).version == 1
    refusal = _refusal(f"{url}/keys/away")
    assert refusal.reason == "UNREACHABLE"
    assert "another origin" in refusal.message
    assert refusal.data["location"] == f"http://localhost:1{KEYSET_PATH}"


@pytest.mark.parametrize("url", ["acme.com", "ftp://acme.com/keys.json", "file:///etc/passwd"])
def test_what_is_not_an_http_url_is_refused(url: str) -> None:
    """[KEYSET-FETCH] UNREACHABLE: only http:// and https:// URLs are fetched."""
    refusal = _refusal(url)
    assert refusal.reason == "UNREACHABLE"
    assert "http:// or https://" in refusal.message


# --- the cache ---------------------------------------------------------------------------------


def test_an_unexpired_cached_set_is_used_without_fetching(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """[KEYSET-FETCH] the cache: the set fetched once is used for an hour without asking,
    the server down; after that it is asked for again, and with the server down the
    cached set is used while unexpired (a warning says revocations since are not seen);
    once it expired, a server down is UNREACHABLE (never the stale set)."""
    published = Publisher(body=_bytes(_set(expires_at=NOW + timedelta(days=1))))
    with serving_in_thread(published.app()) as url:
        first = discover_key_set(url, pin=PIN, now=NOW, cache_dir=tmp_path)
    assert published.fetched == 1
    cached = json.loads((tmp_path / f"{PIN}.json").read_text(encoding="utf-8"))
    assert (cached["pin"], cached["newestVersion"], cached["newestDigest"]) == (
        PIN,
        1,
        first.digest,
    )
    caplog.set_level(logging.INFO, logger=LOGGER)
    soon = NOW + timedelta(minutes=59)
    assert discover_key_set(url, pin=PIN, now=soon, cache_dir=tmp_path) == first
    assert any("from the cache" in r.getMessage() for r in caplog.records)
    later = NOW + timedelta(hours=23)
    again = discover_key_set(url, pin=PIN, now=later, cache_dir=tmp_path)
    assert again == first
    assert any("revocation published since is not seen" in r.getMessage() for r in caplog.records)
    refusal = _refusal(url, now=NOW + timedelta(days=1), cache_dir=tmp_path)
    assert refusal.reason == "UNREACHABLE"


def test_a_set_older_than_the_newest_seen_is_refused_across_restarts(
    publisher: tuple[Publisher, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """[KEYSET-FETCH] [KEYSET-ORDER] ROLLED_BACK: version 3 was accepted (and cached); once it
    expired the server serves version 2, newer in its times: refused, call after call (each
    call starts from the cache file alone, as a restarted process does); without the cache
    it would have been taken."""
    published, url = publisher
    published.body = _bytes(_set(3, expires_at=NOW + timedelta(days=1)))
    assert discover_key_set(url, pin=PIN, now=NOW, cache_dir=tmp_path).version == 3
    published.body = _bytes(_set(2, issued_at=NOW, expires_at=NOW + timedelta(days=30)))
    later = NOW + timedelta(days=2)
    caplog.set_level(logging.INFO, logger=LOGGER)
    for _ in range(2):
        refusal = _refusal(url, now=later, cache_dir=tmp_path)
        assert refusal.reason == "ROLLED_BACK"
        assert refusal.data["newestSeen"] == 3
    assert any("refused" in r.getMessage() for r in caplog.records if r.name == LOGGER)
    cached = json.loads((tmp_path / f"{PIN}.json").read_text(encoding="utf-8"))
    assert cached["newestVersion"] == 3
    assert discover_key_set(url, pin=PIN, now=later).version == 2


def test_another_set_under_the_version_seen_is_refused(
    publisher: tuple[Publisher, str], tmp_path: Path
) -> None:
    """[KEYSET-FETCH] ROLLED_BACK: the same version re-signed with other keys (a key
    un-revoked) after the cached one expired; a newer version is then accepted and cached."""
    published, url = publisher
    published.body = _bytes(_set(4, expires_at=NOW + timedelta(days=1)))
    first = discover_key_set(url, pin=PIN, now=NOW, cache_dir=tmp_path)
    later = NOW + timedelta(days=2)
    published.body = _bytes(_set(4, issued_at=later, expires_at=later + timedelta(days=1)))
    refusal = _refusal(url, now=later, cache_dir=tmp_path)
    assert refusal.reason == "ROLLED_BACK"
    assert refusal.data["newestDigest"] == first.digest
    published.body = _bytes(_set(5, issued_at=later, expires_at=later + timedelta(days=1)))
    assert discover_key_set(url, pin=PIN, now=later, cache_dir=tmp_path).version == 5
    cached = json.loads((tmp_path / f"{PIN}.json").read_text(encoding="utf-8"))
    assert cached["newestVersion"] == 5


def _not_json(path: Path, _: dict[str, Any]) -> None:
    path.write_text("{not json", encoding="utf-8")


def _other_pin(path: Path, cached: dict[str, Any]) -> None:
    path.write_text(json.dumps({**cached, "pin": thumbprint(OTHER_ROOT.public)}), encoding="utf-8")


def _tampered_set(path: Path, cached: dict[str, Any]) -> None:
    """A key swapped into the cached set, and the digest brought in line: the root's
    signature no longer verifies."""
    from hatp.evidence import digest

    mallory = SigningKey.from_seed(bytes([99]) * 32, "gateway-mallory")
    doc = cached["keySet"]
    doc["keys"][0] = listed(mallory, "gateway", GATEWAY)
    path.write_text(json.dumps({**cached, "newestDigest": digest(doc)}), encoding="utf-8")


def _version_raised(path: Path, cached: dict[str, Any]) -> None:
    """The newest version raised beyond the cached set's: it would refuse every set."""
    path.write_text(json.dumps({**cached, "newestVersion": 99}), encoding="utf-8")


def _missing_member(path: Path, cached: dict[str, Any]) -> None:
    path.write_text(json.dumps({k: v for k, v in cached.items() if k != "keySet"}), "utf-8")


@pytest.mark.parametrize(
    "corrupt", [_not_json, _other_pin, _tampered_set, _version_raised, _missing_member]
)
def test_a_corrupt_cache_is_ignored_and_the_set_fetched_again(
    publisher: tuple[Publisher, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    corrupt: Any,
) -> None:
    """[KEYSET-FETCH] a cache file that does not verify is never trusted: a warning is
    logged, the set is fetched, and the cache written again."""
    published, url = publisher
    discover_key_set(url, pin=PIN, now=NOW, cache_dir=tmp_path)
    path = tmp_path / f"{PIN}.json"
    corrupt(path, json.loads(path.read_text(encoding="utf-8")))
    caplog.set_level(logging.INFO, logger=LOGGER)
    verified = discover_key_set(url, pin=PIN, now=NOW, cache_dir=tmp_path)
    assert verified.version == 1
    assert published.fetched == 2
    warned = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert warned and "ignored the key set cache" in warned[0].getMessage()
    assert json.loads(path.read_text(encoding="utf-8"))["newestDigest"] == verified.digest


def test_a_cache_that_cannot_be_written_is_config_invalid(
    publisher: tuple[Publisher, str], tmp_path: Path
) -> None:
    """[KEYSET-FETCH] the newest version seen must be kept: a cache folder that cannot be
    made is CONFIG_INVALID naming it, not a silent loss of rollback protection."""
    _, url = publisher
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(ConfigInvalid) as caught:
        discover_key_set(url, pin=PIN, now=NOW, cache_dir=blocker / "cache")
    assert caught.value.data["key"] == "cache_dir"


# --- rotation and revocation, as a partner fetches them ------------------------------------------

ROTATED_AT = datetime(2026, 6, 30, 23, 59, 59, 999000, tzinfo=UTC)
REVOKED_AT = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _rotated(version: int, *, revoked: bool = False, at: datetime = NOW) -> dict[str, Any]:
    coordinator = (
        listed(
            COORD, "coordinator", COORDINATOR, status="revoked", revokedAt=format_time(REVOKED_AT)
        )
        if revoked
        else listed(COORD, "coordinator", COORDINATOR)
    )
    keys = [
        listed(GATEWAY_OLD, "gateway", GATEWAY, notAfter=format_time(ROTATED_AT), status="retired"),
        listed(
            GATEWAY_NEW, "gateway", GATEWAY, notBefore=format_time(datetime(2026, 6, 1, tzinfo=UTC))
        ),
        coordinator,
    ]
    return _set(version, keys=keys, issued_at=at, expires_at=at + timedelta(days=7))


def _fetch_in_turn(
    published: Publisher, url: str, cache: Path, docs: list[dict[str, Any]]
) -> VerifiedKeySet:
    """Each set published in turn, and fetched once the one before expired."""
    verified = None
    for week, doc in enumerate(docs):
        published.body = _bytes(doc)
        at = NOW + timedelta(days=8 * week)
        verified = discover_key_set(url, pin=PIN, now=at, cache_dir=cache)
        assert verified.version == doc["version"]
    assert verified is not None
    return verified


def test_a_rotated_key_verifies_what_it_signed_until_its_not_after(
    publisher: tuple[Publisher, str], tmp_path: Path
) -> None:
    """[SIG-PERIOD] [KEYSET-FETCH] rotation: version 2 adds the new gateway key and retires
    the old one with notAfter; the old key's signature made before then verifies, made
    after it is KEY_EXPIRED; the new key verifies now."""
    published, url = publisher
    ring = _fetch_in_turn(
        published, url, tmp_path, [_set(1), _rotated(2, at=NOW + timedelta(days=8))]
    ).keyring()
    signed = _object(GATEWAY_OLD)
    assert verify(signed, ring, at=ROTATED_AT - timedelta(days=30)).kid == GATEWAY_OLD.kid
    with pytest.raises(SignatureInvalid) as caught:
        verify(signed, ring, at=ROTATED_AT + timedelta(milliseconds=1))
    assert caught.value.reason == "KEY_EXPIRED"
    assert verify(_object(GATEWAY_NEW), ring, at=NOW).kid == GATEWAY_NEW.kid


def test_a_revoked_key_verifies_what_it_signed_before_revocation_only(
    publisher: tuple[Publisher, str], tmp_path: Path
) -> None:
    """[SIG-PERIOD] [KEYSET-FETCH] revocation: version 3 revokes the coordinator's key at T;
    its signature at T-1 ms verifies, at T+1 ms it is KEY_REVOKED."""
    published, url = publisher
    docs = [
        _set(1),
        _rotated(2, at=NOW + timedelta(days=8)),
        _rotated(3, revoked=True, at=NOW + timedelta(days=16)),
    ]
    ring = _fetch_in_turn(published, url, tmp_path, docs).keyring()
    signed = _object(COORD)
    assert verify(signed, ring, at=REVOKED_AT - timedelta(milliseconds=1)).kid == COORD.kid
    with pytest.raises(SignatureInvalid) as caught:
        verify(signed, ring, at=REVOKED_AT + timedelta(milliseconds=1))
    assert caught.value.reason == "KEY_REVOKED"


def test_a_cached_set_is_asked_for_again_after_an_hour_KEYSET_FETCH(tmp_path: Path) -> None:
    """[KEYSET-FETCH] version 1 cached; an hour later the server publishes version 2 (a key
    revoked, say): the next call fetches it, though version 1 has not expired."""
    published = Publisher(body=_bytes(_set(expires_at=NOW + timedelta(days=1))))
    with serving_in_thread(published.app()) as url:
        assert discover_key_set(url, pin=PIN, now=NOW, cache_dir=tmp_path).version == 1
        published.body = _bytes(_set(version=2, expires_at=NOW + timedelta(days=1)))
        within = discover_key_set(url, pin=PIN, now=NOW + timedelta(minutes=30), cache_dir=tmp_path)
        assert (within.version, published.fetched) == (1, 1)
        after = discover_key_set(url, pin=PIN, now=NOW + timedelta(minutes=61), cache_dir=tmp_path)
        assert (after.version, published.fetched) == (2, 2)
