"""Pending asks outlive the gateway process: kill it, start another, and decide the ask there.

The first gateway runs in a child process on the trip world's folder: it
asks acme's finance group about a trip, prints the ask and what bob was
sent to sign, and is killed (SIGKILL) with the ask pending. A new gateway in
this process, on the same store, takes bob's vote and signs the approval,
which verifies offline against the plan.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hatp.clock import ManualClock
from hatp.coordinator import ApprovalRequest
from hatp.demo import TripWorld, trip_plan
from hatp.evidence import digest, verify_approval
from hatp.gateway import MemoryChannel, sign_vote
from hatp.model import Result, parse_plan

START = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)
BOB = "human://acme.com/bob"

_CHILD = """
import asyncio, json, os, signal, sys
from datetime import datetime
from pathlib import Path
from hatp.clock import ManualClock
from hatp.coordinator import ApprovalRequest
from hatp.demo import TripWorld
from hatp.evidence import digest
from hatp.gateway import MemoryChannel
from hatp.model import parse_plan

folder, start = Path(sys.argv[1]), datetime.fromisoformat(sys.argv[2])
plan = parse_plan(json.loads((folder / "plan.json").read_text()))
world = TripWorld.open(folder, ManualClock(start))
channel = MemoryChannel("terminal")
gateway = world.gateway(channel)
decide_by = datetime.fromisoformat(plan.deadlines.decide_by)
request = ApprovalRequest(plan.txn_id, plan, digest(plan.to_wire()), plan.approvals[0], decide_by)
pending = asyncio.run(gateway.ask(request))
(notice,) = channel.inbox("human://acme.com/bob")
print(json.dumps({"pending": pending, "payload": notice.payload}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_pending_ask_survives_the_gateway_process_being_killed_GW_DURABLE(
    tmp_path: Path,
) -> None:
    """[GW-DURABLE] the ask, bob's notice and the signed pending vote outlive the process."""
    doc = trip_plan("trip-restart", decide_by=START + timedelta(minutes=15))
    (tmp_path / "plan.json").write_text(json.dumps(doc), encoding="utf-8")
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), START.isoformat()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -9, child.stderr
    said = json.loads(child.stdout)
    ask_id = said["pending"]["askId"]

    async def decide_in_a_new_process() -> dict[str, object]:
        world = TripWorld.open(tmp_path, ManualClock(START + timedelta(minutes=1)))
        try:
            gateway = world.gateway(MemoryChannel("terminal"))
            plan = parse_plan(doc)
            decide_by = datetime.fromisoformat(plan.deadlines.decide_by)
            request = ApprovalRequest(
                plan.txn_id, plan, digest(plan.to_wire()), plan.approvals[0], decide_by
            )
            # Asking again finds the same ask; it is still pending.
            assert (await gateway.ask(request))["askId"] == ask_id
            assert (await gateway.poll(ask_id)) == said["pending"]
            vote = sign_vote(world.people[BOB], said["payload"], "approve", world.clock.now())
            await gateway.submit_vote(ask_id, vote)
            approval = await gateway.poll(ask_id)
            findings = verify_approval(approval, doc, world.keyring)
            assert [f.rule for f in findings if f.result is not Result.PASS] == []
            return approval
        finally:
            world.close()

    approval = asyncio.run(decide_in_a_new_process())
    assert (approval["decision"], approval["approvers"]) == ("approve", [BOB])
