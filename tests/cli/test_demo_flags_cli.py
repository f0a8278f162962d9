"""`hatp demo`: flags that cannot go together are refused (exit 2), a folder is never
reused, and what is printed to copy stays on one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.evidence import load_record

runner = CliRunner()

WALKS = ["--gated", "--mcp", "--writes", "--lease", "--web"]
CONFLICTS = [
    *([a, b] for a, b in itertools.combinations(WALKS, 2)),
    *(["--scenario", "reject", walk] for walk in WALKS),
    *(["--auto", walk] for walk in ("--writes", "--lease", "--web")),
    *([flag, *value] for flag, value in (("--passkey", []), ("--port", ["0"]))),
    *(["--gated", flag, *value] for flag, value in (("--passkey", []), ("--port", ["0"]))),
    *(
        ["--list", *other]
        for other in (["--auto"], ["--gated"], ["--scenario", "x"], ["--out", "d"])
    ),
]


@pytest.mark.parametrize("flags", CONFLICTS, ids=" ".join)
def test_flags_that_cannot_go_together_are_refused(flags: list[str]) -> None:
    """[CLI-PATHS] every pair of demo flags that cannot go together: exit 2, both named."""
    result = runner.invoke(app, ["demo", *flags])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "CONFIG_INVALID" in text
    named = [f for f in flags if f.startswith("--")]
    assert any(flag in text for flag in named), text


def test_an_unknown_scenario_is_refused_naming_the_choices() -> None:
    result = runner.invoke(app, ["demo", "--scenario", "[api]"])
    assert result.exit_code == 2
    assert "'[api]'" in result.output and "commit" in result.output


def test_running_twice_into_one_folder_is_refused_not_aborted(tmp_path: Path) -> None:
    """A second commit run in the same folder would find its seat taken by the first and
    end ABORTED with exit 0; it is refused before anything runs instead."""
    folder = tmp_path / ("a-long-folder-name-" * 4) / "out"
    first = runner.invoke(app, ["demo", "--auto", "--out", str(folder)])
    assert first.exit_code == 0, first.output
    record = load_record(folder / "record.json")
    second = runner.invoke(app, ["demo", "--auto", "--out", str(folder)])
    assert second.exit_code == 2, second.output
    assert "already holds files" in " ".join(second.output.split())
    assert load_record(folder / "record.json") == record
    # Not a terminal: the command to copy is one line, however long the paths.
    wanted = f"hatp verify {folder / 'record.json'} --keys {folder / 'keyring.json'}"
    assert any(line.endswith(wanted) for line in first.output.splitlines()), first.output
