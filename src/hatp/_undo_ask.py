"""What a client asks of ``txn/undo`` (docs/spec.md §28), one shape for both edges.

The MCP client sends it as the method's params and the HTTP client as the route's
body; both build it here. Kept apart from :mod:`hatp._edge_params` (the servers'
side) so that a client, ``hatp txn undo`` among them, loads no server code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

__all__ = ["UndoAsk", "undo_request"]


class UndoAsk(TypedDict, total=False):
    """What a client asks of ``txn/undo`` beyond the transaction (each member optional):
    ``steps`` (only these), ``differing`` (only the steps that committed other than
    their approved preview), ``decide_seconds`` (how long people have to approve it),
    ``undo_txn_id`` (the undo's own id)."""

    steps: Sequence[str] | None
    differing: bool
    decide_seconds: float | None
    undo_txn_id: str | None


def undo_request(ask: UndoAsk) -> dict[str, Any]:
    """``txn/undo``'s members for ``ask`` (camelCase), without those left at their
    defaults; the same for the MCP params and the HTTP body."""
    members: dict[str, Any] = {}
    if ask.get("steps") is not None:
        members["steps"] = list(ask.get("steps") or ())
    if ask.get("differing"):
        members["differing"] = True
    if ask.get("decide_seconds") is not None:
        members["decideSeconds"] = ask.get("decide_seconds")
    if ask.get("undo_txn_id") is not None:
        members["undoTxnId"] = ask.get("undo_txn_id")
    return members
