"""The docs stay true: every spec requirement id is tested, and the README example runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SPEC = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
ID = re.compile(r"\[([A-Z]{2,}(?:-[A-Z0-9]+)+)\]")


def _tests_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))


def test_every_spec_requirement_is_named_by_a_test() -> None:
    ids = set(ID.findall(SPEC))
    assert len(ids) >= 30, "the spec lost its requirement ids"
    tests = _tests_text()
    untested = sorted(i for i in ids if i not in tests)
    assert not untested, f"requirement ids no test names: {untested}"


def test_every_rule_the_code_reports_is_in_the_spec() -> None:
    from hatp.errors import (
        APPROVAL_REASONS,
        APPROVER_REASONS,
        EVIDENCE_REASONS,
        LEASE_REASONS,
        LEASE_UNAVAILABLE_REASONS,
        PEER_REASONS,
        PLAN_REASONS,
        RECOVERY_REASONS,
        SIGNATURE_REASON_RULES,
        WRITE_PLAN_REASONS,
    )
    from hatp.evidence import CHAIN_RULES, ROUTING_RULES, TXN_RULES, UNDO_RULES

    ids = set(ID.findall(SPEC))
    assert set(CHAIN_RULES) <= ids
    assert set(TXN_RULES) <= ids
    assert set(ROUTING_RULES) <= ids
    assert set(UNDO_RULES) <= ids
    for reason in PLAN_REASONS:
        assert f"`{reason}`" in SPEC, reason
    assert set(SIGNATURE_REASON_RULES.values()) <= ids
    for reason in SIGNATURE_REASON_RULES:
        assert f"`{reason}`" in SPEC, reason
    for reason, text in APPROVAL_REASONS.items():
        assert f"`{reason}`" in SPEC, reason
        rule = re.search(r"\((GATE-[A-Z-]+)\)", text)
        assert rule is not None and rule.group(1) in ids, reason
    for reasons in (EVIDENCE_REASONS, LEASE_UNAVAILABLE_REASONS, RECOVERY_REASONS):
        for reason in reasons:
            assert f"`{reason}`" in SPEC, reason
    for reasons in (PEER_REASONS, WRITE_PLAN_REASONS, APPROVER_REASONS, LEASE_REASONS):
        for reason, text in reasons.items():
            assert f"`{reason}`" in SPEC or f" {reason}" in SPEC, reason
            rule = re.search(r"\(((?:MCP|WRITE|LEASE)-[A-Z-]+)\)", text)
            assert rule is not None and rule.group(1) in ids, reason


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README has no python example"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


def test_readme_names_the_two_commands_and_the_cli() -> None:
    for needle in ("make demo", "make test", "hatp verify", "hatp keys new", "docs/spec.md"):
        assert needle in README, needle


def test_the_license_file_is_the_license_pyproject_names() -> None:
    """pyproject's license is Apache-2.0, and LICENSE holds that license's text."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert declared["project"]["license"] == "Apache-2.0"
    assert declared["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text.splitlines()[0]
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_describes_the_version_pyproject_ships() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {declared['project']['version']}" in changelog
    assert "## Unreleased" in changelog
