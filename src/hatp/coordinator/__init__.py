"""The coordinator: runs a plan as one all-or-nothing transaction (two-phase commit).

It prepares every branch on its participant and asks the approval groups
through a :class:`Gateway` (each at its own organisation's, through
:class:`GatewayRoutes`), logs the decision durably, commits in tier order
(compensate steps, the one final step, the holds) or aborts, and writes a
signed, hash-chained Transaction Record of all of it. A new coordinator
finishes what a crashed one left open (:meth:`Coordinator.recover`), and a
served process keeps doing so in the background (:class:`Recovery`).
"""

from hatp.coordinator._coordinator import Coordinator, Outcome
from hatp.coordinator._gateway import ApprovalRequest, Gateway, GatewayRoutes, gateway_for
from hatp.coordinator._observer import EffectObserver, TxnObserver, UndoObserver
from hatp.coordinator._recovery import Recovery, RecoveryStats
from hatp.coordinator._undo import UndoOptions

__all__ = [
    "ApprovalRequest",
    "Coordinator",
    "EffectObserver",
    "Gateway",
    "GatewayRoutes",
    "Outcome",
    "Recovery",
    "RecoveryStats",
    "TxnObserver",
    "UndoObserver",
    "UndoOptions",
    "gateway_for",
]
