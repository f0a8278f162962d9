"""`hatp verify` with a keyring from a key set: every signature checked at its event's
time, listed after the findings with its key's period and status ([VER-PERIOD])."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from hatp.cli import app
from hatp.clock import format_time
from hatp.evidence import Keyring, SigningKey, sign_key_set, thumbprint, verify_key_set
from txn_records import (
    AIRLINE,
    CALENDAR,
    COORDINATOR,
    DIRECTORY,
    GATEWAY,
    HOTEL,
    KEYS,
    PAYMENTS,
    START,
    committed_trip,
    keyring,
)

runner = CliRunner()
WIDE = {"COLUMNS": "250"}
ROOT = SigningKey.from_seed(bytes([32]) * 32, "acme-root-1")
ROLES = {
    COORDINATOR: "coordinator",
    AIRLINE: "participant",
    HOTEL: "participant",
    CALENDAR: "participant",
    PAYMENTS: "participant",
    GATEWAY: "gateway",
    DIRECTORY: "directory",
}
SINCE = START - timedelta(days=30)
#: The approval of :func:`txn_records.committed_trip` is event 6, a second per event.
APPROVAL_TIME = START + timedelta(seconds=6)


def _keyring_file(path: Path, **changes: Mapping[str, Any]) -> Path:
    """Write the keyring acme's key set gives (every key from :data:`SINCE`; ``changes``
    by party), as a keyring file: what ``--keys`` reads, periods and all."""
    keys = [
        {
            **KEYS[party].public.to_jwk(),
            "role": role,
            "issuer": party,
            "notBefore": format_time(SINCE),
            "status": "active",
            **changes.get(party, {}),
        }
        for party, role in ROLES.items()
    ]
    doc = sign_key_set(
        ROOT,
        organisation="https://acme.com",
        version=2,
        issued_at=START - timedelta(hours=1),
        expires_at=START + timedelta(days=7),
        keys=keys,
    )
    verify_key_set(doc, pin=thumbprint(ROOT.public), now=START).keyring().save(path)
    return path


def _table(out: str) -> str | None:
    """What follows the signatures table's title line, if the output has one."""
    lines = out.splitlines()
    starts = [n for n, line in enumerate(lines) if line.strip() == "signatures"]
    return "\n".join(lines[starts[0] :]) if starts else None


def _record(tmp_path: Path) -> Path:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(committed_trip()), encoding="utf-8")
    return path


def test_keyring_file_with_periods_loads_with_them(tmp_path: Path) -> None:
    """[VER-PERIOD] a keyring file written from a key set keeps each key's period."""
    ring = Keyring.load(_keyring_file(tmp_path / "keys.json"))
    period = ring.period(KEYS[GATEWAY].kid)
    assert period is not None
    assert (period.not_before, period.role, period.set_version) == (SINCE, "gateway", 2)


def test_verify_prints_the_signatures_table_after_the_findings(tmp_path: Path) -> None:
    """[VER-PERIOD] with keys from a key set, a table of every signature, its key, the
    key's period and its status follows the findings."""
    keys = _keyring_file(tmp_path / "keys.json")
    result = runner.invoke(app, ["verify", str(_record(tmp_path)), "--keys", str(keys)], env=WIDE)
    assert result.exit_code == 0, result.output
    out = result.stdout
    table = _table(out)
    assert table is not None, out
    assert out.index("TXN-EFFECT") < out.index(table) < out.index("VALID")
    assert "event 6 body.approval.routing" in table
    assert KEYS[GATEWAY].kid in table
    assert f"{format_time(SINCE)} to open-ended" in table
    assert "gateway https://acme.com set v2" in table
    row = next(line for line in table.splitlines() if "event 6 body.approval " in line)
    assert format_time(APPROVAL_TIME) in row
    assert "valid" in table
    assert "no period" in table  # the vote, under its voter's card


def test_verify_names_a_revoked_key_in_the_table_and_exits_one(tmp_path: Path) -> None:
    """[VER-PERIOD] the gateway's key revoked before the approval: exit 1, TXN-SIGNER
    fails with KEY_REVOKED, and the table shows that status for the approval."""
    revoked = format_time(START + timedelta(seconds=3))
    keys = _keyring_file(
        tmp_path / "keys.json", **{GATEWAY: {"status": "revoked", "revokedAt": revoked}}
    )
    result = runner.invoke(app, ["verify", str(_record(tmp_path)), "--keys", str(keys)], env=WIDE)
    assert result.exit_code == 1, result.output
    table = _table(result.stdout)
    assert table is not None, result.stdout
    row = next(line for line in table.splitlines() if "event 6 body.approval " in line)
    assert "KEY_REVOKED" in row and f"revoked {revoked}" in row
    assert "INVALID" in result.stdout


def test_verify_json_always_carries_the_signatures(tmp_path: Path) -> None:
    """[VER-PERIOD] --json includes ``signatures``: with periods and status from a key
    set's keyring, and without either from a keyring that has none."""
    record = str(_record(tmp_path))
    keys = _keyring_file(tmp_path / "keys.json")
    result = runner.invoke(app, ["verify", record, "--keys", str(keys), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    approval = next(u for u in report["signatures"] if u["where"] == "event 6 body.approval")
    assert approval["status"] == "valid"
    assert approval["notBefore"] == format_time(SINCE) and approval["notAfter"] is None
    assert approval["at"] == format_time(APPROVAL_TIME)

    plain = tmp_path / "plain.json"
    keyring().save(plain)
    result = runner.invoke(app, ["verify", record, "--keys", str(plain), "--json"])
    assert result.exit_code == 0, result.output
    old = json.loads(result.stdout)
    assert [u["where"] for u in old["signatures"]] == [u["where"] for u in report["signatures"]]
    assert {u["status"] for u in old["signatures"]} == {None}
    assert old["findings"] == report["findings"]


def test_verify_without_periods_prints_no_signatures_table(tmp_path: Path) -> None:
    """[VER-PERIOD] a keyring without periods: the output is the findings and verdict."""
    plain = tmp_path / "plain.json"
    keyring().save(plain)
    result = runner.invoke(app, ["verify", str(_record(tmp_path)), "--keys", str(plain)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert _table(result.stdout) is None
    assert "no period" not in result.stdout
    assert "VALID" in result.stdout
