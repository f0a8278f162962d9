"""The routing record: the Human Gateway's signed account of whom an approval group reached.

It says what the plan spends (``planTotals``), the amounts the gateway
checked authority against (``checked``, or ``"absent"`` when it ran no amount
check: absent never counts as a pass), and, for every person the group's
address matched, what happened to them (docs/spec.md §18).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from hatp.model._base import Digest, WireModel, WireTime
from hatp.model.plan import Amount
from hatp.model.signature import Signature

__all__ = ["ABSENT", "HumanResult", "RoutedHuman", "RoutingRecord"]

#: What ``checked`` says when no amount check ran.
ABSENT = "absent"


class HumanResult(StrEnum):
    """What happened to one person the address matched.

    ``candidate``: eligible, not (yet) asked. ``excluded``: passed over by
    ``rule``. ``asked``: asked, no answer yet. ``decided``: answered.
    ``not-reached``: eligible, but the group was decided before their turn.
    """

    CANDIDATE = "candidate"
    EXCLUDED = "excluded"
    ASKED = "asked"
    DECIDED = "decided"
    NOT_REACHED = "not-reached"


class RoutedHuman(WireModel):
    """One person the address matched; ``rule`` and ``detail`` say why they were excluded."""

    id: str = Field(min_length=1, max_length=512)
    result: HumanResult = Field(strict=False)
    rule: str | None = Field(default=None, description="the exclusion rule, e.g. authority")
    detail: str | None = Field(default=None, max_length=1000)

    @model_validator(mode="after")
    def _rule_iff_excluded(self) -> RoutedHuman:
        if (self.result is HumanResult.EXCLUDED) != (self.rule is not None):
            raise PydanticCustomError(
                "EXCLUSION_RULE", "an excluded person has a rule, and nobody else has one"
            )
        return self


class RoutingRecord(WireModel):
    """A gateway's signed routing record for one approval group of one plan."""

    hatp_version: str
    kind: Literal["routing"]
    txn_id: str
    plan_digest: Digest
    group_id: str
    address: str = Field(description="the group's address, as the plan gives it")
    gateway: str = Field(description="the gateway that routed and signs")
    plan_totals: list[Amount] = Field(description="what the plan spends, per currency")
    checked: list[Amount] | Literal["absent"] = Field(
        description='what authority was checked against per currency, or "absent"'
    )
    humans: list[RoutedHuman]
    time: WireTime
    signature: Signature
