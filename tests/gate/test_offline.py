"""Checking a call approval offline (``verify_call_approval``, ``hatp verify-call``).

An auditor holds the approval and the public keys, perhaps the call's
arguments, and runs the gate's checks with the tool as the approval's terms
state it, at the moment it was decided. Every planted approval the tool
server refuses for a reason the approval itself shows (not the server's
own price, tool definition, clock, caller or single-use store) is refused
offline for the same reason.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from directory.people import DIRECTORY_KEY, ISSUER
from gate.calls import (
    APPROVAL_ID,
    ARGS,
    EVIL_GATEWAY,
    EVIL_KEY,
    GATEWAY_ID,
    GATEWAY_KEY,
    REQUESTER,
    SERVER,
    Approving,
    approval,
    terms,
)
from gate.test_planted_calls import CASES
from hatp.cli import app as cli
from hatp.errors import ApprovalInvalid
from hatp.evidence import Keyring
from hatp.gate import verify_call_approval

#: What an auditor trusts: acme's gateway and directory (the evil gateway's key is known).
AUDITOR = Keyring(
    [
        (GATEWAY_KEY.public, GATEWAY_ID),
        (EVIL_KEY.public, EVIL_GATEWAY),
        (DIRECTORY_KEY.public, ISSUER),
    ],
    trusted_issuers=[GATEWAY_ID, ISSUER],
)
#: Refusals only the tool server can make: its price, its tool's definition now, its
#: clock, the caller it authenticated, and its single-use store.
SERVER_ONLY = {
    "USED",
    "TOOL_CHANGED",
    "PRICE_RAISED",
    "PAYEE_CHANGED",
    "OTHER_REQUESTER",
    "EXPIRED",
}


def _states_the_servers_declaration(attempt: Any) -> bool:
    """Whether the approval's terms name this server and the tool as the server declares
    it (name, address, action): offline, the terms are all there is to go by."""
    stated = attempt.approval.get("terms", {})
    return any(
        (stated.get("server"), stated.get("tool"), stated.get("address"), stated.get("action"))
        == (SERVER, tool.name, tool.address, tool.action)
        for tool in attempt.tools
    )


OFFLINE = sorted(
    name
    for name, case in CASES.items()
    if case.reason not in SERVER_ONLY
    and (attempt := case.build()).requester == REQUESTER
    and not attempt.used_before
    and _states_the_servers_declaration(attempt)
)


def test_a_genuine_approval_verifies_with_and_without_its_arguments() -> None:
    """[GATE-OFFLINE] the auditor's keyring alone is enough to check what people approved."""
    doc = approval()
    assert verify_call_approval(doc, AUDITOR).approval_id == APPROVAL_ID
    assert verify_call_approval(doc, AUDITOR, arguments=ARGS).approvers == ["human://acme.com/bob"]


def test_the_offline_cases_cover_every_check_the_approval_itself_shows() -> None:
    reasons = {CASES[name].reason for name in OFFLINE}
    expected = {"UNTRUSTED_GATEWAY", "FORGED", "REJECTED", "OTHER_CALL", "CARD", "ADDRESS"}
    expected |= {"VOTES", "QUORUM", "SELF_APPROVAL", "AUTHORITY"}
    assert expected <= reasons, expected - reasons


@pytest.mark.parametrize("name", OFFLINE)
def test_what_the_server_refuses_from_the_approval_alone_is_refused_offline(name: str) -> None:
    """[GATE-OFFLINE] the planted approvals of §20, refused offline for the server's reason."""
    case = CASES[name]
    attempt = case.build()
    with pytest.raises(ApprovalInvalid) as refused:
        verify_call_approval(attempt.approval, AUDITOR, arguments=attempt.args)
    assert refused.value.reason == case.reason, refused.value.message


def test_without_the_arguments_the_call_digest_is_not_checked() -> None:
    """[GATE-CALL] only the arguments show whether the approval is for this call."""
    other = {**ARGS, "payee": "Someone Else"}
    doc = approval()
    verify_call_approval(doc, AUDITOR)
    with pytest.raises(ApprovalInvalid) as refused:
        verify_call_approval(doc, AUDITOR, arguments=other)
    assert refused.value.reason == "OTHER_CALL"


def test_an_approval_is_checked_at_the_moment_it_was_decided() -> None:
    """[GATE-EXPIRY] long after it expired it still verifies as the approval it was;
    an approval valid longer than any gate accepts (a day) does not."""
    verify_call_approval(approval(), AUDITOR)
    with pytest.raises(ApprovalInvalid) as refused:
        verify_call_approval(approval(Approving(valid_for=timedelta(days=2))), AUDITOR)
    assert refused.value.reason == "EXPIRED"


def test_terms_naming_no_tool_a_gate_could_declare_are_refused_as_shape() -> None:
    doc = approval(Approving(terms=terms(address="agent://acme.com/bot")))
    with pytest.raises(ApprovalInvalid) as refused:
        verify_call_approval(doc, AUDITOR)
    assert refused.value.reason == "SHAPE"


# -- hatp verify-call -----------------------------------------------------------------


def _files(tmp_path: Path, doc: Any, args: Any = None) -> list[str]:
    (tmp_path / "approval.json").write_text(json.dumps(doc))
    AUDITOR.save(tmp_path / "keyring.json")
    line = [
        "verify-call",
        str(tmp_path / "approval.json"),
        "--keys",
        str(tmp_path / "keyring.json"),
    ]
    if args is not None:
        (tmp_path / "args.json").write_text(json.dumps(args))
        line += ["--args", str(tmp_path / "args.json")]
    return line


def test_hatp_verify_call_says_valid_and_what_it_checked(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, _files(tmp_path, approval(), ARGS))
    assert done.exit_code == 0, done.output
    assert "VALID approval apv-charge0001: charge_card on https://payments.example" in done.output
    assert "checked against --args" in done.output
    without = CliRunner().invoke(cli, _files(tmp_path, approval()))
    assert "not checked (no --args)" in without.output


def test_hatp_verify_call_says_invalid_with_the_rule_and_exits_1(tmp_path: Path) -> None:
    forged = approval(Approving(key=EVIL_KEY, gateway=EVIL_GATEWAY))
    done = CliRunner().invoke(cli, _files(tmp_path, forged))
    assert done.exit_code == 1, done.output
    assert "INVALID GATE-TRUSTED UNTRUSTED_GATEWAY" in done.output


@pytest.mark.parametrize("args", [["not", "an", "object"], "{"])
def test_hatp_verify_call_refuses_unusable_input_with_exit_2(tmp_path: Path, args: Any) -> None:
    line = _files(tmp_path, approval(), args if args != "{" else None)
    if args == "{":
        (tmp_path / "approval.json").write_text("{")
    done = CliRunner().invoke(cli, line)
    assert done.exit_code == 2, done.output
    assert "INVALID_JSON" in done.output
