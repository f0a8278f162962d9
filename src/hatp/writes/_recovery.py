"""Classifying a dead worker's execution by the live records [WRITE-RECOVER].

A key still reserved after its lease ran out belongs to a worker that died
somewhere between its reservation and its commit. Whether its write
committed is read off the records, never guessed: still the approved
snapshot, it did not (run it); already the postcondition, it did (record
it, write nothing); anything else is for a person (``RECOVERY_REQUIRED``).

Also the comparisons of live records with a plan's states that drift,
verification and recovery share.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from hatp.errors import RecoveryRequired
from hatp.writes._records import RecordName, same_state

__all__ = ["Recovery", "classify", "differences", "part", "record_names", "recovery_required"]


class Recovery(StrEnum):
    """What the live records say of a dead worker's write."""

    NOT_APPLIED = "not-applied"  # the records are the snapshot: its transaction never committed
    APPLIED = "applied"  # the records are the postcondition: it committed, unjournaled
    AMBIGUOUS = "ambiguous"  # neither: a person decides


def classify(
    live: Mapping[RecordName, Any],
    snapshot: Mapping[RecordName, Any],
    postcondition: Mapping[RecordName, Any],
) -> Recovery:
    """Which of the two known states the live records are in, if either.

    The snapshot is tried first: a plan whose postcondition equals its
    snapshot changes nothing, and running it again is harmless.
    """
    if same_state(part(live, snapshot), snapshot):
        return Recovery.NOT_APPLIED
    if same_state(part(live, postcondition), postcondition):
        return Recovery.APPLIED
    return Recovery.AMBIGUOUS


def recovery_required(
    what: str,
    key: str,
    owner: str | None,
    live: Mapping[RecordName, Any],
    snapshot: Mapping[str, Any],
) -> RecoveryRequired:
    """The refusal of an ambiguous dead worker's key; ``what`` names the plan version."""
    return RecoveryRequired(
        f"a worker died executing {what}, and its records are now neither the approved "
        "snapshot nor the postcondition: a person must decide what they should hold; "
        "nothing was written",
        key=key,
        owner=owner,
        records=differences(live, snapshot, "approved"),
    )


def record_names(*states: Mapping[RecordName, Any]) -> list[RecordName]:
    """The sorted names of every record the states hold."""
    return sorted({name for state in states for name in state})


def part(live: Mapping[RecordName, Any], like: Mapping[RecordName, Any]) -> dict[RecordName, Any]:
    """The records of ``live`` that ``like`` names."""
    return {name: live.get(name) for name in like}


def differences(
    live: Mapping[RecordName, Any], wanted: Mapping[RecordName, Any], label: str
) -> dict[RecordName, dict[str, Any]]:
    """``{record: {label: wanted, "live": live}}`` for each record that differs."""
    return {
        name: {label: wanted[name], "live": live.get(name)}
        for name in sorted(wanted)
        if not same_state({name: live.get(name)}, {name: wanted[name]})
    }
