"""Who is told of a transaction's changes of state as they happen: metrics, say.

A :class:`TxnObserver` is handed each change once its write is durable in the
log; it must return quickly and never block (it runs on the coordinator's event
loop). What it raises is logged and dropped: watching never changes a
transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import partial
from typing import Protocol, runtime_checkable

from hatp.model import EffectVerdict, TxnState

__all__ = ["EffectObserver", "TxnObserver", "UndoObserver", "tell", "tell_effects", "tell_undo"]

_log = logging.getLogger(__name__)


class TxnObserver(Protocol):
    """Told of each change of a transaction's state this coordinator wrote."""

    def txn_changed(self, txn_id: str, state: TxnState, at: datetime) -> None:
        """``txn_id`` is now ``state`` (``active``: begun; ``committing`` or ``aborting``:
        decided; a finished state or ``in-doubt``: ended or left open), as of ``at`` on
        the coordinator's clock."""


def tell(observers: Iterable[TxnObserver], txn_id: str, state: TxnState, at: datetime) -> None:
    """Tell every one of ``observers``; one that raises is logged and skipped."""
    for observer in observers:
        _safely(txn_id, observer, state.value, partial(observer.txn_changed, txn_id, state, at))


@runtime_checkable
class EffectObserver(Protocol):
    """Also told, when a transaction ends, how each committed step compared with its
    preview [COORD-EFFECT] (an observer may implement this as well as :class:`TxnObserver`)."""

    def effect_judged(self, txn_id: str, branch_id: str, verdict: EffectVerdict) -> None:
        """``branch_id`` of ``txn_id`` committed ``verdict`` its approved preview."""


def tell_effects(
    observers: Iterable[TxnObserver], txn_id: str, verdicts: Mapping[str, EffectVerdict]
) -> None:
    """Tell every observer that is an :class:`EffectObserver` each verdict; one that
    raises is logged and skipped."""
    for observer in observers:
        if not isinstance(observer, EffectObserver):
            continue
        for branch_id, verdict in sorted(verdicts.items()):
            _safely(
                txn_id,
                observer,
                f"the effect of {branch_id}",
                partial(observer.effect_judged, txn_id, branch_id, verdict),
            )


@runtime_checkable
class UndoObserver(Protocol):
    """Also told of each undo asked of this coordinator (§28): planned, or refused and why
    (an observer may implement this as well as :class:`TxnObserver`)."""

    def undo_asked(self, txn_id: str, refused: str | None) -> None:
        """An undo of ``txn_id`` was planned (``refused`` ``None``) or refused with the
        ``UNDO_REFUSED`` reason ``refused``."""


def tell_undo(observers: Iterable[TxnObserver], txn_id: str, refused: str | None) -> None:
    """Tell every observer that is an :class:`UndoObserver`; one that raises is logged and
    skipped."""
    for observer in observers:
        if isinstance(observer, UndoObserver):
            _safely(txn_id, observer, "an undo", partial(observer.undo_asked, txn_id, refused))


def _safely(txn_id: str, observer: object, what: str, tell_one: Callable[[], None]) -> None:
    try:
        tell_one()
    except Exception:  # an observer's bug must not stop a transaction
        _log.warning(
            "txn %s: observer %r failed on %s",
            txn_id,
            observer,
            what,
            exc_info=True,
            extra={"txnId": txn_id},
        )
