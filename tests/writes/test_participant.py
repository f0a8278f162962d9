"""A write as a compensate-tier participant: dry-run prepare, one-transaction commit, real undo.

The write participant keeps its branch state in the same database as the
inventory and hatp's write bookkeeping (SQLite or PostgreSQL, the ``store``
fixture), so its commit is one transaction. The last tests put it in a real
coordinator transaction beside the trip world's four participants.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.trips import Tap, Trip, failed_findings
from hatp.clock import ManualClock
from hatp.demo import CALENDAR, PARTICIPANT_IDS, TripWorld
from hatp.errors import DriftDetected, PreconditionChanged, WritePlanUnknown
from hatp.evidence import SigningKey
from hatp.model import (
    BranchState,
    Certainty,
    Change,
    EffectPreview,
    EffectVerdict,
    ObservedEffect,
    Plan,
    Preconditions,
    TxnState,
    effect_verdict,
    parse_plan,
)
from hatp.participant import ParticipantServer, Relay
from hatp.store import DecisionLog, Store, open_store
from hatp.writes import (
    ExecutionStatus,
    PlanStatus,
    Registry,
    WriteOperation,
    Writes,
    check_plan,
    derive_key,
    undo_plan,
)
from participant.ops import run
from writes.executor_world import (
    ADJUST,
    APPROVER,
    POLICY,
    approved,
    journal_rows,
    key_row,
    propose,
)
from writes.inventory import (
    INVENTORY,
    AdjustStock,
    SetUnit,
    live,
    make_plan,
    registry,
    stock,
    touch,
)

WRITES_ID = "mcp://ledger.acme.example"
WRITES_KEY = SigningKey.from_seed(bytes([43]) * 32, f"{WRITES_ID}#key-1")
OPERATION = "correct_stock"
DECIDE_BY = "2026-12-02T10:00:00.000Z"
#: SKU-1 before (ROWS), after ADJUST (+5), and after its undo (-5): version counts each write.
BEFORE, AFTER, UNDONE = (10, "each", 1), (15, "each", 2), (10, "each", 3)


def write_server(store: Store, writes: Writes, clock: ManualClock) -> ParticipantServer:
    """The ledger participant: the write operation, branch state on ``store``."""
    return ParticipantServer(
        WRITES_ID, WRITES_KEY, store, [WriteOperation(writes, OPERATION)], clock
    )


def write_branch(plan_id: str = "fix-1", version: int = 1, **args: Any) -> dict[str, Any]:
    return {
        "branchId": "stock",
        "participant": WRITES_ID,
        "operation": OPERATION,
        "tier": "compensate",
        "args": args or {"planId": plan_id, "version": version},
        "amount": None,
    }


def one_branch_plan(txn_id: str = "txn-1", **branch: Any) -> Plan:
    return parse_plan(
        {
            "hatpVersion": "0.1",
            "txnId": txn_id,
            "initiator": "agent://acme.com/stock-bot",
            "onBehalfOf": "human://acme.com/dana",
            "branches": [write_branch(**branch)],
            "deadlines": {"decideBy": DECIDE_BY},
        }
    )


def seen(receipt: dict[str, Any]) -> Preconditions | None:
    found = receipt.get("preconditions")
    return None if found is None else Preconditions.model_validate(found)


# --- the undo --------------------------------------------------------------------------------


def test_the_undo_is_the_inverses_from_the_postcondition_WRITE_UNDO(
    writes: Writes, store: Store
) -> None:
    checked = check_plan(make_plan(store, "fix-1", 1, [ADJUST]), registry())
    undo = undo_plan(checked, registry())
    assert undo.plan.snapshot == checked.plan.postcondition
    assert undo.plan.postcondition == {
        "inventory/SKU-1": {"on_hand": 10, "unit": "each", "version": 3}
    }
    assert [(c.type, c.params["delta"]) for c in undo.plan.corrections] == [("adjust_stock", -5)]
    assert (undo.plan.plan_id, undo.plan.version) == ("fix-1", 1)
    assert undo.digest != checked.digest


def test_several_corrections_are_undone_last_first_WRITE_UNDO(store: Store) -> None:
    from writes.executor_world import ROWS
    from writes.inventory import stock

    stock(store, ROWS)
    unit = ("set_unit", {"sku": "SKU-1", "unit": "case"})
    checked = check_plan(make_plan(store, "fix-1", 1, [ADJUST, unit]), registry())
    undo = undo_plan(checked, registry())
    assert [(c.type, dict(c.params)) for c in undo.plan.corrections] == [
        ("set_unit", {"sku": "SKU-1", "unit": "each"}),
        ("adjust_stock", {"sku": "SKU-1", "delta": -5, "reason": "undo: recount"}),
    ]
    assert undo.plan.postcondition["inventory/SKU-1"] == {
        "on_hand": 10,
        "unit": "each",
        "version": 5,
    }


class NoUndoSetUnit(SetUnit):
    """A correction type with no inverse (the default)."""

    def inverse(self, params: Any, before: Any) -> None:
        return None


def no_undo_registry() -> Registry:
    return Registry([INVENTORY], [AdjustStock(), NoUndoSetUnit()])


def test_a_correction_with_no_inverse_cannot_be_undone(writes: Writes, store: Store) -> None:
    unit = ("set_unit", {"sku": "SKU-1", "unit": "case"})
    checked = check_plan(make_plan(store, "fix-1", 1, [unit]), no_undo_registry())
    with pytest.raises(ValueError, match="no inverse"):
        undo_plan(checked, no_undo_registry())


def test_an_undo_restores_the_records_once_and_is_journaled_WRITE_UNDO(
    writes: Writes, store: Store
) -> None:
    """[WRITE-UNDO] the inverses run once under their own key, journalled as an undo."""
    approved(writes, store)
    writes.execute("fix-1", 1, "w1")
    assert live(store)["SKU-1"] == AFTER
    undone = writes.undo("fix-1", 1, "w1")
    assert undone.status is ExecutionStatus.EXECUTED
    assert undone.key == derive_key("fix-1", 1, undo=True) != derive_key("fix-1", 1)
    assert live(store)["SKU-1"] == UNDONE
    entries = writes.journal("fix-1")
    assert [(e.source, e.approvers) for e in entries] == [
        ("direct", (APPROVER.id,)),
        ("undo", (APPROVER.id,)),
    ]
    assert entries[1].result["undoes"] == entries[0].digest
    assert writes.status("fix-1", 1).plan.status is PlanStatus.COMPENSATED
    # Undone once: a repeat answers with the stored result and writes nothing.
    again = writes.undo("fix-1", 1, "w2")
    assert again.status is ExecutionStatus.ALREADY_EXECUTED
    assert again.result == undone.result
    assert live(store)["SKU-1"] == UNDONE
    assert len(journal_rows(store)) == 2


def test_an_undo_after_drift_is_refused_and_writes_nothing_WRITE_UNDO(
    writes: Writes, store: Store
) -> None:
    approved(writes, store)
    writes.execute("fix-1", 1, "w1")
    touch(store, "SKU-1", on_hand=42)
    with pytest.raises(DriftDetected) as caught:
        writes.undo("fix-1", 1, "w1")
    assert set(caught.value.data["records"]) == {"inventory/SKU-1"}
    assert live(store)["SKU-1"] == (42, "each", 2)
    assert len(journal_rows(store)) == 1
    assert key_row(store, derive_key("fix-1", 1, undo=True)) is None


def test_a_plan_never_executed_has_nothing_to_undo(writes: Writes, store: Store) -> None:
    approved(writes, store)
    with pytest.raises(WritePlanUnknown, match="never executed"):
        writes.undo("fix-1", 1, "w1")
    assert live(store)["SKU-1"] == BEFORE


# --- prepare, commit, compensate on the participant ----------------------------------------


def _not_approved(writes: Writes, store: Store) -> None:
    propose(writes, store)


def _drifted(writes: Writes, store: Store) -> None:
    approved(writes, store)
    touch(store, "SKU-1", on_hand=11)


def _executed(writes: Writes, store: Store) -> None:
    approved(writes, store)
    writes.execute("fix-1", 1, "w1")


def _unknown(writes: Writes, store: Store) -> None:
    return None


REFUSALS: dict[str, Callable[[Writes, Store], None]] = {
    "NOT_APPROVED": _not_approved,
    "DRIFT_DETECTED": _drifted,
    "ALREADY_EXECUTED": _executed,
    "WRITE_PLAN_UNKNOWN": _unknown,
}


@pytest.mark.parametrize("reason", sorted(REFUSALS))
def test_prepare_is_a_dry_run_that_votes_no_with_the_reason_WRITE_PARTICIPANT(
    reason: str, writes: Writes, store: Store, clock: ManualClock
) -> None:
    REFUSALS[reason](writes, store)
    before = live(store)
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(), "stock", 1))
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith(f"{reason}: ")
    assert live(store) == before


def test_a_plan_that_cannot_be_undone_votes_no_WRITE_PARTICIPANT(
    store: Store, clock: ManualClock
) -> None:
    from writes.executor_world import ROWS
    from writes.inventory import stock

    stock(store, ROWS)
    writes = Writes(store, no_undo_registry(), POLICY, clock)
    unit = ("set_unit", {"sku": "SKU-1", "unit": "case"})
    approved(writes, store, corrections=[unit])
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(), "stock", 1))
    assert receipt["vote"] == "no"
    assert receipt["reason"].startswith("NOT_COMPENSABLE: ")


@pytest.mark.parametrize(
    "args",
    [{"planId": "fix-1"}, {"planId": "fix-1", "version": "1"}, {"planId": 7, "version": 1}],
)
def test_a_branch_that_names_no_plan_version_votes_no(
    args: dict[str, Any], writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(**args), "stock", 1))
    assert receipt["reason"].startswith("BAD_ARGS: ")


def test_a_yes_vote_carries_the_records_state_digests_PART_PRECONDITION(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    proposal = approved(writes, store)
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(), "stock", 1))
    assert (receipt["vote"], receipt["tier"]) == ("yes", "compensate")
    assert set(receipt["preconditions"]["versions"]) == {"inventory/SKU-1"}
    assert receipt["preconditions"]["scope"] == f"write-plan {proposal.digest}"
    assert key_row(store, derive_key("fix-1", 1)) is None  # a dry run reserves nothing


def test_the_write_its_key_and_the_branch_state_commit_in_one_transaction_PART_DURABLE(
    writes: Writes, store: Store, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    approved(writes, store)
    server = write_server(store, writes, clock)
    plan = one_branch_plan()
    prepared = run(server.prepare(plan, "stock", 1))
    digest = prepared["planDigest"]

    def broken(_: int) -> str:  # fails after the write, before the branch state is saved
        raise RuntimeError("the participant failed after the operation's commit")

    with monkeypatch.context() as patch:
        patch.setattr("hatp.participant._handlers.secrets.token_urlsafe", broken)
        with pytest.raises(RuntimeError):
            run(server.commit("txn-1", "stock", 1, digest, seen(prepared)))
    # Nothing of it was kept: not the write, not the key, not the journal, not the branch.
    assert live(store)["SKU-1"] == BEFORE
    assert key_row(store, derive_key("fix-1", 1)) is None
    assert journal_rows(store) == []
    assert run(server.status("txn-1", "stock")).state is BranchState.PREPARED

    receipt = run(server.commit("txn-1", "stock", 1, digest, seen(prepared)))
    assert receipt["outcome"] == "committed"
    assert receipt["effect"]["key"] == derive_key("fix-1", 1)
    assert receipt["effect"]["records"]["inventory/SKU-1"]["on_hand"] == 15
    assert live(store)["SKU-1"] == AFTER
    [entry] = writes.journal()
    assert entry.result["origin"] == f"{WRITES_ID} txn-1/stock"
    # A repeat is the stored receipt; nothing runs twice [PART-IDEMPOTENT].
    assert run(server.commit("txn-1", "stock", 1, digest, seen(prepared))) == receipt
    assert live(store)["SKU-1"] == AFTER

    undone = run(server.compensate("txn-1", "stock", 1, receipt["undoToken"]))
    assert undone["outcome"] == "compensated"
    assert live(store)["SKU-1"] == UNDONE
    assert [e.source for e in writes.journal()] == ["direct", "undo"]


def test_drift_between_prepare_and_commit_is_refused_PART_PRECONDITION(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    server = write_server(store, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    touch(store, "SKU-1", on_hand=12)
    with pytest.raises(PreconditionChanged) as caught:
        run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    assert set(caught.value.data["changed"]) == {"inventory/SKU-1"}
    assert live(store)["SKU-1"] == (12, "each", 1)
    assert key_row(store, derive_key("fix-1", 1)) is None
    assert journal_rows(store) == []


def test_the_same_version_in_two_transactions_runs_once_WRITE_PARTICIPANT(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    server = write_server(store, writes, clock)
    first = run(server.prepare(one_branch_plan("txn-1"), "stock", 1))
    second = run(server.prepare(one_branch_plan("txn-2"), "stock", 1))
    assert first["vote"] == second["vote"] == "yes"  # two dry runs, nothing placed
    run(server.commit("txn-1", "stock", 1, first["planDigest"], seen(first)))
    # The records are now the postcondition: the second commit's re-read refuses it.
    with pytest.raises(PreconditionChanged):
        run(server.commit("txn-2", "stock", 1, second["planDigest"], seen(second)))
    assert live(store)["SKU-1"] == AFTER
    assert len(journal_rows(store)) == 1


def test_an_undo_after_drift_leaves_the_branch_committed_WRITE_UNDO(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    server = write_server(store, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    receipt = run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    touch(store, "SKU-1", on_hand=40)  # someone counted again after the write
    with pytest.raises(DriftDetected):
        run(server.compensate("txn-1", "stock", 1, receipt["undoToken"]))
    assert live(store)["SKU-1"] == (40, "each", 2)  # never overwritten: a person decides
    assert run(server.status("txn-1", "stock")).state is BranchState.COMMITTED
    assert len(journal_rows(store)) == 1


# --- effect previews: what the commit will change, and what it changed --------------------


def _preview(receipt: dict[str, Any]) -> EffectPreview:
    return EffectPreview.model_validate(receipt["preview"])


def _observed(receipt: dict[str, Any]) -> ObservedEffect:
    return ObservedEffect.model_validate(receipt["observed"])


def _rows(changes: list[Change]) -> list[tuple[Any, ...]]:
    return [(c.resource, c.kind, c.field, c.before, c.after) for c in changes]


def test_a_yes_vote_previews_each_corrected_column_exactly(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    """The snapshot's row before, the postcondition's after, each column that changes."""
    unit = ("set_unit", {"sku": "SKU-2", "unit": "case"})
    approved(writes, store, corrections=[ADJUST, unit])
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(), "stock", 1))
    said = _preview(receipt)
    assert said.certainty is Certainty.EXACT
    assert _rows(said.changes) == [
        ("inventory/SKU-1", "update", "on_hand", 10, 15),
        ("inventory/SKU-1", "update", "version", 1, 2),
        ("inventory/SKU-2", "update", "unit", "box", "case"),
        ("inventory/SKU-2", "update", "version", 1, 2),
    ]
    assert said.summary.startswith("update inventory/SKU-1: on_hand 10 → 15; ")


def test_a_commit_observes_what_its_preview_said_TXN_EFFECT(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    approved(writes, store)
    server = write_server(store, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    receipt = run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    assert receipt["outcome"] == "committed"
    assert effect_verdict(_preview(prepared), _observed(receipt)) is EffectVerdict.AS_PREVIEWED
    assert _rows(_observed(receipt).changes) == _rows(_preview(prepared).changes)


def test_apart_a_commit_that_finds_its_write_observes_the_same_change_TXN_EFFECT(
    writes: Writes, store: Store, clock: ManualClock, apart: Store
) -> None:
    """The commit of a write an earlier attempt made: the key's stored records after."""
    approved(writes, store)
    server = write_server(apart, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    writes.execute("fix-1", 1, ORIGIN, origin=ORIGIN)
    receipt = run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    assert effect_verdict(_preview(prepared), _observed(receipt)) is EffectVerdict.AS_PREVIEWED


@pytest.mark.parametrize(("skus", "listed"), [(40, "records"), (70, "none")])
def test_a_write_too_big_to_list_by_column_is_previewed_by_record_or_not_at_all(
    skus: int, listed: str, writes: Writes, store: Store, clock: ManualClock
) -> None:
    """At most 64 changes: 40 rows of 2 changed columns each are previewed row by row
    (and observed so); 70 rows are not previewed, which is signed as certainty none."""
    stock(store, {f"SKU-{n}": (1, "each") for n in range(100, 100 + skus)})
    adjust = [
        ("adjust_stock", {"sku": f"SKU-{n}", "delta": 5, "reason": "recount"})
        for n in range(100, 100 + skus)
    ]
    approved(writes, store, corrections=adjust)
    server = write_server(store, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    receipt = run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    said = _preview(prepared)
    if listed == "none":
        assert (said.certainty, said.changes) == (Certainty.NONE, [])
        assert receipt["observed"] is None
        assert effect_verdict(said, None) is EffectVerdict.UNCHECKED
        return
    assert said.certainty is Certainty.EXACT
    assert len(said.changes) == skus
    assert _rows(said.changes)[0] == (
        "inventory/SKU-100",
        "update",
        None,
        {"on_hand": 1, "unit": "each", "version": 1},
        {"on_hand": 6, "unit": "each", "version": 2},
    )
    assert effect_verdict(said, _observed(receipt)) is EffectVerdict.AS_PREVIEWED


@pytest.mark.parametrize(
    "corrections",
    [
        [ADJUST, ("set_unit", {"sku": "SKU-2", "unit": "case"})],  # column by column
        [  # 40 rows of 2 changed columns: row by row
            ("adjust_stock", {"sku": f"SKU-{n}", "delta": 5, "reason": "recount"})
            for n in range(100, 140)
        ],
    ],
    ids=["columns", "rows"],
)
def test_the_approver_is_shown_the_preview_the_yes_vote_signs_WRITE_PREVIEW(
    corrections: list[tuple[str, dict[str, Any]]],
    writes: Writes,
    store: Store,
    clock: ManualClock,
) -> None:
    stock(store, {f"SKU-{n}": (1, "each") for n in range(100, 140)})
    proposal = approved(writes, store, corrections=corrections)
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(), "stock", 1))
    assert receipt["vote"] == "yes"
    assert proposal.preview is not None
    assert proposal.preview.certainty is Certainty.EXACT
    assert proposal.preview.model_dump(mode="json") == _preview(receipt).model_dump(mode="json")


def test_a_plan_too_big_to_preview_has_none_at_proposal_and_at_prepare_WRITE_PREVIEW(
    writes: Writes, store: Store, clock: ManualClock
) -> None:
    stock(store, {f"SKU-{n}": (1, "each") for n in range(100, 170)})
    adjust = [
        ("adjust_stock", {"sku": f"SKU-{n}", "delta": 5, "reason": "recount"})
        for n in range(100, 170)
    ]
    proposal = approved(writes, store, corrections=adjust)
    receipt = run(write_server(store, writes, clock).prepare(one_branch_plan(), "stock", 1))
    assert proposal.preview is None
    assert (_preview(receipt).certainty, _preview(receipt).changes) == (Certainty.NONE, [])


ORIGIN = f"{WRITES_ID} txn-1/stock"


@pytest.fixture
def apart(tmp_path: Path) -> Iterator[Store]:
    """The participant's own store, apart from the system of record's database."""
    branches = open_store(tmp_path / "branches.db")
    yield branches
    branches.close()


def test_a_participant_on_another_store_executes_by_the_key(
    writes: Writes, store: Store, clock: ManualClock, apart: Store
) -> None:
    approved(writes, store)
    server = write_server(apart, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    assert prepared["vote"] == "yes"
    receipt = run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    assert live(store)["SKU-1"] == AFTER
    run(server.compensate("txn-1", "stock", 1, receipt["undoToken"]))
    assert live(store)["SKU-1"] == UNDONE
    assert [e.source for e in writes.journal()] == ["direct", "undo"]


def test_apart_a_commit_whose_branch_state_was_lost_finds_its_write(
    writes: Writes, store: Store, clock: ManualClock, apart: Store
) -> None:
    approved(writes, store)
    server = write_server(apart, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    # An earlier commit wrote, then the participant died before saving the branch.
    writes.execute("fix-1", 1, ORIGIN, origin=ORIGIN)
    receipt = run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    assert receipt["outcome"] == "committed"
    assert live(store)["SKU-1"] == AFTER
    assert len(journal_rows(store)) == 1


def test_apart_an_abort_after_a_lost_commit_undoes_the_write(
    writes: Writes, store: Store, clock: ManualClock, apart: Store
) -> None:
    approved(writes, store)
    server = write_server(apart, writes, clock)
    run(server.prepare(one_branch_plan(), "stock", 1))
    writes.execute("fix-1", 1, ORIGIN, origin=ORIGIN)
    run(server.abort("txn-1", "stock", 1))
    assert live(store)["SKU-1"] == UNDONE
    assert [e.source for e in writes.journal()] == ["direct", "undo"]


def test_apart_another_origins_write_is_not_this_branchs(
    writes: Writes, store: Store, clock: ManualClock, apart: Store
) -> None:
    approved(writes, store)
    server = write_server(apart, writes, clock)
    prepared = run(server.prepare(one_branch_plan(), "stock", 1))
    writes.execute("fix-1", 1, "w-elsewhere")
    with pytest.raises(PreconditionChanged):
        run(server.commit("txn-1", "stock", 1, prepared["planDigest"], seen(prepared)))
    run(server.abort("txn-1", "stock", 1))
    assert live(store)["SKU-1"] == AFTER  # someone else's write: not undone here
    assert len(journal_rows(store)) == 1


# --- in a coordinator's transaction --------------------------------------------------------


class Meanwhile(Relay):
    """Runs ``edit`` (someone else's write) just before the first commit reaches the participant."""

    def __init__(self, inner: Any, edit: Callable[[], object]) -> None:
        super().__init__(inner)
        self._edit: Callable[[], object] | None = edit

    async def relay(self, method: str, call: Any) -> Any:
        if method == "commit" and self._edit is not None:
            edit, self._edit = self._edit, None
            edit()
        return await call()


@pytest.fixture
def trip(
    tmp_path: Path, clock: ManualClock, store: Store, store_url: str, writes: Writes
) -> Iterator[Trip]:
    """The trip world (its own stores), the log and the ledger participant on ``store``."""
    urls = None if store_url.startswith("sqlite") else dict.fromkeys(PARTICIPANT_IDS, store_url)
    world = TripWorld.open(tmp_path / "trip", clock, rooms=30, store_urls=urls)
    world.keyring.add(WRITES_KEY.public, WRITES_ID)
    world.keyring.trust(WRITES_ID)
    found = Trip(world, DecisionLog(store), clock)
    found.links[WRITES_ID] = Tap(write_server(store, writes, clock), found.votes)
    yield found
    world.close()


def trip_with_write(trip: Trip, **options: Any) -> dict[str, Any]:
    """A trip plan with the stock correction as a compensate branch before the calendar's."""
    plan = trip.plan(**options)
    at = [b["branchId"] for b in plan["branches"]].index("calendar")
    plan["branches"].insert(at, write_branch())
    return plan


def test_a_transaction_with_a_write_branch_commits_it_once_WRITE_PARTICIPANT(
    trip: Trip, writes: Writes, store: Store
) -> None:
    """[WRITE-PARTICIPANT] an approved write, one branch of a coordinator's transaction."""
    approved(writes, store)
    outcome = trip.run(trip_with_write(trip))
    assert outcome.state is TxnState.COMMITTED, outcome.reason
    assert live(store)["SKU-1"] == AFTER
    [entry] = writes.journal()
    assert entry.result["origin"] == f"{WRITES_ID} {outcome.txn_id}/stock"
    assert failed_findings(outcome, trip.world) == []


def test_another_branch_voting_no_leaves_the_write_unrun_WRITE_PARTICIPANT(
    trip: Trip, writes: Writes, store: Store
) -> None:
    approved(writes, store)
    outcome = trip.run(trip_with_write(trip, seat="2A"))  # business class: the airline says no
    assert outcome.state is TxnState.ABORTED
    assert live(store)["SKU-1"] == BEFORE
    assert journal_rows(store) == []
    assert key_row(store, derive_key("fix-1", 1)) is None


def test_a_later_branch_failing_at_commit_undoes_the_write_WRITE_UNDO(
    trip: Trip, writes: Writes, store: Store
) -> None:
    approved(writes, store)
    calendar = Meanwhile(trip.links[CALENDAR], lambda: trip.world.edit_calendar())
    outcome = trip.run(trip_with_write(trip), links={CALENDAR: calendar})
    assert outcome.state is TxnState.ABORTED
    assert "PRECONDITION_CHANGED" in outcome.reason
    assert live(store)["SKU-1"] == UNDONE  # on hand as before; the version counts both writes
    assert [e.source for e in writes.journal()] == ["direct", "undo"]
    assert writes.status("fix-1", 1).plan.status is PlanStatus.COMPENSATED
    assert failed_findings(outcome, trip.world) == []


def test_drift_before_the_commit_aborts_the_transaction_PART_PRECONDITION(
    trip: Trip, writes: Writes, store: Store
) -> None:
    approved(writes, store)
    ledger = Meanwhile(trip.links[WRITES_ID], lambda: touch(store, "SKU-1", on_hand=12))
    outcome = trip.run(trip_with_write(trip), links={WRITES_ID: ledger})
    assert outcome.state is TxnState.ABORTED
    assert "PRECONDITION_CHANGED" in outcome.reason
    assert live(store)["SKU-1"] == (12, "each", 1)
    assert journal_rows(store) == []
    assert {p: e for p, e in trip.world.effects(outcome.txn_id).items()} == dict.fromkeys(
        PARTICIPANT_IDS, "none"
    )
