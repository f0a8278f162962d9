"""``hatp keys new`` and ``hatp keys public``: stdout is the public JWK, errors exit 2."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.evidence import PublicKey, SigningKey

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
