"""`hatp verify`: exit 0 only when every rule passes, 1 on fail or absent, 2 on unusable input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hatp.cli import app
from planted import CASES, FIXTURES, good_record

runner = CliRunner()
KEYRING = str(FIXTURES / "keyring.json")


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "record.json"
    path.write_bytes(good_record())
    return path


def test_valid_record_exits_zero_and_prints_every_rule(good: Path) -> None:
    """VFY-EXIT: 0 when every rule passes."""
    result = runner.invoke(app, ["verify", str(good), "--keys", KEYRING])
    assert result.exit_code == 0, result.output
    assert "VALID" in result.stdout
    assert "REC-SIG" in result.stdout


def test_json_output_lists_findings(good: Path) -> None:
    result = runner.invoke(app, ["verify", str(good), "--keys", KEYRING, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert {f["result"] for f in report["findings"]} == {"pass"}
    assert all({"rule", "result", "detail", "event"} <= set(f) for f in report["findings"])


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.kind == "record" and c.check.startswith("REC-")], ids=str
)
def test_tampered_record_exits_one_naming_the_rule(case: object) -> None:
    """VFY-EXIT: 1 when a rule fails, and the failing rule is in the JSON findings."""
    name, check = case.name, case.check  # type: ignore[attr-defined]
    head = case.expected_head  # type: ignore[attr-defined]
    args = ["verify", str(FIXTURES / f"{name}.json"), "--keys", KEYRING, "--json"]
    result = runner.invoke(app, args + (["--head", head] if head else []))
    assert result.exit_code == 1, result.output
    failed = {f["rule"] for f in json.loads(result.stdout)["findings"] if f["result"] == "fail"}
    assert check in failed


def test_absent_rules_exit_one(tmp_path: Path) -> None:
    """VFY-ABSENT: an empty record has nothing verified; absent is never a pass."""
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"hatpVersion": "0.1", "recordId": "r", "events": [], "head": None}))
    result = runner.invoke(app, ["verify", str(path), "--keys", KEYRING, "--json"])
    assert result.exit_code == 1
    results = {f["rule"]: f["result"] for f in json.loads(result.stdout)["findings"]}
    assert results["REC-SIG"] == "absent"


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (None, "RECORD_INVALID"),  # missing file
        (b"{not json", "INVALID_JSON"),
        (b"[1, 2]", "RECORD_INVALID"),
        (b'{"recordId": "r"}', "RECORD_INVALID"),
        (b'{"hatpVersion": "7.0", "recordId": "r", "events": []}', "VERSION_UNSUPPORTED"),
        (b'{"a": 1, "a": 2}', "INVALID_JSON"),
    ],
)
def test_unusable_record_exits_two_with_its_code(
    tmp_path: Path, content: bytes | None, code: str
) -> None:
    """VFY-EXIT: 2 on unusable input, with the error code and message."""
    path = tmp_path / "record.json"
    if content is not None:
        path.write_bytes(content)
    result = runner.invoke(app, ["verify", str(path), "--keys", KEYRING])
    assert result.exit_code == 2, result.output
    assert code in result.stderr


def test_unusable_keyring_exits_two(good: Path, tmp_path: Path) -> None:
    bad = tmp_path / "keys.json"
    bad.write_text('{"hatpVersion": "0.1", "keys": []}')
    for keys in (bad, tmp_path / "missing.json"):
        result = runner.invoke(app, ["verify", str(good), "--keys", str(keys)])
        assert result.exit_code == 2
        assert "KEYRING_INVALID" in result.stderr


def test_record_checked_against_a_keyring_missing_a_signer_fails(
    good: Path, tmp_path: Path
) -> None:
    """SIG-KID through the verifier: a key the auditor does not hold verifies nothing."""
    ring = json.loads(Path(KEYRING).read_text())
    ring["keys"] = [k for k in ring["keys"] if k["kid"] != "airline-1"]
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(ring))
    result = runner.invoke(app, ["verify", str(good), "--keys", str(keys), "--json"])
    assert result.exit_code == 1
    details = [f["detail"] for f in json.loads(result.stdout)["findings"] if f["result"] == "fail"]
    assert any("KID_UNKNOWN" in d for d in details)


def _edited(edit: Any) -> bytes:
    record = json.loads(good_record())
    edit(record)
    return json.dumps(record).encode()


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def edit(record: dict[str, Any]) -> None:
        target: Any = record
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return edit


MALFORMED: dict[str, bytes] = {
    "record version a list": _edited(_set(("hatpVersion",), ["0.1"])),
    "record version an object": _edited(_set(("hatpVersion",), {"v": "0.1"})),
    "event version a list": _edited(_set(("events", 1, "hatpVersion"), ["0.1"])),
    "event version an object": _edited(_set(("events", 1, "hatpVersion"), {})),
    "event a list": _edited(_set(("events", 1), [1, 2])),
    "signature a list": _edited(_set(("events", 1, "signature"), ["Ed25519"])),
    "signature kid a list": _edited(_set(("events", 1, "signature", "kid"), ["k"])),
    "seq a string": _edited(_set(("events", 1, "seq"), "1")),
    "time a number": _edited(_set(("events", 1, "time"), 1.5)),
    "time 30 February": _edited(_set(("events", 1, "time"), "2026-02-30T00:00:00.000Z")),
    "type a list": _edited(_set(("events", 1, "type"), ["txn.planned"])),
    "body a list": _edited(_set(("events", 1, "body"), [])),
    "seal body a list": _edited(_set(("events", -1, "body"), [4])),
    "head a list": _edited(_set(("head",), ["sha256:x"])),
    "events an object": _edited(_set(("events",), {"0": {}})),
    "record id a list": _edited(_set(("recordId",), ["txn"])),
    "record a string": b'"txn"',
    "record null": b"null",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_member_is_a_finding_or_unusable_input_never_a_traceback(
    tmp_path: Path, name: str
) -> None:
    """[VFY-EXIT] Exit 1 (INVALID) or 2 (unusable input, with the error's code), nothing else."""
    path = tmp_path / "record.json"
    path.write_bytes(MALFORMED[name])
    result = runner.invoke(app, ["verify", str(path), "--keys", KEYRING])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (1, 2), result.output
    if result.exit_code == 1:
        assert "INVALID" in result.stdout
    else:
        assert "error" in result.stderr


@pytest.mark.parametrize(
    "keyring",
    [b"[]", b'{"hatpVersion": ["0.1"]}', b'{"hatpVersion": "0.1", "keys": [1], '
     b'"trustedIssuers": ["x"]}', b'{"hatpVersion": "0.1", "keys": {}, "trustedIssuers": 7}'],
)  # fmt: skip
def test_a_malformed_keyring_is_unusable_input(good: Path, tmp_path: Path, keyring: bytes) -> None:
    """[VFY-EXIT]"""
    keys = tmp_path / "keys.json"
    keys.write_bytes(keyring)
    result = runner.invoke(app, ["verify", str(good), "--keys", str(keys)])
    assert result.exit_code == 2, result.output
    assert "KEYRING_INVALID" in result.stderr or "VERSION_UNSUPPORTED" in result.stderr
