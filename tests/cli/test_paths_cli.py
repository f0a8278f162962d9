"""Every file and path a command is given that cannot be used is a typed message on
stderr and exit 2, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from planted import FIXTURES, good_record

runner = CliRunner()
KEYRING = str(FIXTURES / "keyring.json")


def _refused(args: list[str], *said: str) -> str:
    result = runner.invoke(app, args)
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for words in said:
        assert words in text, (words, text)
    return text


def test_keys_new_into_a_missing_folder_says_so(tmp_path: Path) -> None:
    """[CLI-PATHS] a missing folder: CONFIG_INVALID naming --out, exit 2, nothing made."""
    out = tmp_path / "missing" / "k.jwk"
    _refused(["keys", "new", "--kid", "k", "--out", str(out)], "CONFIG_INVALID", "--out")
    assert not out.parent.exists()


def test_keys_new_onto_a_folder_names_the_file_to_write(tmp_path: Path) -> None:
    _refused(["keys", "new", "--kid", "k", "--out", str(tmp_path)], "is a folder")
    assert list(tmp_path.iterdir()) == []


def test_keys_new_under_something_that_is_not_a_folder_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    _refused(["keys", "new", "--kid", "k", "--out", str(tmp_path / "file" / "k.jwk")], "--out")
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_keys_new_into_a_read_only_folder_says_permission_denied(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        _refused(["keys", "new", "--kid", "k", "--out", str(tmp_path / "k.jwk")], "permission")
    finally:
        tmp_path.chmod(0o700)
    assert not (tmp_path / "k.jwk").exists()


def test_demo_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    _refused(["demo", "--out", str(tmp_path / "passwd")], "CONFIG_INVALID", "not a folder")
    assert (tmp_path / "passwd").read_text() == "root:x:0:0\n"


@pytest.mark.parametrize("out", ["/proc/x", "/proc/self/x/y"])
def test_demo_out_that_cannot_be_made_is_refused(out: str) -> None:
    _refused(["demo", "--auto", "--out", out], "CONFIG_INVALID", "cannot make folder")
    assert not Path(out).exists()


@pytest.mark.parametrize("walk", [[], ["--gated"], ["--writes"], ["--lease"], ["--mcp"]])
def test_demo_out_with_files_in_it_is_refused_before_any_work(
    tmp_path: Path, walk: list[str]
) -> None:
    (tmp_path / "record.json").write_text("{}")
    _refused(["demo", *walk, "--out", str(tmp_path)], "already holds files", "new or empty")
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_serve_demo_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    _refused(["serve", "--demo", "--demo-folder", str(tmp_path / "f")], "--demo-folder")
    assert (tmp_path / "f").read_text() == "x"


def test_serve_demo_folder_that_cannot_be_made_is_refused() -> None:
    _refused(["serve", "--demo", "--demo-folder", "/proc/x"], "cannot make folder /proc/x")
    assert not Path("/proc/x").exists()


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "record.json"
    path.write_bytes(good_record())
    return path


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["verify", "{dir}", "--keys", KEYRING], "RECORD_INVALID"),
        (["verify", "{record}", "--keys", "{dir}"], "KEYRING_INVALID"),
        (["verify", "{dir}/missing.json", "--keys", KEYRING], "RECORD_INVALID"),
        (["verify-call", "{dir}", "--keys", KEYRING], "INVALID_JSON"),
        (["verify-call", "{record}", "--keys", KEYRING, "--args", "{dir}"], "INVALID_JSON"),
        (["keys", "public", "{dir}"], "KEY_INVALID"),
        (["keys", "public", "{dir}/missing.jwk"], "KEY_INVALID"),
        (["serve", "--config", "{dir}"], "CONFIG_INVALID"),
        (["serve", "--config", "{dir}/missing.toml"], "CONFIG_INVALID"),
        (["recover", "--config", "{dir}"], "CONFIG_INVALID"),
        (["recover", "--db", "{dir}"], "STORE_UNAVAILABLE"),
        (["invite", "human://acme.com/bob", "--config", "{dir}"], "CONFIG_INVALID"),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else x,
)
def test_folders_and_missing_files_where_files_are_expected_are_refused(
    tmp_path: Path, record: Path, args: list[str], code: str
) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    given = [a.format(dir=folder, record=record) for a in args]
    _refused(given, code)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_record_is_refused(record: Path) -> None:
    record.chmod(0)
    try:
        _refused(["verify", str(record), "--keys", KEYRING], "RECORD_INVALID")
    finally:
        record.chmod(0o600)
