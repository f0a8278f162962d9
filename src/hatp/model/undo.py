"""The journal's wire types: how a committed step can be taken back, and what an undo plan
refers to (docs/spec.md §28).

Every commit receipt says, in ``undo``, how its step can be undone and at what cost
(:class:`~hatp.model.UndoOffer`, beside the receipt types), signed by the participant
that committed it. An undo plan is an
ordinary plan whose ``undoes`` member is the coordinator's signed
:class:`UndoReference` to the original record's head, and each of whose branches
names, in its own ``undoes``, the original step it takes back (:class:`StepRef`).
Undo is never automatic: an undo plan is approved like any other plan.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from hatp.model._base import Digest, WireModel, WireTime
from hatp.model.signature import Signature

__all__ = [
    "COMPENSATION",
    "KeptStep",
    "StepRef",
    "UndoReference",
]

#: The operation name an undo branch uses to take back a compensate-tier step with its
#: undo token; every participant offers it (reserved: no operation may take the name).
COMPENSATION = "hatp.compensate"

_BranchId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
_TxnId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]


class StepRef(WireModel):
    """An undo branch's ``undoes``: the original transaction's step it takes back."""

    txn_id: _TxnId
    branch_id: _BranchId


class KeptStep(WireModel):
    """A committed step an undo plan does not take back, and why; shown up front."""

    branch_id: _BranchId
    reason: str = Field(max_length=1000)


class UndoReference(WireModel):
    """An undo plan's ``undoes``: the coordinator's signed reference to the original record.

    ``head`` is the original record's head digest when the plan was built; the
    plan is refused if the original changed since. ``kept`` lists every committed
    step of the original the plan leaves as it is, with the reason.
    """

    hatp_version: str
    kind: Literal["undo-reference"]
    txn_id: _TxnId
    head: Digest
    coordinator: str = Field(max_length=512)
    kept: list[KeptStep] = Field(default_factory=list, max_length=64)
    time: WireTime
    signature: Signature
