"""The write policy: which plans run at once, which need a person, which never run.

Deterministic and configured, never a model: the verdict on a plan depends on
nothing but the plan's corrections and the policy's rules.

Per correction type a :class:`TypeRule` says ALLOW, DENY or
REQUIRE_APPROVAL; a type with no rule gets the policy's ``default``. An ALLOW
holds only within the rule's limits: the summed :meth:`Correction.size` of
the plan's corrections of that type at most ``allow_up_to``, and the records
they touch at most ``max_records``; beyond either it is REQUIRE_APPROVAL (so
splitting one big correction into many small ones gains nothing). The
policy's own ``max_records`` caps the records any plan may touch: beyond it
the plan is DENIED. The plan's verdict: DENY if any correction type is
denied, else REQUIRE_APPROVAL if any needs approval, else ALLOW.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel

from hatp.writes._corrections import Correction
from hatp.writes._plan import CheckedPlan
from hatp.writes._records import RecordName

__all__ = ["Policy", "PolicyDecision", "TypeRule", "Verdict"]


class Verdict(StrEnum):
    """What the policy says of a plan."""

    ALLOW = "allow"
    DENY = "deny"
    REQUIRE_APPROVAL = "require-approval"


_ORDER = {Verdict.ALLOW: 0, Verdict.REQUIRE_APPROVAL: 1, Verdict.DENY: 2}


def _limit(name: str, value: object, kind: tuple[type, ...]) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} is {' or '.join(k.__name__ for k in kind)}, not {value!r}")
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"{name} is a finite number, not {value}")
    if value < 0:  # type: ignore[operator]
        raise ValueError(f"{name} is not negative, not {value}")


def _size(correction: Correction[BaseModel], params: BaseModel) -> int | Decimal:
    size: object = correction.size(params)
    if isinstance(size, bool):
        raise TypeError(f"{correction.name}.size() returned {size!r}, not int or Decimal")
    if isinstance(size, int):
        return abs(size)
    if isinstance(size, Decimal) and size.is_finite():
        return abs(size)
    raise TypeError(f"{correction.name}.size() returned {size!r}, not int or Decimal")


@dataclass(frozen=True)
class TypeRule:
    """The policy for one correction type.

    Raises:
        TypeError: a limit is a float (or not a number); ``verdict`` is not a
            :class:`Verdict`.
        ValueError: a limit is negative.
    """

    verdict: Verdict
    allow_up_to: int | Decimal | None = None
    max_records: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, Verdict):
            raise TypeError(f"verdict is a Verdict, not {self.verdict!r}")
        _limit("allow_up_to", self.allow_up_to, (int, Decimal))
        _limit("max_records", self.max_records, (int,))


@dataclass(frozen=True)
class PolicyDecision:
    """The verdict, and the reasons that decided it (stable texts, in plan order)."""

    verdict: Verdict
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    """The write policy (see the module docstring).

    Raises:
        TypeError, ValueError: as :class:`TypeRule`, for ``default`` and
            ``max_records``.
    """

    rules: Mapping[str, TypeRule] = field(default_factory=dict)
    default: Verdict = Verdict.REQUIRE_APPROVAL
    max_records: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", dict(self.rules))
        for name, rule in self.rules.items():
            if not isinstance(rule, TypeRule):
                raise TypeError(f"the rule for {name} is a TypeRule, not {rule!r}")
        if not isinstance(self.default, Verdict):
            raise TypeError(f"default is a Verdict, not {self.default!r}")
        _limit("max_records", self.max_records, (int,))

    def decide(self, checked: CheckedPlan) -> PolicyDecision:
        """The verdict on a checked plan. Pure: the same plan always gets the same answer."""
        sizes: dict[str, int | Decimal] = {}
        records: dict[str, set[RecordName]] = {}
        for correction, params in checked.steps:
            sizes[correction.name] = sizes.get(correction.name, 0) + _size(correction, params)
            records.setdefault(correction.name, set()).update(correction.records(params))
        found: list[tuple[Verdict, str]] = []
        touched = len(checked.records)
        if self.max_records is not None and touched > self.max_records:
            found.append(
                (Verdict.DENY, f"plan touches {touched} records, more than {self.max_records}")
            )
        for name in sizes:
            found.append(self._judge(name, sizes[name], len(records[name])))
        if not found:
            found.append((self.default, f"plan makes no correction: default {self.default}"))
        verdict = max((v for v, _ in found), key=_ORDER.__getitem__)
        return PolicyDecision(verdict, tuple(why for v, why in found if v is verdict))

    def _judge(self, name: str, size: int | Decimal, touched: int) -> tuple[Verdict, str]:
        rule = self.rules.get(name)
        if rule is None:
            return self.default, f"{name}: no rule, default {self.default}"
        if rule.verdict is not Verdict.ALLOW:
            return rule.verdict, f"{name}: {rule.verdict}"
        if rule.allow_up_to is not None and size > rule.allow_up_to:
            return (
                Verdict.REQUIRE_APPROVAL,
                f"{name}: size {size} above the {rule.allow_up_to} allowed without approval",
            )
        if rule.max_records is not None and touched > rule.max_records:
            return (
                Verdict.REQUIRE_APPROVAL,
                f"{name}: touches {touched} records, above the {rule.max_records} allowed "
                "without approval",
            )
        limits = [
            f"size {size} <= {rule.allow_up_to}" if rule.allow_up_to is not None else "",
            f"{touched} records <= {rule.max_records}" if rule.max_records is not None else "",
        ]
        shown = ", ".join(x for x in limits if x)
        return Verdict.ALLOW, f"{name}: allow" + (f" ({shown})" if shown else "")
