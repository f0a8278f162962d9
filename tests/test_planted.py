"""Planted violations: each is refused by the check it names, and only that check.

Switching one check off must stop exactly the cases that name it from being
refused by it, while every other case is still refused by its own check:
proof that each check exists and is what does the refusing.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hatp._checks import unsafe_switched_off
from hatp.evidence import parse_json
from planted import CASES, FIXTURES, Planted, attempt, good_record, keyring, write_fixtures
from txn_records import (
    BRANCHES,
    COMMIT_ORDER,
    PAY_PREVIEW,
    PREVIEW_POLICY,
    TxnBuilder,
    approval_first_trip,
    committed_trip,
    hold_preview,
    holds_first_trip,
    lapsed_trip,
    price_changed_trip,
    rejected_trip,
    trip_plan,
    unwound_trip,
)
from txn_records import KEYS as TXN_KEYS

SRC = Path(__file__).parents[1] / "src" / "hatp"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_planted_violation_is_refused_by_its_check(case: Planted) -> None:
    assert case.check in attempt(case), case.why


def test_the_untampered_record_passes_every_rule() -> None:
    case = Planted("good", "-", "record", "untampered", good_record)
    assert attempt(case) == set()


def _approval_first_before_terms() -> object:
    """Approval-first as recorded before terms were stated: the holds quoted without
    previews, finance approving the plan alone, no txn.terms."""
    b = TxnBuilder(trip_plan(mode="approval-first")).planned().approved()
    for branch_id in BRANCHES:
        b.prepared(branch_id)
    b.decided("commit").committed(*COMMIT_ORDER)
    record = b.outcome("committed").sealed()
    assert "txn.terms" not in [event["type"] for event in record["events"]]
    return record


def _sparse_preview_stated_whole() -> object:
    """A participant signs its preview leaving its null members out (another
    implementation may); the terms state the same preview with them written null. They
    say the same: [TXN-PREVIEW] compares previews, not their spellings."""
    whole = hold_preview("flight")
    sparse = {key: value for key, value in whole.items() if value is not None}
    sparse["changes"] = [{k: v for k, v in c.items() if v is not None} for c in whole["changes"]]
    return holds_first_trip(previewed={"flight": sparse}, misstated={"flight": whole})


@pytest.mark.parametrize(
    "build",
    [
        committed_trip,
        rejected_trip,
        unwound_trip,
        lapsed_trip,
        price_changed_trip,
        lambda: price_changed_trip("1940.00", stated="within-bounds", flagged=False),
        lambda: holds_first_trip(
            policy={"final": "bounded", "hold": "exact"}, previewed={"pay": PAY_PREVIEW}
        ),
        approval_first_trip,
        lambda: approval_first_trip(policy=PREVIEW_POLICY),
        lambda: approval_first_trip(mode="auto", policy=PREVIEW_POLICY),
        lambda: approval_first_trip(mode="auto", group_policy={"final": "bounded"}),
        lambda: approval_first_trip(stated=False),
        _approval_first_before_terms,
        _sparse_preview_stated_whole,
    ],
)
def test_the_honest_transaction_records_pass_every_rule(build: Callable[[], object]) -> None:
    """[TXN-PLAN] … [TXN-OUTCOME]: what the txn cases are built from verifies."""
    assert attempt(Planted("good", "-", "record", "honest", build)) == set()


CHECKS = sorted({case.check for case in CASES})


@pytest.mark.parametrize("check", CHECKS)
def test_switching_a_check_off_stops_exactly_its_cases(check: str) -> None:
    """Cases naming ``check``, or built on it (``via``), stop being refused by it."""
    with unsafe_switched_off(check):
        outcomes = {case.name: attempt(case) for case in CASES}
    for case in CASES:
        refused_by = outcomes[case.name]
        if check == case.check or check in case.via:
            assert check not in refused_by, f"{case.name} is still refused by {check}"
            if case.sole:
                assert refused_by == set(), f"{case.name} was refused by {refused_by}"
        else:
            assert case.check in refused_by, f"{case.name} no longer refused by {case.check}"


def test_every_switchable_check_in_the_code_has_a_planted_violation() -> None:
    switches = set()
    for path in SRC.rglob("*.py"):
        switches.update(re.findall(r'is_on\("([A-Z0-9-]+)"\)', path.read_text()))
    # The record and transaction rules switch through the verifier's tally, by rule id.
    for module in (
        "evidence/_verify.py",
        "evidence/_verify_txn.py",
        "evidence/_verify_approval.py",
    ):
        switches.update(re.findall(r'"((?:REC|TXN)-[A-Z-]+)"', (SRC / module).read_text()))
    assert switches, "no switchable checks found: the scan is broken"
    # Documents live in planted.py; live-protocol cases beside the role they attack.
    from coordinator.test_switch_off import CASES as COORDINATOR_CASES
    from directory.test_enrol import CASES as ENROL_CASES
    from directory.test_switch_off import CASES as DIRECTORY_CASES
    from gate.test_planted_calls import CASES as GATE_CASES
    from gateway.test_gateway_switch_off import CASES as GATEWAY_VOTE_CASES
    from gateway.test_passkey_votes import CASES as GATEWAY_PASSKEY_CASES
    from gateway.test_planted_txns import CASES as PLANTED_TXNS
    from gateway.test_sessions import CASES as SIGN_IN_CASES
    from gateway.test_switch_off import CASES as GATEWAY_CASES
    from gateway.test_tighten import CASES as GATEWAY_TIGHTEN_CASES
    from lease.test_switch_off import CASES as LEASE_CASES
    from participant.test_switch_off import CASES as PARTICIPANT_CASES
    from writes.executor_world import SWITCH_OFF_TESTS as WRITE_SWITCH_OFF_TESTS
    from writes.test_plan import PLANTED as WRITE_PLAN_CASES

    planted = (
        set(CHECKS)
        | {planted.check for planted in PARTICIPANT_CASES.values()}
        | {case.check for case in COORDINATOR_CASES}
        | set(DIRECTORY_CASES)
        | {check for case in GATEWAY_CASES.values() for check in case.checks}
        | {check for case in GATEWAY_VOTE_CASES.values() for check in case.checks}
        | {check for case in GATEWAY_PASSKEY_CASES.values() for check in case.checks}
        | {check for case in GATEWAY_TIGHTEN_CASES.values() for check in case.checks}
        | {check for case in PLANTED_TXNS for check in case.checks}
        | {case.check for case in GATE_CASES.values()}
        | {case.check for case in _mcp_advert_cases().values()}
        | {rule for rule, _ in WRITE_PLAN_CASES.values()}
        | set(WRITE_SWITCH_OFF_TESTS)
        | {rule for rule, _ in LEASE_CASES.values()}
        | {check for checks in ENROL_CASES.values() for check in checks}
        | {check for checks in SIGN_IN_CASES.values() for check in checks}
        | {check for checks in _by_path("http/test_approver_page.py").values() for check in checks}
        | {check for checks in _by_path("http/test_serve_callers.py").values() for check in checks}
        | set(_switch_offs("http/test_serve_callers.py"))
        | set(_switch_offs("http/test_serve_refusals.py"))
        | set(_switch_offs("mcp/test_gate_stock.py"))
        | set(_switch_offs("coordinator/test_effects.py"))
        | set(_switch_offs("coordinator/test_preview_modes.py"))
        | set(_switch_offs("evidence/test_keyset.py"))
        | set(_switch_offs("gateway/test_webhook.py"))
        | set(_switch_offs("gateway/test_outbox_channels.py"))
        | set(_switch_offs("participant/test_undo.py"))
        | set(_switch_offs("coordinator/test_undo.py"))
        | set(_switch_offs("evidence/test_verify_undo.py"))
    )
    assert switches <= planted, f"checks with no planted violation: {switches - planted}"


def _mcp_advert_cases() -> dict[str, Any]:
    # tests/mcp cannot be imported as a package (the name is the MCP SDK's): load by path.
    cases: dict[str, Any] = _load("mcp/test_participant_advert.py", "mcp_advert_cases").PLANTED
    return cases


def _by_path(relative: str) -> dict[str, tuple[str, ...]]:
    """The ``CASES`` of a test module in a folder that cannot be imported as a package
    (``tests/http``: the name is the standard library's)."""
    cases: dict[str, tuple[str, ...]] = _load(relative, relative.replace("/", "_")[:-3]).CASES
    return cases


def _switch_offs(relative: str) -> dict[str, tuple[str, ...]]:
    """The ``SWITCH_OFF_TESTS`` of a test module in ``tests/http`` (check -> the tests that
    switch it off and show the harm), each test checked to exist."""
    module = _load(relative, relative.replace("/", "_")[:-3] + "_switch_offs")
    proofs: dict[str, tuple[str, ...]] = module.SWITCH_OFF_TESTS
    for tests in proofs.values():
        for test in tests:
            assert callable(getattr(module, test, None)), f"{relative} has no {test}"
    return proofs


def _load(relative: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_known_bad_fixture_file_is_current_and_refused(case: Planted) -> None:
    data = (FIXTURES / f"{case.name}.json").read_bytes()
    assert data == case.document(), "run `python tests/planted.py` to rewrite the fixtures"
    assert case.check in attempt(case, data)


def test_fixture_manifest_and_keyring_are_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import planted

    monkeypatch.setattr(planted, "FIXTURES", tmp_path)
    write_fixtures()
    for name in ("manifest.json", "keyring.json"):
        assert (tmp_path / name).read_bytes() == (FIXTURES / name).read_bytes(), name
    manifest = parse_json((FIXTURES / "manifest.json").read_bytes())
    assert set(manifest) == {case.name for case in CASES}
    assert len(keyring()) == 4 + len(TXN_KEYS)
