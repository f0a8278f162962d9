"""`hatp demo --gated`: refused, asked, approved, run once, replay and changed call refused."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from hatp.cli import app
from hatp.clock import SystemClock
from hatp.demo import PAYMENTS, TripWorld
from hatp.demo.gated import run_gated

runner = CliRunner()


def _charged(world: TripWorld) -> list[str]:
    return [line.detail for line in world.ledger(PAYMENTS) if line.kind == "charged"]


def test_the_gated_walk_charges_the_card_exactly_once(tmp_path: Path) -> None:
    """[GATE-REQUIRED] [GATE-ONCE] [GATE-CALL] through the real gateway and payments store."""
    with TripWorld.open(tmp_path, SystemClock()) as world:
        run = asyncio.run(run_gated(world))
        assert run.as_expected, run.steps
        assert [s.code for s in run.steps] == [
            "APPROVAL_REQUIRED",
            None,
            None,
            "APPROVAL_INVALID",
            "APPROVAL_INVALID",
        ]
        assert run.approval is not None
        assert run.approval.approvers == ["human://acme.com/bob"]
        assert "already used" in run.steps[3].said
        assert "another call" in run.steps[4].said
        assert _charged(world) == ["charged 1480.00 USD to Lufthansa on card corp-4242"]
        with world.stores[PAYMENTS].transaction() as conn:
            available = conn.exec_driver_sql(
                "SELECT available FROM payments_cards WHERE card_id = 'corp-4242'"
            ).scalar_one()
        assert Decimal(available) == Decimal("5000.00") - Decimal("1480.00")


def test_a_rejected_call_never_runs(tmp_path: Path) -> None:
    with TripWorld.open(tmp_path, SystemClock()) as world:
        run = asyncio.run(run_gated(world, world.scripted_people("reject")))
        assert [s.ok for s in run.steps] == [False, False]
        assert run.approval is not None and run.approval.decision == "reject"
        assert _charged(world) == []


def test_the_cli_walks_the_gated_call(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--gated", "--auto", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in (
        "APPROVAL_REQUIRED: charge_card needs an approval from human://acme.com/role/finance",
        "approved by human://acme.com/bob",
        "payments ran the tool: charged 1480.00 USD to Lufthansa",
        "was already used",
        "is for another call (other arguments)",
    ):
        assert text in out, text
    assert result.stdout.strip().endswith(str(tmp_path))


def test_list_names_the_gated_walk() -> None:
    result = runner.invoke(app, ["demo", "--list"])
    assert "--gated" in result.stdout
