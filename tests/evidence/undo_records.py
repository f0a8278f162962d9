"""Undo records for the undo verifier's tests: real ones, and ones written to break a rule.

Real (:func:`real_undos`): the demo trip committed by the real coordinator, on
real participants and a real decision log (SQLite), then an undo of it that
finance rejects and one that finance approves (of the calendar step only, compensate
tier: the step every demo can take back), and a second trip nobody undoes.

Written (:func:`original_trip`, :func:`undo_plan`, :func:`undo_trip`): the
trip of :mod:`txn_records`, its commit receipts offering how each step can be
taken back (:data:`OFFERS`), and undo transactions of it, written event by event
with every party's own key by :class:`UndoBuilder`. An undo written to break an
undo rule is otherwise sound: each party signs its own part, so only that rule
can refuse it, which is what an attacker holding the coordinator's key can do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coordinator.trips import APPROVER, ScriptedAnswer, Trip
from hatp.clock import ManualClock, format_time
from hatp.demo import TripWorld
from hatp.evidence import Keyring, SigningKey, digest, sign
from hatp.model import (
    COMMIT_ORDER,
    COMPENSATION,
    ApprovalDecision,
    TxnState,
    UndoOffer,
    parse_plan,
)
from hatp.store import DecisionLog, open_store
from hatp.version import PROTOCOL_VERSION
from txn_records import COMMIT_ORDER as TRIP_COMMIT_ORDER
from txn_records import (
    COORDINATOR,
    HOLD_SECONDS,
    KEYS,
    LEASE_SECONDS,
    START,
    TXN_ID,
    TxnBuilder,
    trip_plan,
)

# --- real records ---------------------------------------------------------------------


@dataclass(frozen=True)
class RealUndos:
    """What the real coordinator wrote: records, and the keys that check them."""

    #: The trip, committed.
    original: dict[str, Any]
    #: The undo of its calendar step finance approved: committed.
    undone: dict[str, Any]
    #: An earlier undo of the same step, rejected by finance: aborted, nothing taken back.
    rejected: dict[str, Any]
    #: Another trip, committed, never undone.
    other: dict[str, Any]
    #: Every key of the trip world (participants, coordinator, gateway, people).
    keyring: Keyring
    #: The coordinator's own key, for a test that plays a coordinator rewriting a record.
    coordinator_key: SigningKey


def real_undos(folder: Path) -> RealUndos:
    """Run the trip, an undo rejected, an undo approved and a second trip, in ``folder``."""
    clock = ManualClock(datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC))
    store = open_store(f"sqlite:///{folder / 'hatp.db'}")
    try:
        world = TripWorld.open(folder / "trip", clock)
        try:
            trip = Trip(world, DecisionLog(store), clock)
            original = trip.run()
            other = trip.run()
            assert (original.state, other.state) == (TxnState.COMMITTED, TxnState.COMMITTED)
            outcomes = []
            for decision in (ApprovalDecision.REJECT, ApprovalDecision.APPROVE):
                # The calendar step only: the one the demo can take back today.
                undo = trip.coordinator().plan_undo(original.txn_id, steps=["calendar"])
                plan = asyncio.run(undo)
                answer = ScriptedAnswer(decision, APPROVER, after_votes=False)
                outcomes.append(trip.run(plan.to_wire(), answer))
            rejected, undone = outcomes
            assert (rejected.state, undone.state) == (TxnState.ABORTED, TxnState.COMMITTED)
            return RealUndos(
                original=original.record,
                undone=undone.record,
                rejected=rejected.record,
                other=other.record,
                keyring=world.keyring,
                coordinator_key=world.keys["coordinator"],
            )
        finally:
            world.close()
    finally:
        store.close()


def rewritten(
    record: Mapping[str, Any], key: SigningKey, position: int, **members: Any
) -> dict[str, Any]:
    """``record`` with event ``position``'s ``members`` changed, and that event and every
    later one chained and signed again with ``key``: a sound record with another head."""
    events = [dict(event) for event in record["events"]]
    events[position].update(members)
    for at in range(position, len(events)):
        unsigned = {k: v for k, v in events[at].items() if k != "signature"}
        if at:
            unsigned["prev"] = digest(events[at - 1])
        events[at] = sign(unsigned, key)
    return {**record, "events": events, "head": digest(events[-1])}


# --- written records ----------------------------------------------------------------

#: When the written undos are planned: an hour after the trip began.
UNDO_START = START + timedelta(hours=1)
UNDO_ID = f"{TXN_ID}.undo-1"


def _offer(**members: Any) -> dict[str, Any]:
    return UndoOffer.model_validate(members).to_wire()


#: How each step of the written trip can be taken back, as its commit receipt offers:
#: the calendar entry with its undo token, the seat cancelled for a fee, the rest not.
OFFERS: dict[str, dict[str, Any]] = {
    "calendar": _offer(kind="compensate", operation=COMPENSATION, tier="hold"),
    "flight": _offer(
        kind="inverse",
        operation="cancel_seat",
        tier="final",
        args={"flight": "LH 401", "seat": "12A"},
        fee={"value": "50.00", "currency": "USD"},
        undoBy=format_time(START + timedelta(days=1)),
    ),
    "hotel": _offer(kind="not-undoable", reason="hold_room declares no inverse operation"),
    "pay": _offer(kind="not-undoable", reason="charge_card is final and declares no refund"),
}
#: What an undo's own commit receipt offers: nothing.
NOT_AGAIN = _offer(kind="not-undoable", reason="a compensation is not itself undone")


def original_trip(
    txn_id: str = TXN_ID, *, offers: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The trip committed, each commit receipt offering the step's undo (:data:`OFFERS`,
    with ``offers`` overriding some)."""
    offered = {**OFFERS, **(offers or {})}
    b = TxnBuilder(trip_plan(txn_id)).voted().decided("commit")
    for branch_id in TRIP_COMMIT_ORDER:
        b.phase2(
            "txn.committed",
            branch_id,
            b.outcome_receipt(branch_id, "commit", undo=offered[branch_id]),
        )
    return b.outcome("committed").sealed()


def unwound_original() -> dict[str, Any]:
    """The trip unwound: the calendar entry committed (offering its undo), then
    compensated when the card's target changed; ABORTED."""
    b = TxnBuilder().voted().decided("commit")
    b.phase2(
        "txn.committed",
        "calendar",
        b.outcome_receipt("calendar", "commit", undo=OFFERS["calendar"]),
    )
    b.unwinding("pay").compensated("calendar").aborted("pay", "flight", "hotel")
    return b.outcome("aborted").sealed()


def undo_plan(
    original: Mapping[str, Any],
    steps: Sequence[str] = ("calendar",),
    *,
    txn_id: str = UNDO_ID,
    key: SigningKey | None = None,
    reference: Mapping[str, Any] | None = None,
    branches: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The plan that takes ``steps`` of ``original`` back, as the coordinator builds it.

    ``key`` signs the reference (the coordinator's unless given); ``reference``
    changes its members before it is signed; ``branches`` changes members of the
    branch taking back a step (a step offering no undo needs ``operation`` and ``tier``).
    """
    first = original["events"][0]["body"]["plan"]
    receipts = {
        e["body"]["branchId"]: e["body"]["receipt"]
        for e in original["events"]
        if e["type"] == "txn.committed"
    }
    kept = [
        {"branchId": step, "reason": receipt["undo"].get("reason") or "not asked to undo"}
        for step, receipt in receipts.items()
        if step not in steps
    ]
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "undo-reference",
        "txnId": original["recordId"],
        "head": original["head"],
        "coordinator": COORDINATOR,
        "kept": kept,
        "time": format_time(UNDO_START),
        **(reference or {}),
    }
    made = []
    for step in steps:
        step_branch = next(b for b in first["branches"] if b["branchId"] == step)
        offer = receipts[step]["undo"]
        made.append(
            {
                "branchId": step,
                "participant": step_branch["participant"],
                "operation": offer["operation"],
                "tier": offer["tier"],
                "args": dict(offer["args"]),
                "amount": offer["fee"],
                "undoes": {"txnId": original["recordId"], "branchId": step},
                **(branches or {}).get(step, {}),
            }
        )
    group = first["approvals"][0]
    plan = {
        "hatpVersion": PROTOCOL_VERSION,
        "txnId": txn_id,
        "initiator": first["initiator"],
        "onBehalfOf": first["onBehalfOf"],
        "branches": made,
        "approvals": [{**group, "requirement": {**group["requirement"], "amount": None}}],
        "deadlines": {"decideBy": format_time(UNDO_START + timedelta(minutes=15))},
        "mode": "auto",
        "undoes": sign(body, key or KEYS[COORDINATOR]),
    }
    return parse_plan(plan).to_wire()


class UndoBuilder(TxnBuilder):
    """:class:`~txn_records.TxnBuilder` for an undo plan: each branch's participant and
    tier are the undo plan's (an undo branch's tier is its offer's, not its step's), and
    its commit receipt offers no undo of the undo."""

    def __init__(self, plan: Mapping[str, Any]) -> None:
        super().__init__(plan)
        self.clock.advance((UNDO_START - START).total_seconds())

    def branch(self, branch_id: str) -> dict[str, Any]:
        found: dict[str, Any] = next(b for b in self.plan["branches"] if b["branchId"] == branch_id)
        return found

    def ask_id(self, group_id: str = "finance") -> str:
        # An ask id has no dots; an undo's transaction id has one.
        return f"ask-{self.txn_id.replace('.', '_')}-{group_id}"

    def prepare_receipt(
        self, branch_id: str, vote: str = "yes", *, by: str | None = None, **change: Any
    ) -> dict[str, Any]:
        branch = self.branch(branch_id)
        hold = branch["tier"] == "hold" and vote == "yes"
        lease = self.clock.now() + timedelta(seconds=LEASE_SECONDS)
        fitting = {
            "tier": branch["tier"],
            "leaseExpiresAt": format_time(lease) if hold else None,
            "holdHorizon": format_time(lease + timedelta(minutes=10)) if hold else None,
            "preconditions": None
            if hold or vote != "yes"
            else {"versions": {branch_id: "v7"}, "scope": "write"},
        }
        by = by or branch["participant"]
        return super().prepare_receipt(branch_id, vote, by=by, **{**fitting, **change})

    def quote(self, branch_id: str, *, by: str | None = None, **change: Any) -> dict[str, Any]:
        branch = self.branch(branch_id)
        hold = branch["tier"] == "hold"
        fitting = {
            "tier": branch["tier"],
            "leaseSeconds": LEASE_SECONDS if hold else None,
            "holdSeconds": HOLD_SECONDS if hold else None,
        }
        return super().quote(branch_id, by=by or branch["participant"], **{**fitting, **change})

    def outcome_receipt(
        self, branch_id: str, kind: str, *, by: str | None = None, **change: Any
    ) -> dict[str, Any]:
        branch = self.branch(branch_id)
        committing = kind == "commit"
        compensate = committing and branch["tier"] == "compensate"
        fitting: dict[str, Any] = {"undoToken": f"undo-{branch_id}-2" if compensate else None}
        if committing:
            fitting["undo"] = NOT_AGAIN
        by = by or branch["participant"]
        return super().outcome_receipt(branch_id, kind, by=by, **{**fitting, **change})

    def _head(self, kind: str, branch_id: str, plan_digest: str | None) -> dict[str, Any]:
        head = super()._head(kind, branch_id, plan_digest)
        return {**head, "participant": self.branch(branch_id)["participant"]}


def undo_trip(plan: Mapping[str, Any], *, approve: bool = True) -> dict[str, Any]:
    """The record of the undo transaction ``plan``: every branch votes yes; finance
    approves and it commits (in tier order), or finance rejects and it aborts."""
    b = UndoBuilder(plan).planned()
    ids = [branch["branchId"] for branch in plan["branches"]]
    for branch_id in ids:
        b.prepared(branch_id)
    if not approve:
        b.approved("finance", "reject").decided("abort", "finance rejected the undo")
        return b.aborted(*ids).outcome("aborted").sealed()
    b.approved().decided("commit")
    tiers = {branch["branchId"]: branch["tier"] for branch in plan["branches"]}
    b.committed(*sorted(ids, key=lambda branch_id: COMMIT_ORDER.index(tiers[branch_id])))
    return b.outcome("committed").sealed()
