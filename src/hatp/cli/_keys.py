"""``hatp keys``: make a key, print its public half or thumbprint, publish an
organisation's signed key set, fetch a partner's into a keyring (docs/spec.md §4
[KEYSET-CLI])."""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from hatp.cli._app import HatpCommand, err, escape, keys_app, refuse, reports_errors
from hatp.cli._paths import file_to_write, folder_to_use

if TYPE_CHECKING:
    from hatp.evidence import PublicKey, SigningKey, VerifiedKeySet

# The evidence layer loads when a command runs (``hatp --help`` stays light).

#: A wire time at the end of a ``--key`` spec (times hold colons, as issuers do).
_TRAILING_TIME = re.compile(r":([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)$")
_KEY_SPEC = "ROLE:ISSUER:KEYFILE[:NOT_BEFORE[:NOT_AFTER]]"


@keys_app.command("new", cls=HatpCommand)
@reports_errors
def new(
    kid: Annotated[str, typer.Option("--kid", help="Key id, e.g. coordinator-1.")],
    out: Annotated[Path, typer.Option("--out", help="Private key file to write (mode 0600).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Make a new Ed25519 signing key and write it as a private JWK.

    Exit 2 when the file exists (without --force) or cannot be written there.
    """
    from hatp.evidence import SigningKey

    file_to_write(out, "--out")
    key = SigningKey.generate(kid)
    key.save(out, overwrite=force)
    err.print(f"wrote private key [bold]{escape(kid)}[/] to {escape(out)} (keep it secret)")
    typer.echo(json.dumps(key.public.to_jwk()))


@keys_app.command("public", cls=HatpCommand)
@reports_errors
def public(
    file: Annotated[Path, typer.Argument(help="Private key file written by `hatp keys new`.")],
    issuer: Annotated[
        str | None,
        typer.Option("--issuer", help="Print a keyring entry vouched for by this issuer."),
    ] = None,
) -> None:
    """Print the public JWK of a key file (never the private part)."""
    from hatp.evidence import SigningKey

    jwk: dict[str, str] = SigningKey.load(file).public.to_jwk()
    if issuer is not None:
        jwk["issuer"] = issuer
    typer.echo(json.dumps(jwk, indent=2))


@keys_app.command("thumbprint", cls=HatpCommand)
@reports_errors
def thumbprint(
    file: Annotated[
        Path, typer.Argument(help="A private key file (`hatp keys new`) or a public JWK file.")
    ],
) -> None:
    """Print the RFC 7638 thumbprint of a key file's public key: what a partner pins for
    an organisation's root key.

    Exit 2 when the file is not a key.
    """
    from hatp.evidence import thumbprint as rfc7638

    typer.echo(rfc7638(_public_key(file)))


@keys_app.command("publish", cls=HatpCommand)
@reports_errors
def publish(
    root: Annotated[Path, typer.Option("--root", help="The organisation's root private key file.")],
    org: Annotated[str, typer.Option("--org", help='The organisation, e.g. "https://acme.com".')],
    version: Annotated[
        int,
        typer.Option("--version", min=1, help="The set's version: above the previous set's."),
    ],
    out: Annotated[Path, typer.Option("--out", help="The key set file to write.")],
    valid_days: Annotated[
        int,
        typer.Option("--valid-days", min=1, max=3650, help="Days until partners fetch it again."),
    ] = 30,
    key: Annotated[
        list[str] | None,
        typer.Option(
            "--key",
            help=f"A key to list, {_KEY_SPEC} (KEYFILE a private key or public JWK file; "
            "times YYYY-MM-DDTHH:MM:SS.mmmZ, NOT_BEFORE default now).",
            show_default=False,
        ),
    ] = None,
    retire: Annotated[
        list[str] | None,
        typer.Option(
            "--retire",
            help="KID@TIME: the key signs nothing after TIME (or now); what it signed stays valid.",
            show_default=False,
        ),
    ] = None,
    revoke: Annotated[
        list[str] | None,
        typer.Option(
            "--revoke",
            help="KID@TIME: nothing the key signed at or after TIME (or now) verifies.",
            show_default=False,
        ),
    ] = None,
    previous: Annotated[
        Path | None,
        typer.Option(
            "--from", help="The previous key set: start from its keys.", show_default=False
        ),
    ] = None,
) -> None:
    """Build the organisation's key set and sign it with its root key: served at
    /.well-known/hatp-keys.json ([keys] set of hatp serve). Prints on stderr the root's
    thumbprint, which partners pin.

    Rotate: --from the previous set, --key the new key, --retire the old one. Revoke:
    --from the previous set, --revoke KID@TIME. Exit 2 on a bad spec, an unknown kid, or
    a version not above the previous set's.
    """
    from hatp.clock import SystemClock, format_time
    from hatp.evidence import SigningKey, sign_key_set
    from hatp.evidence import thumbprint as rfc7638

    file_to_write(out, "--out")
    root_key = SigningKey.load(root)
    now = SystemClock().now()
    keys: list[dict[str, Any]] = []
    if previous is not None:
        keys = _previous_keys(previous, root_key, org, version, now)
    keys += [_listed_key(spec, now) for spec in key or ()]
    for spec in retire or ():
        _change(keys, spec, "--retire", now)
    for spec in revoke or ():
        _change(keys, spec, "--revoke", now)
    expires = now + timedelta(days=valid_days)
    doc = sign_key_set(
        root_key, organisation=org, version=version, issued_at=now, expires_at=expires, keys=keys
    )
    _write_atomically(out, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    err.print(
        f"wrote the key set of {org}, version {version}, {len(keys)} keys, expiring "
        f"{format_time(expires)}, to {out}",
        markup=False,
    )
    err.print(f"partners pin the root's thumbprint: {rfc7638(root_key.public)}", markup=False)


@keys_app.command("fetch", cls=HatpCommand)
@reports_errors
def fetch(
    url: Annotated[
        str,
        typer.Argument(help="The organisation's base URL, or its key set's URL."),
    ],
    pin: Annotated[
        str,
        typer.Option("--pin", help="Its root key's thumbprint, as it gave it to you."),
    ],
    out: Annotated[Path, typer.Option("--out", help="The keyring file to write.")],
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            help="Folder keeping the newest set seen (used for an hour, then while the "
            "publisher cannot be reached and it is unexpired; refuses rollback).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Fetch an organisation's key set, check it against the pinned root, and write its
    keys (with their periods) as a keyring for hatp verify and hatp serve.

    Exit 2 when the set cannot be fetched or is refused (KEYSET_INVALID and its reason).
    """
    from hatp.evidence import discover_key_set

    file_to_write(out, "--out")
    if cache is not None:
        folder_to_use(cache, "--cache")
    verified = discover_key_set(url, pin=pin, cache_dir=cache)
    verified.keyring().save(out)
    _describe(verified, out)


def _describe(verified: VerifiedKeySet, out: Path) -> None:
    from hatp.clock import format_time

    err.print(
        f"key set of {verified.organisation}, version {verified.version}, expires "
        f"{format_time(verified.expires_at)}; wrote its keyring to {out}",
        markup=False,
    )
    for key in verified.keys:
        period = f"{key.not_before} … {key.not_after or 'open'}"
        revoked = f", revoked at {key.revoked_at}" if key.revoked_at else ""
        err.print(
            f"  {key.kid}  {key.role}  {key.issuer}  {period}  {key.status}{revoked}",
            markup=False,
        )


def _public_key(path: Path) -> PublicKey:
    """The public key of a private key file or a public JWK file.

    Raises:
        KeyInvalid: unreadable, not JSON, or neither.
    """
    from hatp.errors import InvalidJson, KeyInvalid
    from hatp.evidence import PublicKey, SigningKey, parse_json

    try:
        doc = parse_json(path.read_bytes())
    except OSError as exc:
        raise KeyInvalid(f"cannot read key file {path}: {exc.strerror}") from None
    except InvalidJson as exc:
        raise KeyInvalid(f"{path} is not a key file: {exc.message}") from None
    if not isinstance(doc, dict):
        raise KeyInvalid(f"{path} is not a key file: a JWK is a JSON object")
    if "d" in doc:
        return SigningKey.load(path).public
    try:
        return PublicKey.from_jwk(doc)
    except KeyInvalid as exc:
        raise KeyInvalid(f"{path}: {exc.message}", kid=exc.data.get("kid")) from None


def _previous_keys(
    path: Path, root: SigningKey, org: str, version: int, now: datetime
) -> list[dict[str, Any]]:
    """The keys of the previous set at ``path``, once it is this root's set of ``org``
    (checked as a partner would, at its own issue time: it may have expired since) and
    ``version`` is above its own.

    Raises:
        KeySetInvalid: not a set this root signed (the message names ``--from``).
        ConfigInvalid: another organisation's, or ``version`` not above it.
    """
    from hatp.clock import parse_time
    from hatp.errors import InvalidJson, KeySetInvalid, TimeInvalid, VersionUnsupported
    from hatp.evidence import parse_json, verify_key_set
    from hatp.evidence import thumbprint as rfc7638

    try:
        doc = parse_json(path.read_bytes())
    except InvalidJson as exc:
        refuse(f"--from {path} is not a key set: {exc.message}", key="--from")
    issued = doc.get("issuedAt") if isinstance(doc, dict) else None
    try:
        at = parse_time(issued) if isinstance(issued, str) else None
    except TimeInvalid:
        at = None
    try:
        # Without a readable issuedAt the form is refused before the time is looked at.
        seen = verify_key_set(doc, pin=rfc7638(root.public), now=at or now)
    except (KeySetInvalid, VersionUnsupported) as exc:
        raise type(exc)(f"--from {path}: {exc.message}", **exc.data) from None
    if seen.organisation != org:
        refuse(f"--from {path} is the key set of {seen.organisation}, not of {org}", key="--org")
    if version <= seen.version:
        refuse(
            f"--version {version} is not above the previous set's ({seen.version}): partners "
            f"refuse a set older than one they saw; give --version {seen.version + 1} or more",
            key="--version",
        )
    return [key.to_wire() for key in seen.keys]


def _listed_key(spec: str, now: datetime) -> dict[str, Any]:
    """A key set entry from ``ROLE:ISSUER:KEYFILE[:NOT_BEFORE[:NOT_AFTER]]``.

    Raises:
        ConfigInvalid: key ``--key``: not of that form, or an unknown role.
        KeyInvalid: the key file is not a key.
    """
    from hatp.clock import format_time
    from hatp.model import KeyRole

    rest, times = spec, list[str]()
    while len(times) < 2 and (found := _TRAILING_TIME.search(rest)):
        times.insert(0, found.group(1))
        rest = rest[: found.start()]
    role, _, middle = rest.partition(":")
    issuer, _, file = middle.rpartition(":")
    if not role or not issuer or not file:
        refuse(
            f"--key {spec!r} is not {_KEY_SPEC} (e.g. gateway:https://gateway.acme.com:"
            "keys/gateway.jwk)",
            key="--key",
        )
    if role not in get_args(KeyRole):
        refuse(f"--key {spec!r}: the role is one of {', '.join(get_args(KeyRole))}", key="--key")
    entry: dict[str, Any] = {
        **_public_key(Path(file)).to_jwk(),
        "role": role,
        "issuer": issuer,
        "notBefore": times[0] if times else format_time(now),
        "status": "active",
    }
    if len(times) == 2:
        entry["notAfter"] = times[1]
    return entry


def _change(keys: list[dict[str, Any]], spec: str, option: str, now: datetime) -> None:
    """Apply ``--retire KID@TIME`` (notAfter, status retired) or ``--revoke KID@TIME``
    (revokedAt, status revoked) to the key ``KID`` of ``keys``.

    Raises:
        ConfigInvalid: key ``option``: not KID@TIME, a time that is not one, or a kid no
            key of the set has.
    """
    from hatp.clock import format_time, parse_time
    from hatp.errors import TimeInvalid

    kid, _, when = spec.rpartition("@")
    if not kid or not when:
        refuse(
            f"{option} {spec!r} is not KID@TIME (TIME YYYY-MM-DDTHH:MM:SS.mmmZ or now)", key=option
        )
    try:
        at = format_time(now if when == "now" else parse_time(when))
    except TimeInvalid as exc:
        refuse(f"{option} {spec!r}: {exc.message}", key=option)
    entry = next((k for k in keys if k["kid"] == kid), None)
    if entry is None:
        listed = ", ".join(k["kid"] for k in keys) or "none"
        refuse(f"{option} {spec!r}: the set has no key {kid!r} (it has: {listed})", key=option)
    if entry["status"] == "revoked":
        refuse(f"{option} {spec!r}: key {kid!r} is revoked already", key=option)
    if option == "--retire":
        entry.update(notAfter=at, status="retired")
    else:
        entry.update(status="revoked", revokedAt=at)


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a server reading it sees the old set or the new."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # a public document: mkstemp made it 0600
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
