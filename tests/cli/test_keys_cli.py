"""``hatp keys``: ``new`` and ``public`` (stdout the public JWK), ``thumbprint``, ``publish``
and ``fetch`` (an organisation's key set); errors exit 2."""

from __future__ import annotations

import contextlib
import json
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.evidence import Keyring, PublicKey, SigningKey, thumbprint
from threaded_server import serving_in_thread

runner = CliRunner()


def _jwk(stdout: str) -> dict[str, Any]:
    doc = json.loads(stdout)
    assert isinstance(doc, dict)
    return doc


def _new(path: Path, kid: str = "K", *extra: str) -> Any:
    return runner.invoke(app, ["keys", "new", "--kid", kid, "--out", str(path), *extra])


def test_keys_new_writes_the_key_file_and_prints_its_public_jwk(tmp_path: Path) -> None:
    """[KEY-JWK] [KEY-FILE] `keys new` writes a loadable key; stdout is its public JWK, no d."""
    path = tmp_path / "k.json"
    result = _new(path, "coordinator-1")
    assert result.exit_code == 0, result.output
    jwk = _jwk(result.stdout)
    assert "d" not in jwk
    assert set(jwk) == {"kty", "crv", "x", "kid"}
    assert jwk["kty"] == "OKP"
    assert jwk["crv"] == "Ed25519"
    assert jwk["kid"] == "coordinator-1"
    key = SigningKey.load(path)
    assert jwk == key.public.to_jwk()
    assert PublicKey.from_jwk(jwk).raw == key.public.raw
    assert key.private_jwk()["d"] not in result.output


def test_keys_new_key_file_is_readable_by_the_owner_only(tmp_path: Path) -> None:
    """[KEY-FILE] the file `keys new` writes has mode 0600."""
    path = tmp_path / "k.json"
    assert _new(path).exit_code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_keys_new_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    """[KEY-FILE] a second `keys new` on the same file exits 2 with KEY_INVALID, file kept."""
    path = tmp_path / "k.json"
    assert _new(path).exit_code == 0
    before = path.read_bytes()
    result = _new(path)
    assert result.exit_code == 2
    assert "KEY_INVALID" in result.output
    assert "KEY_INVALID" in result.stderr
    assert result.stdout == ""
    assert path.read_bytes() == before


def test_keys_new_with_force_replaces_the_key(tmp_path: Path) -> None:
    """[KEY-FILE] `keys new --force` overwrites the file with a new key and prints it."""
    path = tmp_path / "k.json"
    first = _new(path)
    assert first.exit_code == 0
    result = _new(path, "K2", "--force")
    assert result.exit_code == 0, result.output
    jwk = _jwk(result.stdout)
    assert jwk["kid"] == "K2"
    assert jwk["x"] != _jwk(first.stdout)["x"]
    assert SigningKey.load(path).public.to_jwk() == jwk
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_keys_public_prints_the_public_jwk_without_d(tmp_path: Path) -> None:
    """[KEY-JWK] `keys public F` prints the public JWK of the key file, never d."""
    path = tmp_path / "k.json"
    key = SigningKey.from_seed(bytes(range(32)), kid="airline-1")
    key.save(path)
    result = runner.invoke(app, ["keys", "public", str(path)])
    assert result.exit_code == 0, result.output
    jwk = _jwk(result.stdout)
    assert jwk == key.public.to_jwk()
    assert "d" not in jwk
    assert key.private_jwk()["d"] not in result.output


def test_keys_public_with_issuer_prints_a_keyring_entry(tmp_path: Path) -> None:
    """[KEYRING-DOC] `keys public F --issuer X` adds issuer X to the JWK, still without d."""
    path = tmp_path / "k.json"
    key = SigningKey.from_seed(bytes(range(32)), kid="airline-1")
    key.save(path)
    issuer = "https://directory.acme.example"
    result = runner.invoke(app, ["keys", "public", str(path), "--issuer", issuer])
    assert result.exit_code == 0, result.output
    jwk = _jwk(result.stdout)
    assert jwk == {**key.public.to_jwk(), "issuer": issuer}
    assert "d" not in jwk


def test_keys_public_refuses_a_missing_file(tmp_path: Path) -> None:
    """[KEY-FILE] `keys public` on a missing file exits 2 with KEY_INVALID on stderr."""
    result = runner.invoke(app, ["keys", "public", str(tmp_path / "missing-file")])
    assert result.exit_code == 2
    assert "KEY_INVALID" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("not json", id="not-json"),
        pytest.param('{"kty": "OKP", "crv": "Ed25519"}', id="no-d"),
    ],
)
def test_keys_public_refuses_a_file_that_is_not_a_key(tmp_path: Path, content: str) -> None:
    """[KEY-FILE] `keys public` on a file that is not a private key exits 2, prints no JWK."""
    path = tmp_path / "k.json"
    path.write_text(content, encoding="utf-8")
    result = runner.invoke(app, ["keys", "public", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error" in result.stderr


def test_keys_new_refuses_an_invalid_kid_with_exit_2(tmp_path: Path) -> None:
    """[KEY-JWK] `keys new --kid 'a b'` is refused as KEY_INVALID (exit 2), no file written."""
    path = tmp_path / "k.json"
    result = _new(path, "a b")
    assert not path.exists()
    assert result.exit_code == 2
    assert "KEY_INVALID" in result.stderr


# --- [KEYSET-CLI] thumbprint, publish, fetch ------------------------------------------------------

ORG = "https://acme.com"
GATEWAY = "https://gateway.acme.com:8443"
ROOT = SigningKey.from_seed(bytes([71]) * 32, "acme-root-1")
OLD = SigningKey.from_seed(bytes([72]) * 32, "gateway-2026-01")
NEW = SigningKey.from_seed(bytes([73]) * 32, "gateway-2026-06")
#: How long a server may take to stop, at most.
WAIT = 10.0


def test_keys_thumbprint_prints_the_rfc_7638_thumbprint(tmp_path: Path) -> None:
    """[KEYSET-CLI] [KEYSET-PIN] of a private key file and of its public JWK alike; RFC 8037
    Appendix A.3's key gives the RFC's thumbprint."""
    private = tmp_path / "root.jwk"
    ROOT.save(private)
    public = tmp_path / "root.pub.json"
    public.write_text(json.dumps(ROOT.public.to_jwk()), encoding="utf-8")
    for path in (private, public):
        result = runner.invoke(app, ["keys", "thumbprint", str(path)])
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == thumbprint(ROOT.public)
    rfc = tmp_path / "rfc8037.json"
    x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    rfc.write_text(json.dumps({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k"}), "utf-8")
    result = runner.invoke(app, ["keys", "thumbprint", str(rfc)])
    assert result.stdout.strip() == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


@pytest.mark.parametrize(
    "content",
    ["not json", "[1]", '{"kty": "RSA", "kid": "k"}', '{"kty": "OKP", "crv": "Ed25519", "d": "x"}'],
    ids=["not-json", "not-object", "not-ed25519", "bad-private"],
)
def test_keys_thumbprint_refuses_what_is_not_a_key(tmp_path: Path, content: str) -> None:
    """[KEYSET-CLI] KEY_INVALID, exit 2, nothing on stdout; a missing file alike."""
    path = tmp_path / "k.json"
    path.write_text(content, encoding="utf-8")
    for target in (path, tmp_path / "missing.json"):
        result = runner.invoke(app, ["keys", "thumbprint", str(target)])
        assert result.exit_code == 2
        assert "KEY_INVALID" in result.stderr
        assert result.stdout == ""


def _keys_folder(tmp_path: Path) -> Path:
    """The root's private key, the old gateway key's private file and the new one's
    public JWK (what a party hands the publisher)."""
    ROOT.save(tmp_path / "root.jwk")
    OLD.save(tmp_path / "old.jwk")
    (tmp_path / "new.pub.json").write_text(json.dumps(NEW.public.to_jwk()), encoding="utf-8")
    return tmp_path


def _publish(folder: Path, out: str, version: int, *extra: str) -> Any:
    argv = ["keys", "publish", "--root", str(folder / "root.jwk"), "--org", ORG]
    argv += ["--version", str(version), "--out", str(folder / out), *extra]
    return runner.invoke(app, argv)


def _read_set(path: Path) -> Any:
    from hatp.clock import SystemClock
    from hatp.evidence import verify_key_set

    return verify_key_set(
        json.loads(path.read_text(encoding="utf-8")),
        pin=thumbprint(ROOT.public),
        now=SystemClock().now(),
    )


def test_keys_publish_signs_a_set_partners_verify_under_the_pin(tmp_path: Path) -> None:
    """[KEYSET-CLI] [KEYSET-DOC] `keys publish` writes a set signed by the root, with each
    --key (an issuer with a port, times given or not), expiring --valid-days later; the
    thumbprint to pin is on stderr."""
    folder = _keys_folder(tmp_path)
    old = f"gateway:{GATEWAY}:{folder / 'old.jwk'}:2026-01-01T00:00:00.000Z"
    new = (
        f"participant:mcp://airline.example:{folder / 'new.pub.json'}:"
        "2026-06-01T00:00:00.000Z:2027-06-01T00:00:00.000Z"
    )
    result = _publish(folder, "set.json", 1, "--key", old, "--key", new, "--valid-days", "7")
    assert result.exit_code == 0, result.output
    assert thumbprint(ROOT.public) in result.stderr
    verified = _read_set(folder / "set.json")
    assert (verified.organisation, verified.version) == (ORG, 1)
    assert verified.expires_at - verified.issued_at == timedelta(days=7)
    by_kid = {key.kid: key for key in verified.keys}
    assert (by_kid[OLD.kid].issuer, by_kid[OLD.kid].role) == (GATEWAY, "gateway")
    assert by_kid[OLD.kid].not_before == "2026-01-01T00:00:00.000Z"
    assert by_kid[OLD.kid].not_after is None
    assert (by_kid[NEW.kid].issuer, by_kid[NEW.kid].not_after) == (
        "mcp://airline.example",
        "2027-06-01T00:00:00.000Z",
    )
    assert stat.S_IMODE((folder / "set.json").stat().st_mode) == 0o644  # public


def test_keys_publish_rotates_and_revokes_from_the_previous_set(tmp_path: Path) -> None:
    """[KEYSET-CLI] [SIG-PERIOD] --from keeps the previous keys: version 2 adds the new key and
    retires the old at a time; version 3 revokes the new one, writing over the file read."""
    folder = _keys_folder(tmp_path)
    since = "2026-01-01T00:00:00.000Z"
    first = _publish(
        folder, "keys.json", 1, "--key", f"gateway:{GATEWAY}:{folder / 'old.jwk'}:{since}"
    )
    assert first.exit_code == 0, first.output
    previous = ["--from", str(folder / "keys.json")]
    until = "2026-06-30T23:59:59.999Z"
    rotated = _publish(
        folder, "keys.json", 2, *previous,
        "--key", f"gateway:{GATEWAY}:{folder / 'new.pub.json'}:2026-06-01T00:00:00.000Z",
        "--retire", f"{OLD.kid}@{until}",
    )  # fmt: skip
    assert rotated.exit_code == 0, rotated.output
    two = {key.kid: key for key in _read_set(folder / "keys.json").keys}
    assert (two[OLD.kid].status, two[OLD.kid].not_after) == ("retired", until)
    assert two[NEW.kid].status == "active"
    at = "2026-11-01T12:00:00.000Z"
    revoked = _publish(folder, "keys.json", 3, *previous, "--revoke", f"{NEW.kid}@{at}")
    assert revoked.exit_code == 0, revoked.output
    three = _read_set(folder / "keys.json")
    assert three.version == 3
    new = next(key for key in three.keys if key.kid == NEW.kid)
    assert (new.status, new.revoked_at) == ("revoked", at)


@pytest.mark.parametrize(
    ("extra", "version", "fragment"),
    [
        (["--from", "{prev}"], 1, "--version 1 is not above the previous set's (1)"),
        (["--key", "gateway-no-colons"], 2, "is not ROLE:ISSUER:KEYFILE"),
        (["--key", "admin:https://x.example:{folder}/old.jwk"], 2, "the role is one of"),
        (["--key", "gateway:https://x.example:{folder}/missing.jwk"], 2, "cannot read key file"),
        (["--from", "{prev}", "--revoke", "nobody@now"], 2, "the set has no key 'nobody'"),
        (["--from", "{prev}", "--revoke", "gateway-2026-01"], 2, "is not KID@TIME"),
        (["--from", "{prev}", "--retire", "gateway-2026-01@tomorrow"], 2, "not a wire time"),
        (["--from", "{prev}", "--org", "https://other.example"], 2, "not of https://other"),
        (["--from", "{folder}/old.jwk"], 2, "--from"),
    ],
    ids=[
        "version-not-above",
        "bad-key-spec",
        "unknown-role",
        "missing-key-file",
        "revoke-unknown-kid",
        "revoke-without-time",
        "retire-bad-time",
        "other-org",
        "from-not-a-set",
    ],
)
def test_keys_publish_refuses_with_exit_2(
    tmp_path: Path, extra: list[str], version: int, fragment: str
) -> None:
    """[KEYSET-CLI] a version not above the previous set's, a --key not of the form or
    with an unknown role or key file, --revoke/--retire of an unknown kid or without a
    time, another organisation's set, a --from that is not a set: exit 2, nothing written."""
    folder = _keys_folder(tmp_path)
    made = _publish(folder, "prev.json", 1, "--key", f"gateway:{GATEWAY}:{folder / 'old.jwk'}")
    assert made.exit_code == 0, made.output
    argv = [a.format(prev=folder / "prev.json", folder=folder) for a in extra]
    result = _publish(folder, "next.json", version, *argv)
    assert result.exit_code == 2, result.output
    assert fragment in " ".join(result.stderr.split()), result.stderr
    assert not (folder / "next.json").exists()


def test_keys_publish_refuses_a_previous_set_of_another_root(tmp_path: Path) -> None:
    """[KEYSET-CLI] [KEYSET-PIN] --from a set another root signed: KEYSET_INVALID
    ROOT_MISMATCH, naming --from."""
    folder = _keys_folder(tmp_path)
    other = SigningKey.from_seed(bytes([74]) * 32, "other-root")
    other.save(folder / "other.jwk")
    argv = ["keys", "publish", "--root", str(folder / "other.jwk"), "--org", ORG]
    made = runner.invoke(app, [*argv, "--version", "1", "--out", str(folder / "other.json")])
    assert made.exit_code == 0, made.output
    result = _publish(folder, "next.json", 2, "--from", str(folder / "other.json"))
    assert result.exit_code == 2
    assert "KEYSET_INVALID" in result.stderr and "--from" in result.stderr


@contextlib.contextmanager
def _serving(published: Path) -> Iterator[str]:
    """``published`` at /.well-known/hatp-keys.json, by uvicorn in a thread on a loopback
    socket already listening; yield the base URL."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from hatp.model import KEYSET_PATH

    async def key_set(_: Request) -> Response:
        return Response(published.read_bytes(), media_type="application/json")

    with serving_in_thread(Starlette(routes=[Route(KEYSET_PATH, key_set)])) as url:
        yield url


def test_keys_fetch_writes_the_keyring_of_a_served_set(tmp_path: Path) -> None:
    """[KEYSET-CLI] [KEYSET-FETCH] `keys fetch URL --pin P --out F --cache D` against a real
    server: the keyring file loads back with each key's period; stderr names the
    organisation, version, expiry and each key with its role, issuer, period and status;
    the cache then answers with the server gone."""
    folder = _keys_folder(tmp_path)
    until = "2026-06-30T23:59:59.999Z"
    made = _publish(
        folder, "hatp-keys.json", 4,
        "--key", f"gateway:{GATEWAY}:{folder / 'old.jwk'}:2026-01-01T00:00:00.000Z:{until}",
        "--key", f"gateway:{GATEWAY}:{folder / 'new.pub.json'}:2026-06-01T00:00:00.000Z",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    pin = thumbprint(ROOT.public)
    with _serving(folder / "hatp-keys.json") as url:
        result = runner.invoke(
            app,
            ["keys", "fetch", url, "--pin", pin, "--out", str(folder / "ring.json"),
             "--cache", str(folder / "cache")],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert f"key set of {ORG}, version 4, expires" in said
    assert f"{OLD.kid} gateway {GATEWAY} 2026-01-01T00:00:00.000Z … {until} active" in said
    ring = Keyring.load(folder / "ring.json")
    assert ring.kids() == sorted([OLD.kid, NEW.kid])
    period = ring.period(OLD.kid)
    assert period is not None and period.set_version == 4
    assert period.not_after == datetime(2026, 6, 30, 23, 59, 59, 999000, tzinfo=UTC)
    assert (folder / "cache" / f"{pin}.json").exists()
    again = runner.invoke(
        app,
        ["keys", "fetch", url, "--pin", pin, "--out", str(folder / "again.json"),
         "--cache", str(folder / "cache")],
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert Keyring.load(folder / "again.json").to_json() == ring.to_json()


def test_keys_fetch_refuses_another_root_and_a_server_not_there(tmp_path: Path) -> None:
    """[KEYSET-CLI] [KEYSET-FETCH] a pin of another root: KEYSET_INVALID, exit 2; a server
    not there: KEYSET_INVALID (UNREACHABLE), exit 2; no keyring written either way."""
    folder = _keys_folder(tmp_path)
    assert _publish(folder, "hatp-keys.json", 1).exit_code == 0
    out = folder / "ring.json"
    other = thumbprint(OLD.public)
    with _serving(folder / "hatp-keys.json") as url:
        wrong = runner.invoke(app, ["keys", "fetch", url, "--pin", other, "--out", str(out)])
    assert wrong.exit_code == 2
    assert "KEYSET_INVALID" in wrong.stderr and "another root" in " ".join(wrong.stderr.split())
    gone = runner.invoke(
        app, ["keys", "fetch", url, "--pin", thumbprint(ROOT.public), "--out", str(out)]
    )
    assert gone.exit_code == 2
    assert "KEYSET_INVALID" in gone.stderr and "cannot fetch" in gone.stderr
    assert not out.exists()
