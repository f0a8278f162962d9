"""The price-changed trip: finance approves the charge's predicted preview, then the bank
takes more than its bound, and the record says so.

The scenario runs holds-first, so the finance approver is shown every step's
signed preview with the plan; here the approver is a person at a terminal
(:class:`~hatp.gateway.TerminalChannel` on in-memory consoles) who types
``approve`` once they have read it.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from hatp.demo import TripWorld
from hatp.demo.scenarios import SCENARIOS, run_scenario
from hatp.evidence import verify_record
from hatp.gateway import STEP_PREVIEW_LABEL, TerminalChannel
from hatp.model import TxnState

PREDICTED = "     Certainty: predicted (expects, may differ; at most 750 USD)"


def test_the_approver_reads_the_charges_predicted_preview_and_the_record_flags_the_charge(
    tmp_path: Path,
) -> None:
    """[GW-VIEW-PREVIEW] [COORD-PREVIEW] [TXN-EFFECT] bob sees, under the charge, its
    predicted preview and its bound before he is asked to decide; he approves; the
    charge is captured at 765.00 USD, beyond the bound, and the record flags it."""
    screen = io.StringIO()

    def at_the_terminal(world: TripWorld) -> TerminalChannel:
        return TerminalChannel(io.StringIO("approve\n"), screen, world.people, world.clock)

    scenario = SCENARIOS["price-changed"]
    assert scenario.mode == "holds-first"
    run = asyncio.run(run_scenario(scenario, tmp_path, channel=at_the_terminal))
    try:
        shown = screen.getvalue()
        lines = shown.splitlines()
        at = lines.index(PREDICTED)
        assert lines[at - 1] == f"     {STEP_PREVIEW_LABEL}"
        assert "plus a fee the bank sets at capture (at most 750.00 USD in all)" in lines[at + 1]
        assert shown.index(PREDICTED) < shown.index("approve / reject / decline? ")
        assert shown.count("     Certainty: exact (will do exactly this)") == 3
        assert run.outcome.state is TxnState.COMMITTED
        events = run.record["events"]
        kinds = [e["type"] for e in events]
        assert kinds.index("txn.terms") < kinds.index("txn.pending")
        verdicts = {
            e["body"]["branchId"]: e["body"]["verdict"] for e in events if e["type"] == "txn.effect"
        }
        assert verdicts == {
            "seat": "as-previewed",
            "room": "as-previewed",
            "calendar": "as-previewed",
            "charge": "differs",
        }
        (outcome,) = [e["body"] for e in events if e["type"] == "txn.outcome"]
        assert outcome["effectDiffers"] == ["charge"]
        assert verify_record(run.record, run.world.keyring).ok
    finally:
        run.world.close()
