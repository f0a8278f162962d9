"""Help and error messages show what they say: TOML table names such as ``[api]`` as
written, flags without a made-up value type, arguments in the usual ``RECORD`` form."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hatp.cli import app

runner = CliRunner()

COMMANDS = [
    ["demo"],
    ["verify"],
    ["verify-call"],
    ["serve"],
    ["recover"],
    ["invite"],
    ["api-token"],
    ["keys", "new"],
    ["keys", "public"],
    ["txn", "submit"],
    ["txn", "status"],
    ["txn", "record"],
    ["txn", "list"],
    ["txn", "undo"],
    [],
]


def _help(command: list[str]) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "hatp")
def test_help_shows_flags_bare_and_arguments_plainly(command: list[str]) -> None:
    text = _help(command)
    assert "<bool>" not in text
    assert "{" not in text.split("\n\n", 1)[0], text  # the usage line
    assert "(default" not in text and "[default: (" not in text


def test_verify_usage_names_its_argument() -> None:
    assert "Usage: hatp verify [OPTIONS] RECORD" in _help(["verify"])


@pytest.mark.parametrize(
    ("command", "tables"),
    [
        (["serve"], ["[server]", "[gateway]", "[directory]", "[coordinator]", "[web]", "[api]"]),
        (["api-token"], ["[api] callers"]),
        (["invite"], ["[web]"]),
    ],
)
def test_help_shows_toml_table_names(command: list[str], tables: list[str]) -> None:
    text = " ".join(_help(command).split())
    for table in tables:
        assert table in text, table
    assert "\\[" not in text


def test_an_error_naming_tables_shows_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = tmp_path / "hatp.toml"
    settings.write_text("[server]\nport = 8123\n", encoding="utf-8")
    result = runner.invoke(app, ["serve", "--config", str(settings)])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "configure [gateway], [directory] or [coordinator]" in text, text
