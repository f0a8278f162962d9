"""`hatp verify UNDO [MORE_UNDO ...] --keys K --original ORIGINAL`: an undo record checked
against its original [UNDO-LINK] [UNDO-STEPS] [UNDO-ONCE]; exit 0 when every finding
passes, 1 when any does not, 2 for unusable input."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evidence.undo_records import original_trip, real_undos, undo_plan, undo_trip
from hatp.cli import app
from txn_records import TXN_ID, keyring

runner = CliRunner()


@dataclass(frozen=True)
class Files:
    """The real records and their keyring, written where the command reads them."""

    original: str
    undone: str
    rejected: str
    other: str
    keys: str


def _write(folder: Path, name: str, doc: Any) -> str:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    folder = tmp_path_factory.mktemp("undo-cli")
    real = real_undos(folder)
    keys = folder / "keys.json"
    real.keyring.save(keys)
    return Files(
        original=_write(folder, "original", real.original),
        undone=_write(folder, "undone", real.undone),
        rejected=_write(folder, "rejected", real.rejected),
        other=_write(folder, "other", real.other),
        keys=str(keys),
    )


def _results(stdout: str) -> dict[str, list[str]]:
    """The JSON report's undo rules: each rule's results."""
    out: dict[str, list[str]] = {}
    for finding in json.loads(stdout)["findings"]:
        if finding["rule"].startswith("UNDO-"):
            out.setdefault(finding["rule"], []).append(finding["result"])
    return out


def test_an_undo_and_its_original_verify_and_print_the_undo_rules_UNDO_LINK(
    files: Files,
) -> None:
    """[UNDO-LINK] [UNDO-STEPS] [UNDO-ONCE] the real undo with its original: exit 0, and
    the table names the undo rules and the original's findings."""
    args = ["verify", files.undone, "--keys", files.keys, "--original", files.original]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for rule in ("UNDO-LINK", "UNDO-STEPS", "UNDO-ONCE", "REC-SIG"):
        assert rule in result.stdout
    assert "VALID" in result.stdout and "INVALID" not in result.stdout
    assert "original trip-1" in result.stdout


def test_further_undo_records_are_checked_too_UNDO_ONCE(files: Files) -> None:
    """[UNDO-ONCE] the undo finance rejected given beside the one that committed: every
    rule passes, in JSON too."""
    args = ["verify", files.undone, files.rejected, "--keys", files.keys]
    result = runner.invoke(app, [*args, "--original", files.original, "--json"])
    assert result.exit_code == 0, result.output
    assert _results(result.stdout) == {
        r: ["pass"] for r in ("UNDO-LINK", "UNDO-STEPS", "UNDO-ONCE")
    }
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert any(f["detail"].startswith("undo ") for f in report["findings"])


def test_an_undo_checked_against_another_trip_exits_one_UNDO_LINK(files: Files) -> None:
    """[UNDO-LINK] the undo of trip-1 checked against trip-2: exit 1, UNDO-LINK fails."""
    args = ["verify", files.undone, "--keys", files.keys, "--original", files.other, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "fail" in _results(result.stdout)["UNDO-LINK"]
    assert json.loads(result.stdout)["ok"] is False


def test_a_record_that_undoes_nothing_exits_one_UNDO_LINK(files: Files) -> None:
    """[UNDO-LINK] a trip given as the undo of another: exit 1, the table says INVALID."""
    args = ["verify", files.other, "--keys", files.keys, "--original", files.original]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "INVALID" in result.stdout
    assert "no undoes reference" in result.stdout


def test_a_step_taken_back_twice_exits_one_UNDO_ONCE(tmp_path: Path) -> None:
    """[UNDO-ONCE] two committed undos of the calendar step: exit 1 naming both."""
    original = original_trip()
    first = undo_trip(undo_plan(original))
    second = undo_trip(undo_plan(original, txn_id=f"{TXN_ID}.undo-2"))
    keys = tmp_path / "keys.json"
    keyring().save(keys)
    paths = [_write(tmp_path, name, doc) for name, doc in (("a", first), ("b", second))]
    original_path = _write(tmp_path, "original", original)
    args = ["verify", *paths, "--keys", str(keys), "--original", original_path, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert _results(result.stdout)["UNDO-ONCE"] == ["fail"]
    assert f"{TXN_ID}.undo-2" in result.stdout


def test_several_records_without_an_original_are_unusable_input(files: Files) -> None:
    """[VFY-EXIT] two records and no --original: exit 2, saying what is missing."""
    result = runner.invoke(app, ["verify", files.undone, files.rejected, "--keys", files.keys])
    assert result.exit_code == 2, result.output
    assert "CONFIG_INVALID" in result.stderr
    assert "--original" in result.stderr


@pytest.mark.parametrize(
    ("content", "code"), [(None, "RECORD_INVALID"), (b"{not json", "INVALID_JSON")]
)
def test_an_unusable_original_or_further_record_exits_two(
    files: Files, tmp_path: Path, content: bytes | None, code: str
) -> None:
    """[VFY-EXIT] an original, or a further undo, that cannot be read: exit 2 with its code."""
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    for args in (
        [files.undone, "--original", str(bad)],
        [files.undone, str(bad), "--original", files.original],
    ):
        result = runner.invoke(app, ["verify", *args, "--keys", files.keys])
        assert result.exit_code == 2, result.output
        assert code in result.stderr


def test_one_record_verifies_as_before_without_the_undo_rules(files: Files) -> None:
    """[VFY-EXIT] the undo record alone: a record like any, verified without the undo rules."""
    result = runner.invoke(app, ["verify", files.undone, "--keys", files.keys, "--json"])
    assert result.exit_code == 0, result.output
    assert _results(result.stdout) == {}


def test_the_head_option_pins_the_undo_records_head_UNDO_LINK(files: Files) -> None:
    """[UNDO-LINK] --head with --original pins the undo record's own head (REC-HEAD)."""
    args = ["verify", files.undone, "--keys", files.keys, "--original", files.original]
    wrong = runner.invoke(app, [*args, "--head", "sha256:" + "A" * 43, "--json"])
    assert wrong.exit_code == 1, wrong.output
    failed = [f for f in json.loads(wrong.stdout)["findings"] if f["result"] == "fail"]
    assert [f["rule"] for f in failed] == ["REC-HEAD"]
    head = json.loads(Path(files.undone).read_text())["head"]
    assert runner.invoke(app, [*args, "--head", head]).exit_code == 0
