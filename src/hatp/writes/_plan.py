"""Write plans: the wire form, the checks that take one, and how it reads as a diff.

A :class:`WritePlan` is what an agent proposes: typed corrections from the
allowlist, the records they touch as the agent read them (``snapshot``) and
as they will be afterwards (``postcondition``). :func:`check_plan` takes one
only after every rule holds, in this order (docs/spec.md §22):

1. [WRITE-SHAPE] the document has the WritePlan form;
2. [WRITE-ALLOWLIST] every correction's type is on the allowlist;
3. [WRITE-PARAMS] its params fit the type's params model, as they are;
4. [WRITE-ALLOWLIST] every record it touches is in an allowlisted record set;
5. [WRITE-SNAPSHOT] the snapshot holds exactly the touched records, each with
   exactly its set's columns;
6. [WRITE-POSTCONDITION] the postcondition is what the corrections' ``expect``
   make of the snapshot, step by step.

[WRITE-VERSION] (versions count up from 1) needs the stored versions:
:func:`check_next_version`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator
from typing_extensions import TypeAliasType

from hatp import _checks
from hatp.errors import WritePlanInvalid
from hatp.evidence import digest
from hatp.model import WireModel
from hatp.version import PROTOCOL_VERSION, require_supported
from hatp.writes._corrections import Correction, Registry
from hatp.writes._records import (
    RecordName,
    is_state_value,
    read_records,
    same_state,
    split_record,
)

__all__ = [
    "Change",
    "CheckedPlan",
    "CorrectionItem",
    "WritePlan",
    "check_next_version",
    "check_plan",
    "diff",
    "draft_plan",
    "expected_state",
    "format_diff",
    "write_plan_digest",
]

#: The rule each WRITE_PLAN_INVALID reason is checked under.
REASON_RULES: dict[str, str] = {
    "SHAPE": "WRITE-SHAPE",
    "UNKNOWN_TYPE": "WRITE-ALLOWLIST",
    "PARAMS": "WRITE-PARAMS",
    "RECORD": "WRITE-ALLOWLIST",
    "SNAPSHOT": "WRITE-SNAPSHOT",
    "POSTCONDITION": "WRITE-POSTCONDITION",
    "VERSION": "WRITE-VERSION",
}

# Integers JSON carries exactly everywhere (RFC 8785 refuses larger ones).
SafeInt = Annotated[int, Field(ge=-(2**53) + 1, le=2**53 - 1)]
#: A column's value in a snapshot or postcondition: never a float.
Scalar = SafeInt | str | bool | None
#: A JSON value with no floats (a correction's params).
JsonValue = TypeAliasType(
    "JsonValue", "SafeInt | str | bool | list[JsonValue] | dict[str, JsonValue] | None"
)
Columns = dict[str, Scalar]
State = dict[RecordName, Columns | None]
PlanId = Annotated[str, StringConstraints(pattern=r"^[!-~]{1,200}$")]
PrincipalId = Annotated[str, StringConstraints(pattern=r"^[!-~]{1,512}$")]
TypeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")]

_log = logging.getLogger(__name__)


class CorrectionItem(WireModel):
    """One correction of a plan: a type on the allowlist and its params."""

    type: TypeName
    params: dict[str, JsonValue]


class WritePlan(WireModel):
    """An agent's proposed write: corrections, and the records before and after.

    ``proposedBy`` is the agent (as the caller's authentication layer names
    it), ``onBehalfOf`` whom it acts for. ``note`` is agent-written: shown
    labelled as such, it drives no rule.
    """

    hatp_version: str
    kind: Literal["write-plan"]
    plan_id: PlanId
    version: int = Field(ge=1, le=2**31 - 1)
    proposed_by: PrincipalId
    on_behalf_of: PrincipalId
    corrections: list[CorrectionItem] = Field(max_length=100)
    snapshot: State
    postcondition: State
    note: str | None = Field(default=None, max_length=4000)

    @model_validator(mode="after")
    def _shape(self) -> WritePlan:
        if not _checks.is_on("WRITE-SHAPE"):
            return self
        if not self.corrections:
            raise ValueError("a write plan makes at least one correction")
        for member in ("snapshot", "postcondition"):
            for name in getattr(self, member):
                split_record(name)  # ValueError names the malformed record
        return self


def write_plan_digest(plan: WritePlan) -> str:
    """The digest of the plan's wire form: what an approval binds."""
    return digest(plan.to_wire())


@dataclass(frozen=True)
class CheckedPlan:
    """A plan every rule of :func:`check_plan` holds for.

    ``steps`` are its corrections with their parsed params, in order;
    ``records`` the sorted names of every record they touch.
    """

    plan: WritePlan
    digest: str
    steps: list[tuple[Correction[Any], BaseModel]]
    records: list[RecordName]


@dataclass(frozen=True)
class Change:
    """One column of one record as the plan changes it (``None``: no row, or NULL)."""

    record: RecordName
    column: str
    before: Any
    after: Any

    def to_wire(self) -> dict[str, Any]:
        """``{"record", "column", "before", "after"}``."""
        return {
            "record": self.record,
            "column": self.column,
            "before": self.before,
            "after": self.after,
        }

    def __str__(self) -> str:
        return f"{self.record} {self.column}: {self.before!r} -> {self.after!r}"


def check_plan(doc: Mapping[str, Any] | WritePlan, registry: Registry) -> CheckedPlan:
    """Take a write plan only if every rule holds (see the module docstring).

    A :class:`WritePlan` object is checked from its wire form again, like a
    document: nothing handed in is trusted. Reads no database.

    Raises:
        WritePlanInvalid: ``data.reason`` one of SHAPE, UNKNOWN_TYPE, PARAMS,
            RECORD, SNAPSHOT, POSTCONDITION; ``data.rule`` the rule id,
            ``data.where`` a JSON Pointer into the plan.
        VersionUnsupported: the plan names a protocol version this build does
            not know [VER-KNOWN].
    """
    plan = _parse(doc)
    steps, touched = _steps(plan.corrections, registry)
    _check_snapshot(plan, registry, touched)
    if _checks.is_on("WRITE-POSTCONDITION"):
        after = _expected(plan.snapshot, steps, where_prefix="/corrections")
        if not same_state(after, plan.postcondition):
            raise _invalid(
                "POSTCONDITION",
                "the postcondition is not what the corrections make of the snapshot: "
                + _first_difference(after, plan.postcondition),
                where="/postcondition",
            )
    return CheckedPlan(
        plan=plan,
        digest=write_plan_digest(plan),
        steps=[(c, p) for c, p, _ in steps],
        records=sorted(touched),
    )


def expected_state(
    steps: Sequence[tuple[Correction[Any], BaseModel]], snapshot: Mapping[RecordName, Any]
) -> dict[RecordName, dict[str, Any] | None]:
    """What the steps make of the snapshot: each step's ``expect``, in order.

    Raises:
        WritePlanInvalid: reason POSTCONDITION, a step cannot be made to the
            state before it (its ``expect`` raised ``ValueError``).
    """
    numbered = [(c, p, i) for i, (c, p) in enumerate(steps)]
    return _expected(snapshot, numbered, where_prefix="/corrections")


def check_next_version(plan_id: str, version: int, latest: int | None) -> None:
    """Refuse a version that does not follow the latest stored one. [WRITE-VERSION]

    ``latest`` is the highest version stored for ``plan_id`` (``None``: none
    yet); the next must be 1 more (1 for a new plan). Re-proposing a stored
    version is the caller's to handle (same digest: the same proposal;
    another: refuse, since a proposed version is never changed).

    Raises:
        WritePlanInvalid: reason VERSION.
    """
    expected = 1 if latest is None else latest + 1
    if version != expected and _checks.is_on("WRITE-VERSION"):
        raise _invalid(
            "VERSION",
            f"plan {plan_id} is at version {latest or 0}: propose version {expected} "
            f"(not {version}); a proposed version is never changed",
            where="/version",
            plan_id=plan_id,
            version=version,
            expected=expected,
        )


def diff(checked: CheckedPlan) -> list[Change]:
    """How the plan changes each record, column by column (unchanged columns left out).

    Records in name order, columns in the order the snapshot lists them. A
    record with no row before (or after) shows ``None`` on that side of each
    of its columns.
    """
    plan = checked.plan
    changes: list[Change] = []
    for record in sorted(set(plan.snapshot) | set(plan.postcondition)):
        before = plan.snapshot.get(record)
        after = plan.postcondition.get(record)
        columns = list(before or {}) + [c for c in after or {} if c not in (before or {})]
        for column in columns:
            old = None if before is None else before.get(column)
            new = None if after is None else after.get(column)
            if old != new or (before is None) != (after is None) or type(old) is not type(new):
                changes.append(Change(record, column, old, new))
    return changes


def format_diff(changes: Iterable[Change]) -> str:
    """The diff as lines of text, ``record column: before -> after``."""
    return "\n".join(str(change) for change in changes)


def draft_plan(
    conn: sa.Connection,
    registry: Registry,
    *,
    plan_id: str,
    version: int,
    corrections: Sequence[tuple[str, Mapping[str, Any]]],
    proposed_by: str,
    on_behalf_of: str,
    note: str | None = None,
) -> dict[str, Any]:
    """Write a plan's document from the live records, as an agent's tool would.

    Reads the touched records in ``conn`` (the snapshot), works out the
    postcondition with the corrections' ``expect`` and returns the document,
    checked with :func:`check_plan`.

    Raises:
        WritePlanInvalid: as :func:`check_plan` (e.g. POSTCONDITION: a
            correction cannot be made to the live records).
    """
    doc: dict[str, Any] = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "write-plan",
        "planId": plan_id,
        "version": version,
        "proposedBy": proposed_by,
        "onBehalfOf": on_behalf_of,
        "corrections": [{"type": t, "params": dict(p)} for t, p in corrections],
        "snapshot": {},
        "postcondition": {},
        "note": note,
    }
    try:
        items = [CorrectionItem.model_validate(c) for c in doc["corrections"]]
    except ValidationError as exc:
        raise _invalid("SHAPE", f"not a correction: {exc.errors()[0]['msg']}", where="") from None
    steps, touched = _steps(items, registry)
    snapshot = read_records(conn, registry.sets, touched, lock=False)
    doc["snapshot"] = snapshot
    doc["postcondition"] = _expected(snapshot, steps, where_prefix="/corrections")
    check_plan(doc, registry)
    return doc


Step = tuple[Correction[Any], BaseModel, int]


def _parse(doc: Mapping[str, Any] | WritePlan) -> WritePlan:
    # 1. WRITE-SHAPE (the model's own validator holds the gated rules).
    wire = doc.to_wire() if isinstance(doc, WritePlan) else doc
    if not isinstance(wire, Mapping):
        raise _invalid("SHAPE", "a write plan is a JSON object", where="")
    require_supported(wire, "write plan")
    try:
        return WritePlan.model_validate(wire)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "".join(f"/{_escape(str(part))}" for part in error["loc"])
        raise _invalid(
            "SHAPE", f"not a write plan: {where or '/'}: {error['msg']}", where=where
        ) from None


def _steps(
    items: Sequence[CorrectionItem], registry: Registry
) -> tuple[list[Step], set[RecordName]]:
    steps: list[Step] = []
    touched: set[RecordName] = set()
    for index, item in enumerate(items):
        at = f"/corrections/{index}"
        # 2. WRITE-ALLOWLIST: the type.
        correction = registry.correction(item.type)
        if correction is None:
            if _checks.is_on("WRITE-ALLOWLIST"):
                raise _invalid(
                    "UNKNOWN_TYPE",
                    f"correction type {item.type!r} is not on the allowlist "
                    f"({', '.join(registry.types) or 'none'})",
                    where=f"{at}/type",
                )
            continue  # with the check off, a type with no code does nothing
        # 3. WRITE-PARAMS.
        try:
            # JSON mode: the params are JSON, so a Decimal field takes its text.
            params = correction.params.model_validate_json(json.dumps(item.params), strict=True)
        except ValidationError as exc:
            if _checks.is_on("WRITE-PARAMS"):
                error = exc.errors()[0]
                where = f"{at}/params" + "".join(f"/{_escape(str(p))}" for p in error["loc"])
                raise _invalid(
                    "PARAMS",
                    f"params of {item.type} do not fit: {where}: {error['msg']}",
                    where=where,
                ) from None
            params = correction.params.model_construct(**item.params)
        # 4. WRITE-ALLOWLIST: the records.
        for record in correction.records(params):
            problem = _record_problem(record, registry)
            if problem is not None and _checks.is_on("WRITE-ALLOWLIST"):
                raise _invalid("RECORD", problem, where=at, record=record)
            touched.add(record)
        steps.append((correction, params, index))
    return steps, touched


def _record_problem(record: RecordName, registry: Registry) -> str | None:
    try:
        set_name, key = split_record(record)
        record_set = registry.sets.get(set_name)
        if record_set is None:
            return f"record {record} is in no record set on the allowlist"
        record_set.key_value(key)
    except ValueError as exc:
        return f"record {record!r} is not a record of the allowlist: {exc}"
    return None


def _check_snapshot(plan: WritePlan, registry: Registry, touched: set[RecordName]) -> None:
    # 5. WRITE-SNAPSHOT.
    if not _checks.is_on("WRITE-SNAPSHOT"):
        return
    missing = sorted(touched - set(plan.snapshot))
    extra = sorted(set(plan.snapshot) - touched)
    if missing or extra:
        raise _invalid(
            "SNAPSHOT",
            "the snapshot holds exactly the records the corrections touch: "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"not touched {', '.join(extra)}" if extra else "",
                )
                if part
            ),
            where="/snapshot",
        )
    for record, columns in plan.snapshot.items():
        record_set = registry.sets.get(split_record(record)[0])
        if columns is None or record_set is None:
            continue
        if set(columns) != set(record_set.columns):
            raise _invalid(
                "SNAPSHOT",
                f"the snapshot of {record} holds columns {sorted(columns)}; "
                f"its set holds {sorted(record_set.columns)}",
                where=f"/snapshot/{_escape(record)}",
            )


def _expected(
    snapshot: Mapping[RecordName, Any], steps: Sequence[Step], *, where_prefix: str
) -> dict[RecordName, dict[str, Any] | None]:
    state: dict[RecordName, dict[str, Any] | None] = {
        name: None if columns is None else dict(columns) for name, columns in snapshot.items()
    }
    for correction, params, index in steps:
        names = correction.records(params)
        before = {name: _copy(state.get(name)) for name in names}
        try:
            after = correction.expect(params, before)
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            # The snapshot is the plan's word, not the database's: a column of
            # the wrong type breaks the correction's arithmetic, not hatp.
            _log.info("write plan refused: %s cannot be made to its snapshot", correction.name)
            raise _invalid(
                "POSTCONDITION",
                f"correction {index} ({correction.name}) cannot be made to the snapshot: {exc}",
                where=f"{where_prefix}/{index}",
            ) from None
        stray = sorted(set(after) - set(names))
        if stray:
            raise _invalid(
                "POSTCONDITION",
                f"correction {index} ({correction.name}) expects records it does not touch: "
                + ", ".join(stray),
                where=f"{where_prefix}/{index}",
            )
        for name, columns in after.items():
            if not is_state_value(columns):
                raise _invalid(
                    "POSTCONDITION",
                    f"correction {index} ({correction.name}) expects {name} to hold "
                    f"{columns!r}: not columns of JSON scalars",
                    where=f"{where_prefix}/{index}",
                )
            state[name] = _copy(columns)
    return state


def _copy(columns: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if columns is None else dict(columns)


def _first_difference(computed: Mapping[RecordName, Any], given: Mapping[RecordName, Any]) -> str:
    for record in sorted(set(computed) | set(given)):
        if record not in given:
            return f"{record} is missing"
        if record not in computed:
            return f"{record} is not touched"
        if computed[record] != given[record]:
            return f"{record} would be {computed[record]!r}, the plan says {given[record]!r}"
    return "no difference"  # pragma: no cover - only called when they differ


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _invalid(reason: str, message: str, *, where: str, **data: Any) -> WritePlanInvalid:
    return WritePlanInvalid(message, reason=reason, rule=REASON_RULES[reason], where=where, **data)
