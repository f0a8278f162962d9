"""[UNDO-CLAIM] the coordinator's undo journal: an undo transaction claims the steps it takes
back in the same database transaction that logs it, and no two undos hold one step.

Every test runs on SQLite and on PostgreSQL (the ``store`` fixture); the races run on
separate stores on one database, as separate coordinator processes would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa

from hatp.errors import (
    HatpError,
    OutcomeConflict,
    StoreUnavailable,
    TransactionUnknown,
    UndoRefused,
    error_from_dict,
)
from hatp.model.txn import TxnState
from hatp.store import DecisionLog, Store, UndoClaim
from hatp.store._schema import record_event, txn, undo_claim
from racing import race

NewTxn = Callable[..., Any]
ORIGINAL = "orig"
RACERS = 4
#: States in which an undo transaction is still running: its claims hold.
OPEN = (
    TxnState.ACTIVE,
    TxnState.COMMITTING,
    TxnState.IN_DOUBT,
    TxnState.UNWINDING,
    TxnState.ABORTING,
)


def begin_undo(log: DecisionLog, undo: Any, steps: Sequence[str], original: str = ORIGINAL) -> int:
    """Log the undo transaction ``undo`` (a ``new_txn``) with its ``txn.planned`` event,
    claiming ``steps`` of ``original``, as the coordinator does; return the fence."""
    planned = undo.event("txn.planned", plan=undo.plan, coordinator="coord-a", fence=1)
    claims = (original, list(steps))
    now = undo.clock.now()
    return log.create(
        undo.txn_id, undo.plan, undo.plan_digest, "coord-a", now, 30, [planned], claims=claims
    )


def refused(log: DecisionLog, undo: Any, steps: Sequence[str]) -> UndoRefused:
    """The refusal of logging ``undo`` claiming ``steps``, checked to have written nothing."""
    with pytest.raises(UndoRefused) as caught:
        begin_undo(log, undo, steps)
    assert written(log.store, undo.txn_id) == (0, 0, 0)
    return caught.value


def attempt(log: DecisionLog, undo: Any, steps: Sequence[str], original: str) -> UndoRefused | None:
    """Log ``undo`` claiming ``steps`` of ``original``: ``None`` when it was logged, else
    its refusal."""
    try:
        begin_undo(log, undo, steps, original=original)
    except UndoRefused as refusal:
        return refusal
    return None


def written(store: Store, undo_txn_id: str) -> tuple[int, int, int]:
    """How many transaction rows, record events and claims ``undo_txn_id`` has."""
    counts = []
    with store.transaction() as conn:
        for table, column in (
            (txn, txn.c.txn_id),
            (record_event, record_event.c.txn_id),
            (undo_claim, undo_claim.c.undo_txn_id),
        ):
            query = sa.select(sa.func.count()).select_from(table).where(column == undo_txn_id)
            counts.append(int(conn.execute(query).scalar_one()))
    return counts[0], counts[1], counts[2]


def claimants(log: DecisionLog, original: str = ORIGINAL) -> dict[str, tuple[str, TxnState | None]]:
    """Each claimed step of ``original``: its claimant and where that one stands."""
    return {step: (c.undo_txn_id, c.state) for step, c in log.undo_claims(original).items()}


def end(log: DecisionLog, undo_txn_id: str, fence: int, state: TxnState) -> None:
    """Move the undo transaction to ``state`` under its lease, as its coordinator would."""
    log.append(undo_txn_id, fence, [], state=state, release=state.finished)


def assert_refusal(refusal: UndoRefused, reason: str, step: str, holder: str) -> None:
    """A typed refusal naming the original, the step and the undo that holds it."""
    assert isinstance(refusal, HatpError)
    assert (refusal.code, refusal.reason) == ("UNDO_REFUSED", reason)
    assert refusal.data == {
        "reason": reason,
        "txnId": ORIGINAL,
        "branchId": step,
        "undoTxnId": holder,
    }
    rebuilt = error_from_dict(refusal.to_dict())
    assert isinstance(rebuilt, UndoRefused) and rebuilt.data == refusal.data


def test_create_with_claims_writes_them_with_the_txn_row_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] an undo transaction is logged with its claims: each step of the
    original names it, active; other transactions' steps have no claims."""
    undo = new_txn("undo-1")
    assert begin_undo(log, undo, ["a", "b"]) == 1
    assert written(log.store, "undo-1") == (1, 1, 2)
    claims = log.undo_claims(ORIGINAL)
    assert claims == {
        "a": UndoClaim(ORIGINAL, "a", "undo-1", TxnState.ACTIVE),
        "b": UndoClaim(ORIGINAL, "b", "undo-1", TxnState.ACTIVE),
    }
    assert not any(claim.void or claim.undone for claim in claims.values())
    assert log.get("undo-1").state is TxnState.ACTIVE
    assert log.events("undo-1") == undo.writer.events()
    assert log.undo_claims("other") == {}
    assert log.undo_claims("undo-1") == {}  # claims are by the original's id


def test_a_transaction_without_claims_claims_nothing_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] an ordinary transaction (no ``claims``) writes no claim."""
    new_txn("txn-1").create(log)
    assert written(log.store, "txn-1") == (1, 1, 0)


@pytest.mark.parametrize("state", OPEN, ids=lambda s: s.value)
def test_a_step_claimed_by_a_running_undo_is_refused_pending_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn, state: TxnState
) -> None:
    """[UNDO-CLAIM] while the undo holding a step runs (any open state), another undo
    claiming it is refused UNDO_PENDING naming the holder, and writes nothing: no
    transaction row, no event, no claim (not even on its steps that were free)."""
    fence = begin_undo(log, new_txn("undo-1"), ["b", "c"])
    if state is not TxnState.ACTIVE:
        end(log, "undo-1", fence, state)
    before = claimants(log)

    refusal = refused(log, new_txn("undo-2"), ["c", "a"])  # "a" is free, "c" is not

    assert_refusal(refusal, "UNDO_PENDING", "c", "undo-1")
    assert "still open" in refusal.message
    assert claimants(log) == before
    assert "a" not in log.undo_claims(ORIGINAL)
    with pytest.raises(TransactionUnknown):
        log.get("undo-2")


def test_a_step_an_undo_took_back_is_refused_already_undone_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] once the undo holding a step committed, the step stays its: another
    undo claiming it is refused ALREADY_UNDONE, and writes nothing."""
    fence = begin_undo(log, new_txn("undo-1"), ["a", "b"])
    end(log, "undo-1", fence, TxnState.COMMITTING)
    end(log, "undo-1", fence, TxnState.COMMITTED)
    claims = log.undo_claims(ORIGINAL)
    assert all(claim.undone and not claim.void for claim in claims.values())

    refusal = refused(log, new_txn("undo-2"), ["b"])

    assert_refusal(refusal, "ALREADY_UNDONE", "b", "undo-1")
    assert claimants(log) == {
        "a": ("undo-1", TxnState.COMMITTED),
        "b": ("undo-1", TxnState.COMMITTED),
    }


def test_a_later_undo_takes_over_the_steps_of_one_that_aborted_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] an aborted undo's claims are void: a later undo takes over the steps
    it claims (and only those), with new ones beside; the void claims stay readable."""
    fence = begin_undo(log, new_txn("undo-1"), ["a", "b"])
    end(log, "undo-1", fence, TxnState.ABORTING)
    end(log, "undo-1", fence, TxnState.ABORTED)
    assert all(claim.void for claim in log.undo_claims(ORIGINAL).values())

    assert begin_undo(log, new_txn("undo-2"), ["a", "c"]) == 1

    assert claimants(log) == {
        "a": ("undo-2", TxnState.ACTIVE),
        "b": ("undo-1", TxnState.ABORTED),
        "c": ("undo-2", TxnState.ACTIVE),
    }
    assert written(log.store, "undo-2") == (1, 1, 2)
    # The taken-over step is undo-2's now: a third undo waits for it, not for undo-1.
    assert_refusal(refused(log, new_txn("undo-3"), ["b", "a"]), "UNDO_PENDING", "a", "undo-2")
    assert claimants(log)["b"] == ("undo-1", TxnState.ABORTED)


def test_an_undo_refused_on_one_step_leaves_the_others_free_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] a refusal rolls back the claims already made in the same create:
    after an undo refused on its second step, its first step is free for the next."""
    begin_undo(log, new_txn("undo-1"), ["b"])
    refused(log, new_txn("undo-2"), ["a", "b"])
    assert begin_undo(log, new_txn("undo-3"), ["a"]) == 1
    assert claimants(log) == {
        "a": ("undo-3", TxnState.ACTIVE),
        "b": ("undo-1", TxnState.ACTIVE),
    }


def test_claims_are_kept_per_original_transaction_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] the same step id of two originals: two claims, neither in the way."""
    begin_undo(log, new_txn("undo-1"), ["a"], original="orig-1")
    begin_undo(log, new_txn("undo-2"), ["a"], original="orig-2")
    assert claimants(log, "orig-1") == {"a": ("undo-1", TxnState.ACTIVE)}
    assert claimants(log, "orig-2") == {"a": ("undo-2", TxnState.ACTIVE)}


def test_a_logged_undo_id_is_refused_before_any_claim_UNDO_CLAIM(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[UNDO-CLAIM] creating an undo whose id is already in the log claims nothing."""
    new_txn("undo-1").create(log)
    with pytest.raises(OutcomeConflict):
        begin_undo(log, new_txn("undo-1"), ["a"])
    assert log.undo_claims(ORIGINAL) == {}


def test_a_journal_the_database_fails_writes_nothing_STORE_ATOMIC(
    log: DecisionLog, new_txn: NewTxn
) -> None:
    """[STORE-ATOMIC] [UNDO-CLAIM] when the claims cannot be written (here: their table is
    gone), the undo transaction is not logged either; reading the claims fails the same."""
    with log.store.transaction() as conn:
        conn.exec_driver_sql("DROP TABLE hatp_undo_claim")
    with pytest.raises(StoreUnavailable, match="nothing of it was recorded"):
        begin_undo(log, new_txn("undo-1"), ["a"])
    with pytest.raises(TransactionUnknown):
        log.get("undo-1")
    with pytest.raises(StoreUnavailable):
        log.undo_claims(ORIGINAL)


@pytest.mark.parametrize(
    ("orders", "after_void"),
    [
        pytest.param((["a", "b"],) * RACERS, False, id="the-same-steps"),
        pytest.param((["a", "b", "c"], ["c", "b", "a"]), False, id="in-opposite-orders"),
        pytest.param((["a", "b"],) * RACERS, True, id="over-a-void-claim"),
    ],
)
def test_racing_undos_exactly_one_claims_the_steps_UNDO_CLAIM(
    log: DecisionLog,
    new_txn: NewTxn,
    open_more: Callable[[], Store],
    orders: tuple[list[str], ...],
    after_void: bool,
) -> None:
    """[UNDO-CLAIM] undos on separate stores (as separate coordinators) claim the same
    steps at once: in the same order, in opposite orders (never a failed store for a
    lock-order deadlock), or after an undo of them aborted (its void claim taken over).
    Exactly one is logged holding every step; each other is refused UNDO_PENDING naming
    it (not the aborted one), and left nothing behind."""
    logs = [DecisionLog(open_more()) for _ in orders]
    for round_ in range(5):
        original = f"orig-{round_}"
        if after_void:
            first = new_txn(f"undo-{round_}-first")
            fence = begin_undo(log, first, orders[0], original=original)
            end(log, first.txn_id, fence, TxnState.ABORTED)
        undos = [new_txn(f"undo-{round_}-{n}") for n in range(len(orders))]
        results = race(
            [
                partial(attempt, mine, undo, steps, original)
                for mine, undo, steps in zip(logs, undos, orders, strict=True)
            ]
        )
        winners, claims, refusals, left = race_result(log, undos, results, original)
        assert len(winners) == 1, results
        (winner,) = winners
        assert claims == {step: (winner, TxnState.ACTIVE) for step in orders[0]}
        losers = len(undos) - 1
        assert refusals == [("UNDO_PENDING", original, winner)] * losers
        assert left == [(0, 0, 0)] * losers


def race_result(
    log: DecisionLog, undos: Sequence[Any], results: Sequence[UndoRefused | None], original: str
) -> tuple[list[str], dict[str, Any], list[tuple[str, Any, Any]], list[Any]]:
    """What a race left: the undos logged (the winners), the original's claims, each loser's
    refusal (reason, txnId, undoTxnId named) and what each loser wrote."""
    winners = [undo.txn_id for undo, result in zip(undos, results, strict=True) if result is None]
    refusals = [
        (result.reason, result.data["txnId"], result.data["undoTxnId"])
        for result in results
        if result is not None
    ]
    left = [
        written(log.store, undo.txn_id)
        for undo, result in zip(undos, results, strict=True)
        if result is not None
    ]
    return winners, claimants(log, original), refusals, left
