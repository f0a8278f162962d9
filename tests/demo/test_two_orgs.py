"""`hatp demo --two-orgs`: acme's coordinator asks globex's gateway for a partner's
approval, two ``hatp serve`` processes each checking the other with the keys the other
publishes; a key acme retired and a key globex revoked are refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from hatp.cli import app
from hatp.demo.trip import GATEWAY
from hatp.demo.two_orgs import GLOBEX, GLOBEX_GATEWAY, run_two_orgs
from hatp.model import Result, TxnState

BOUND = 240.0


def test_a_partners_approval_is_trusted_by_its_published_keys_COORD_GATEWAYS(
    tmp_path: Path,
) -> None:
    """[COORD-GATEWAYS] [API-SIGNED] [KEYSET-FETCH] [SIG-PERIOD] the trip commits with
    one approval signed by each organisation's gateway; its record verifies with the
    keyrings of both published sets (each signature at its event's time, in its key's
    period) and not with acme's alone; acme's retired coordinator key gets a 401 from
    globex, a webhook signed by globex's revoked gateway key is refused."""
    lines: list[str] = []
    run = asyncio.run(asyncio.wait_for(run_two_orgs(tmp_path, lines.append), BOUND))

    assert run.state is TxnState.COMMITTED, lines
    approvals = [
        event["body"]["approval"]
        for event in run.record["events"]
        if event["type"] == "txn.approval"
    ]
    assert {(a["groupId"], a["gateway"]) for a in approvals} == {
        ("finance", GATEWAY),
        ("partner", GLOBEX_GATEWAY),
    }
    assert run.report.ok, [f.detail for f in run.report.findings if f.result is not Result.PASS]
    globex_signed = [s for s in run.report.signatures if s.issuer == GLOBEX_GATEWAY]
    assert globex_signed and all(
        (s.organisation, s.status) == (GLOBEX, "valid") for s in globex_signed
    )
    failed = [f for f in run.acme_only.findings if f.result is Result.FAIL]
    assert failed and any(GLOBEX_GATEWAY in f.detail for f in failed)
    statuses = {key.kid: key.status for s in (run.acme_set, run.globex_set) for key in s.keys}
    assert "retired" in statuses.values() and "revoked" in statuses.values()
    assert (run.retired_status, run.revoked_status) == (401, 400)
    assert run.as_expected
    assert any("signing with their own key" in line for line in lines)


def test_the_flag_is_listed_and_checked() -> None:
    """The walk is listed, and goes alone."""
    runner = CliRunner()
    listed = runner.invoke(app, ["demo", "--list"])
    assert listed.exit_code == 0 and "--two-orgs" in listed.stdout
    both = runner.invoke(app, ["demo", "--two-orgs", "--web"])
    assert both.exit_code == 2 and "two walks" in " ".join(both.output.split())
    auto = runner.invoke(app, ["demo", "--two-orgs", "--auto"])
    assert auto.exit_code == 2
