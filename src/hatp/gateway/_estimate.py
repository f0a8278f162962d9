"""How long asking an approval group could take at worst: the gateway's ChainEstimate.

The estimate is not a second model of the ask rules. It takes the very ask
state :class:`~hatp.gateway.HumanGateway.ask` would store (the same routing,
exclusions, quorum and first asks) and steps a copy of it through time with
nobody answering: to each moment the ask would next fall due, where
:meth:`AskDoc.tick` escalates whoever missed their SLA (to their delegates,
else the next candidate) and closes the ask at its deadline. So it can never
disagree with what asking does. Nothing is stored and nobody is told.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hatp.clock import format_time, parse_time
from hatp.evidence import sign
from hatp.gateway._ask import AskDoc
from hatp.model import ChainEstimate
from hatp.store import AskState
from hatp.version import PROTOCOL_VERSION

__all__ = ["chain_estimate"]

_MS = timedelta(milliseconds=1)


def chain_estimate(work: AskDoc) -> dict[str, Any]:
    """Return the signed ChainEstimate of the new approval ask ``work`` ([GW-ESTIMATE]).

    ``work`` is the ask as it would be stored, its first people asked at
    ``work.ctx.now`` (or decided at once when too few are eligible, [GW-FEW]:
    then the chain is empty and ``worstSeconds`` 0). ``work`` is not changed.
    """
    # Times in the ask are on the wire's millisecond grid; measure from the same grid,
    # or a clock with microseconds puts the first ask a fraction of a millisecond early.
    asked_at = parse_time(format_time(work.ctx.now))
    ends: dict[str, datetime] = {}
    order = list(work.effects.deliver)
    step = work
    while step.doc["state"] == AskState.OPEN.value:
        waiting = {p["id"] for p in step.people if p["status"] == "asked"}
        if not waiting:
            break  # [GW-FEW-LATER] nobody left to wait for: nobody can approve any more
        now = step.next_due()
        step = AskDoc(step.doc, replace(step.ctx, now=now))
        step.tick()
        order += step.effects.deliver
        for entry in step.people:
            if entry["id"] in waiting and entry["status"] != "asked":
                # Withdrawn at the deadline happens just after it; the wait ends at it.
                ends[entry["id"]] = min(now, step.decide_by)
    by_id = {p["id"]: p for p in step.people}
    chain = [_link(by_id[human], asked_at, ends[human]) for human in order]
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "chain-estimate",
        "txnId": work.doc["txnId"],
        "planDigest": work.doc["planDigest"],
        "groupId": work.doc["groupId"],
        "gateway": work.ctx.gateway_id,
        "chain": chain,
        "worstSeconds": max((link["endsAt"] for link in chain), default=0),
        "time": format_time(asked_at),
    }
    signed = sign(body, work.ctx.key)
    ChainEstimate.model_validate(signed)  # what we sign has the wire form
    return signed


def _link(entry: dict[str, Any], asked_at: datetime, ends: datetime) -> dict[str, Any]:
    return {
        "human": entry["id"],
        "sla": entry["sla"],
        "delegateOf": entry.get("delegateOf"),
        "startsAt": _seconds(parse_time(entry["askedAt"]) - asked_at),
        "endsAt": _seconds(ends - asked_at),
    }


def _seconds(span: timedelta) -> int | float:
    """Whole seconds as an integer, else seconds to the millisecond (wire times' precision)."""
    ms = span // _MS
    return ms // 1000 if ms % 1000 == 0 else ms / 1000
