"""``hatp demo --scenario undo``: the trip commits, then alice's trip is cancelled.

The undo plan is built from what each commit receipt offered and shown before
anyone approves it (each step, its fee, the refund, what cannot be undone); bob,
scripted, approves; the undo commits as a transaction of its own; every ledger
ends consistent; both records verify offline and the undo's links to the trip's.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from hatp.cli import app
from hatp.demo import PARTICIPANT_IDS, PAYMENTS
from hatp.demo._payments import balance
from hatp.demo.scenarios import SCENARIOS, run_scenario
from hatp.demo.trip import CARD
from hatp.evidence import Keyring, digest, load_record, verify_record, verify_undo
from hatp.model import TxnState

runner = CliRunner()


def test_the_undo_scenario_cancels_the_committed_trip_with_bobs_approval_UNDO_RUN(
    tmp_path: Path,
) -> None:
    """[UNDO-RUN] the trip commits; its undo plan, shown first, names each step's fee and
    the refund (730.00 less 75.00 and 155.00: 500.00 USD) and that nothing is left; bob
    approves exactly that plan; it commits; the trip is undone at every participant, the
    undo whole, the card charged only the fees; both records verify and link."""
    run = asyncio.run(run_scenario(SCENARIOS["undo"], tmp_path))
    try:
        assert run.outcome.state is TxnState.COMMITTED
        undo = run.undo
        assert undo is not None
        assert undo.outcome.state is TxnState.COMMITTED, undo.outcome.reason
        shown = "\n".join(undo.shown)
        assert f"takes back {run.outcome.txn_id}" in shown
        assert "cancel_seat at airline.example: fee 75.00 USD" in shown
        assert "cancel_room at hotel.example: fee 155.00 USD" in shown
        assert "refunds 500.00 USD of the 730.00 USD charged" in shown
        assert "hatp.compensate at calendar.example: no fee" in shown
        assert "cannot be undone: nothing" in shown
        assert "230.00 USD in fees is not refunded" in shown
        # What was shown is the plan that ran, and bob is who approved it.
        planned = next(e for e in undo.record["events"] if e["type"] == "txn.planned")
        assert planned["body"]["plan"] == undo.plan.to_wire()
        assert digest(planned["body"]["plan"]) == digest(undo.plan.to_wire())
        (approval,) = [e for e in undo.record["events"] if e["type"] == "txn.approval"]
        assert approval["body"]["approval"]["approvers"] == ["human://acme.com/bob"]
        assert run.world.effects(run.outcome.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "undone")
        assert run.world.effects(undo.outcome.txn_id) == dict.fromkeys(PARTICIPANT_IDS, "whole")
        with run.world.stores[PAYMENTS].transaction() as conn:
            left = balance(conn, CARD)
        assert left is not None and left.decimal == Decimal("5000.00") - Decimal("230.00")
        keyring = run.world.keyring
        assert verify_record(run.record, keyring).ok
        assert verify_record(undo.record, keyring).ok
        assert undo.link.ok
        assert undo.link == verify_undo(undo.record, run.record, keyring, others=())
        assert any(n.endswith(f"cancelled by {undo.outcome.txn_id}") for n in run.notes)
    finally:
        run.world.close()


def test_the_cli_shows_the_undo_plan_first_and_writes_both_records_UNDO_RUN(
    tmp_path: Path,
) -> None:
    """[UNDO-RUN] ``hatp demo --auto --scenario undo``: the plan is printed before the
    undo's timeline, every ledger is consistent, and record.json and undo-record.json
    verify offline, the undo linked to the trip, with keyring.json alone."""
    result = runner.invoke(app, ["demo", "--auto", "--scenario", "undo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path)
    output = " ".join(result.output.split())
    plan_at = output.index("The undo plan")
    assert plan_at < output.index("Undo timeline") < output.index("undo outcome COMMITTED")
    assert "refunds 500.00 USD of the 730.00 USD charged" in output[plan_at:]
    assert "outcome COMMITTED; every ledger shows the trip taken back" in output
    assert "undo outcome COMMITTED; every ledger shows the whole effect or none" in output
    keyring = Keyring.load(tmp_path / "keyring.json")
    trip, undo = load_record(tmp_path / "record.json"), load_record(tmp_path / "undo-record.json")
    assert verify_record(trip, keyring).ok and verify_record(undo, keyring).ok
    assert verify_undo(undo, trip, keyring).ok
