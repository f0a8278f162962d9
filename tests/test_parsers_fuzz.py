"""Every public parser and verifier, fed mutated valid documents, answers with a hatp error.

Each entry point starts from a valid document built through the public API
(a plan, a record with every kind of evidence, an approval and its routing
record, a call approval, a keyring, a card, a lease, a write plan) and takes
a few random mutations: members dropped, duplicated or retyped, odd times,
huge and tiny numbers, deep nesting, wrong types, or the whole document
replaced by something that is not an object. Whatever it is handed, it
returns (a finding is an answer) or raises one of hatp's own errors: never a
``KeyError``, ``TypeError``, ``AttributeError``, ``ValueError`` or overflow.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.calls import (
    EVIL_GATEWAY,
    EVIL_KEY,
    GATEWAY_ID,
    GATEWAY_KEY,
)
from gate.calls import approval as call_approval
from hatp.clock import parse_time
from hatp.directory import Directory
from hatp.errors import HatpError
from hatp.evidence import Keyring, parse_json, verify, verify_approval, verify_record
from hatp.evidence import verify_routing as verify_routing_record
from hatp.gate import verify_call_approval
from hatp.model import parse_address, parse_card, parse_plan
from hatp.writes import check_plan
from lease.world import check as check_lease
from lease.world import lease
from planted import good_record
from planted import keyring as planted_keyring
from txn_records import committed_trip, holds_first_trip, signed_card, trip_plan
from writes.inventory import registry
from writes.test_plan import good as good_write_plan


def _nested(levels: int) -> Any:
    value: Any = "bottom"
    for level in range(levels):
        value = [value] if level % 2 else {"n": value}
    return value


#: What a member is replaced with: wrong types, odd times, huge and tiny numbers, depth.
ODD: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    -0.0,
    5e-324,
    1e20,
    -1e300,
    2**53,
    2**63,
    10**30,
    "",
    "x",
    "-1",
    "0.1",
    "1e400",
    "9999-12-31T23:59:59.999Z",
    "2026-02-30T00:00:00.000Z",
    "2026-12-02T24:00:00.000Z",
    "0000-01-01T00:00:00.000Z",
    "1969-12-31T23:59:59.999Z",
    "sha256:" + "A" * 43,
    "human://acme.com/alice",
    "\x00",
    "é" * 3,
    [],
    {},
    [None],
    {"": None},
    _nested(70),
    ["a", 1, None, {}],
]


def _places(doc: Any, limit: int = 5000) -> list[tuple[Any, Any]]:
    """Every (container, key) in ``doc``, breadth first, at most ``limit``."""
    found: list[tuple[Any, Any]] = []
    queue = [doc]
    while queue and len(found) < limit:
        node = queue.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            found.append((node, key))
            if isinstance(value, dict | list):
                queue.append(value)
    return found


@st.composite
def mutated(draw: st.DrawFn, valid: Any) -> Any:
    """``valid`` after one to three random mutations (or replaced outright)."""
    doc = copy.deepcopy(valid)
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(ODD))
    for _ in range(draw(st.integers(1, 3))):
        if not isinstance(doc, dict | list):
            break
        places = _places(doc)
        if not places:
            break
        node, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(("drop", "duplicate", "retype", "retype", "retype")))
        if action == "drop":
            del node[key]
        elif action == "duplicate" and isinstance(node, list):
            node.insert(key, copy.deepcopy(node[key]))
        elif action == "duplicate":
            other = draw(st.sampled_from(sorted(node)))
            node[key] = copy.deepcopy(node[other])
        else:
            node[key] = copy.deepcopy(draw(st.sampled_from(ODD)))
    return doc


@cache
def _ring() -> Keyring:
    return planted_keyring()


@cache
def _trip() -> dict[str, Any]:
    return committed_trip()


def _approval() -> dict[str, Any]:
    event = next(e for e in _trip()["events"] if e["type"] == "txn.approval")
    approval: dict[str, Any] = event["body"]["approval"]
    return approval


def _auditor() -> Keyring:
    from directory.people import DIRECTORY_KEY, ISSUER

    return Keyring(
        [
            (GATEWAY_KEY.public, GATEWAY_ID),
            (EVIL_KEY.public, EVIL_GATEWAY),
            (DIRECTORY_KEY.public, ISSUER),
        ],
        trusted_issuers=[GATEWAY_ID, ISSUER],
    )


@dataclass(frozen=True)
class Entry:
    """One public entry point: a valid document for it, and how it is called."""

    valid: Callable[[], Any]
    call: Callable[[Any], object]


ENTRIES: dict[str, Entry] = {
    "plan": Entry(trip_plan, parse_plan),
    "record": Entry(lambda: parse_json(good_record()), lambda d: verify_record(d, _ring())),
    "txn-record": Entry(_trip, lambda d: verify_record(d, _ring())),
    "holds-first-record": Entry(holds_first_trip, lambda d: verify_record(d, _ring())),
    "signed-object": Entry(_approval, lambda d: verify(d, _ring())),
    "approval": Entry(_approval, lambda d: verify_approval(d, trip_plan(), _ring())),
    "approval-plan": Entry(trip_plan, lambda d: verify_approval(_approval(), d, _ring())),
    "routing": Entry(
        lambda: _approval()["routing"], lambda d: verify_routing_record(d, trip_plan(), _ring())
    ),
    "call-approval": Entry(call_approval, lambda d: verify_call_approval(d, _auditor())),
    "keyring": Entry(lambda: _ring().to_json(), Keyring.from_json),
    "card": Entry(lambda: signed_card("alice"), parse_card),
    "directory-card": Entry(
        lambda: signed_card("alice"),
        lambda d: Directory("https://directory.acme.com", [d], _ring()),
    ),
    "lease": Entry(lease, check_lease),
    "write-plan": Entry(good_write_plan, lambda d: check_plan(d, registry())),
    "address": Entry(lambda: {"a": "human://acme.com/role/finance-approver?quorum=2-of-3"},
                     lambda d: parse_address(d.get("a") if isinstance(d, dict) else d)),
    "time": Entry(lambda: {"t": "2026-12-02T16:48:08.123Z"},
                  lambda d: parse_time(d.get("t") if isinstance(d, dict) else d)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_the_valid_document_of_each_entry_point_is_taken(name: str) -> None:
    """The unmutated document is read (no error), and a verifier finds it sound: the
    property test below starts from documents that really pass."""
    entry = ENTRIES[name]
    answer = entry.call(entry.valid())
    assert getattr(answer, "ok", True) is True, answer


@pytest.mark.parametrize("name", sorted(ENTRIES))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_mutated_document_gets_an_answer_or_a_hatp_error(name: str, data: st.DataObject) -> None:
    """[TIME-REAL] [JCS-READBACK] [VFY-EXIT]: no input raises anything but a HatpError."""
    entry = ENTRIES[name]
    doc = data.draw(mutated(entry.valid()))
    with contextlib.suppress(HatpError):  # a refusal is an answer; anything else fails
        entry.call(doc)
