"""Benchmark of the approval gate against one bare verify plus one bare insert.

Run with ``.venv/bin/python benchmarks/gate.py`` (or ``make bench``).

One gated call of ``charge_card`` with a fresh, valid approval (its own
approval id) is checked and its single use claimed durably, as
``ApprovalGate.check`` + ``ApprovalGate.use`` do before the tool runs. Each
hatp figure is printed beside its baseline, measured in the same process,
interleaved with it:

1. ``check`` alone (no store) vs one bare ``Ed25519PublicKey.verify`` of the
   approval's canonical bytes: context (the check verifies three signatures:
   the gateway's, the approver's card and the approver's own vote; a card
   verified once is remembered, so two per call once the card is known).
2. ``check`` + ``use`` on SQLite (WAL, ``synchronous=FULL``) vs one bare
   verify + one bare ``INSERT`` committed on a raw ``sqlite3`` connection
   with the same settings. Target: within 2x.
3. The same on PostgreSQL (``synchronous_commit=on``) vs psycopg. Target: within 2x.
4. On each, for context: the same against the floor the rules imply, two bare
   verifies (the gateway's signature and the approver's own vote, both
   required) plus the insert.

Each figure is the best of several repeats (the median is shown too). No
timing is asserted; the exit status is 0 whatever the figures. ``--quick``
shrinks every size so a test can smoke-run the script.
"""

from __future__ import annotations

import argparse
import base64
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import cryptography
import psycopg
import sqlalchemy as sa

from _timing import Timing
from _trip_rig import BareCommit, PostgresCommit, SqliteCommit, create_database, drop_database
from hatp.clock import ManualClock, format_time
from hatp.directory import sign_card
from hatp.evidence import Keyring, SigningKey, call_digest, canonicalize, digest, sign, tool_digest
from hatp.gate import ApprovalGate, GatedTool, Requester
from hatp.gateway import sign_vote
from hatp.store import Store, UsedApprovals, open_store

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TARGET = 2.0
SERVER = "https://payments.example"
GATEWAY = "https://gateway.acme.com"
DIRECTORY = "https://directory.acme.com"
FINANCE = "human://acme.com/role/finance-approver"
BOB = "human://acme.com/bob"
AGENT = "agent://acme.com/travel-bot"
DANA = "human://acme.com/dana"
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
ARGS: dict[str, Any] = {"amount": {"value": "2140.00", "currency": "USD"}, "payee": "Lufthansa"}
DEFINITION: dict[str, Any] = {
    "name": "charge_card",
    "description": "Charge the company card.",
    "inputSchema": {"type": "object", "required": ["amount", "payee"]},
}


@dataclass(frozen=True)
class Settings:
    repeats: int
    per_repeat: int


FULL = Settings(repeats=9, per_repeat=200)
QUICK = Settings(repeats=3, per_repeat=20)


class Approvals:
    """Keys, bob's card and vote, and as many signed approvals (each its own id) as asked."""

    def __init__(self) -> None:
        self.gateway_key = SigningKey.from_seed(bytes([21]) * 32, "acme-gateway-1")
        self.directory_key = SigningKey.from_seed(bytes([7]) * 32, "acme-directory-1")
        bob_key = SigningKey.from_seed(bytes([101]) * 32, f"{BOB}#key-1")
        self.bob_key = bob_key
        self.card = sign_card(_card(bob_key), self.directory_key)
        self.terms = {
            "requestId": "pay-lufthansa-1",
            "server": SERVER,
            "tool": "charge_card",
            "callDigest": call_digest(SERVER, "charge_card", ARGS),
            "toolDigest": tool_digest(DEFINITION),
            "requester": AGENT,
            "onBehalfOf": DANA,
            "address": FINANCE,
            "action": "approve.spend",
            "amount": ARGS["amount"],
            "price": None,
            "validSeconds": 600,
        }
        payload = {
            "askId": "ask-bench0001",
            "txnId": "pay-lufthansa-1",
            "planDigest": digest(self.terms),
            "groupId": "call",
            "human": BOB,
        }
        self.vote = sign_vote(bob_key, payload, "approve", NOW)
        self._made = 0

    def gateways(self) -> Keyring:
        return Keyring([(self.gateway_key.public, GATEWAY)], [GATEWAY])

    def directories(self) -> Keyring:
        return Keyring([(self.directory_key.public, DIRECTORY)], [DIRECTORY])

    def fresh(self, count: int) -> list[dict[str, Any]]:
        made = []
        for _ in range(count):
            self._made += 1
            made.append(
                sign(
                    {
                        "hatpVersion": "0.1",
                        "kind": "call-approval",
                        "approvalId": f"apv-bench{self._made:08d}",
                        "askId": "ask-bench0001",
                        "terms": self.terms,
                        "decision": "approve",
                        "approvers": [BOB],
                        "reason": "1 of 1 needed approved",
                        "withdrawn": False,
                        "votes": [self.vote],
                        "cards": [self.card],
                        "routing": {},
                        "gateway": GATEWAY,
                        "decidedAt": format_time(NOW),
                        "expiresAt": format_time(NOW + timedelta(minutes=10)),
                    },
                    self.gateway_key,
                )
            )
        return made


def _card(key: SigningKey) -> dict[str, Any]:
    return {
        "hatpVersion": "0.1",
        "id": BOB,
        "displayName": "Bob",
        "roles": ["finance-approver"],
        "pools": [],
        "skills": [],
        "authority": [
            {"action": "approve.spend", "maxAmount": {"value": "10000", "currency": "USD"}}
        ],
        "channels": ["web"],
        "availability": {"timezone": "Europe/Berlin", "status": "available"},
        "sla": {"decideSeconds": 900},
        "capacity": {"maxOpen": 10, "open": 0},
        "delegates": [],
        "keys": [key.public.to_jwk()],
        "issuer": DIRECTORY,
    }


def make_gate(store: Store, approvals: Approvals) -> ApprovalGate:
    tool = GatedTool(
        "charge_card", FINANCE, action="approve.spend", amount="/amount", definition=DEFINITION
    )
    return ApprovalGate(
        SERVER,
        [tool],
        gateways=approvals.gateways(),
        directories=approvals.directories(),
        used=UsedApprovals(store),
        clock=ManualClock(NOW + timedelta(seconds=5)),
    )


def bare_verify(approvals: Approvals) -> Callable[[], None]:
    """One Ed25519 verify of the approval's canonical bytes, on the raw cryptography key."""
    doc = approvals.fresh(1)[0]
    message = canonicalize({k: v for k, v in doc.items() if k != "signature"})
    raw = base64.urlsafe_b64decode(doc["signature"]["sig"] + "==")
    key = approvals.gateway_key.public._key
    return lambda: key.verify(raw, message)


def bare_vote_verify(approvals: Approvals) -> Callable[[], None]:
    """One Ed25519 verify of the approver's vote, on the raw cryptography key: the second
    signature the check must verify (the card's is remembered, see docs/design-notes.md)."""
    vote = approvals.vote
    message = canonicalize({k: v for k, v in vote.items() if k != "signature"})
    raw = base64.urlsafe_b64decode(vote["signature"]["sig"] + "==")
    key = approvals.bob_key.public._key
    return lambda: key.verify(raw, message)


def interleaved(
    settings: Settings,
    hatp_batch: Callable[[int], Iterator[Callable[[], Any]]],
    bare_op: Callable[[], Any],
) -> tuple[Timing, Timing]:
    """Time ``settings.per_repeat`` hatp operations then as many bare ones, per repeat."""
    ours, bare = [], []
    for _ in range(settings.repeats):
        ops = list(hatp_batch(settings.per_repeat))
        started = time.perf_counter()
        for op in ops:
            op()
        ours.append((time.perf_counter() - started) / len(ops))
        started = time.perf_counter()
        for _ in range(settings.per_repeat):
            bare_op()
        bare.append((time.perf_counter() - started) / settings.per_repeat)
    return Timing(tuple(ours)), Timing(tuple(bare))


def checks(
    gate: ApprovalGate, approvals: Approvals, *, use: bool
) -> Callable[[int], Iterator[Callable[[], Any]]]:
    requester = Requester(AGENT, DANA)

    def batch(count: int) -> Iterator[Callable[[], Any]]:
        for doc in approvals.fresh(count):
            if use:
                yield lambda doc=doc: gate.use(gate.check("charge_card", ARGS, doc, requester))
            else:
                yield lambda doc=doc: gate.check("charge_card", ARGS, doc, requester)

    return batch


@dataclass(frozen=True)
class Row:
    name: str
    hatp: Timing
    bare: Timing
    target: float | None

    def line(self) -> str:
        ratio = self.hatp.best / self.bare.best
        verdict = "" if self.target is None else (" PASS" if ratio <= self.target else " MISS")
        target = "context" if self.target is None else f"<={self.target:.1f}x"
        return (
            f"{self.name:<46} {self.hatp.best * 1e6:9.1f} µs ({1 / self.hatp.best:8.0f}/s, "
            f"median {self.hatp.median * 1e6:.1f})  bare {self.bare.best * 1e6:8.1f} µs  "
            f"ratio {ratio:5.2f}x  {target}{verdict}"
        )


def measure(name: str, store: Store, bare_commit: BareCommit, settings: Settings) -> list[Row]:
    approvals = Approvals()
    gate = make_gate(store, approvals)
    verify_op = bare_verify(approvals)
    body = canonicalize(approvals.fresh(1)[0]).decode()

    def verify_and_insert() -> None:
        verify_op()
        bare_commit.commit(body)

    warm = Settings(repeats=1, per_repeat=max(5, settings.per_repeat // 10))
    interleaved(warm, checks(gate, approvals, use=True), verify_and_insert)
    rows = []
    if name == "sqlite":  # the check itself does not touch the store: measure it once
        hatp, bare = interleaved(settings, checks(gate, approvals, use=False), verify_op)
        rows.append(Row("check (no store) vs 1 verify", hatp, bare, None))
    hatp, bare = interleaved(settings, uses(gate, approvals), lambda: bare_commit.commit(body))
    rows.append(Row(f"{name}: use vs insert", hatp, bare, None))
    hatp, bare = interleaved(settings, checks(gate, approvals, use=True), verify_and_insert)
    rows.append(Row(f"{name}: check + use vs verify + insert", hatp, bare, TARGET))
    vote_op = bare_vote_verify(approvals)

    def two_verifies_and_insert() -> None:
        verify_op()
        vote_op()
        bare_commit.commit(body)

    hatp, bare = interleaved(settings, checks(gate, approvals, use=True), two_verifies_and_insert)
    rows.append(Row(f"{name}: check + use vs 2 verifies + insert", hatp, bare, None))
    return rows


def uses(gate: ApprovalGate, approvals: Approvals) -> Callable[[int], Iterator[Callable[[], Any]]]:
    """The single-use claim alone, of approvals checked beforehand (not timed)."""
    requester = Requester(AGENT, DANA)

    def batch(count: int) -> Iterator[Callable[[], Any]]:
        checked = [
            gate.check("charge_card", ARGS, doc, requester) for doc in approvals.fresh(count)
        ]
        for one in checked:
            yield lambda one=one: gate.use(one)

    return batch


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create a DB on")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    print(
        f"hatp gate benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}, cryptography {cryptography.__version__}, SQLAlchemy "
        f"{sa.__version__}, psycopg {psycopg.__version__}; {settings.repeats} repeats of "
        f"{settings.per_repeat} calls, best shown"
    )
    print(
        "workload: charge_card(2140.00 USD), 1-of-1 finance approver, tool definition bound; "
        "each call a fresh approval (gateway, card and vote signatures checked)"
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="hatp-gate-bench-") as tmp:
        folder = Path(tmp)
        store = open_store(folder / "gate.db")
        bare = SqliteCommit(folder / "floor.db")
        try:
            rows += measure("sqlite", store, bare, settings)
        finally:
            bare.close()
            store.close()
    database, where = create_database(args.postgres)
    print(f"postgresql: {where}")
    if database is not None:
        try:
            store = open_store(database)
            bare_pg = PostgresCommit(database)
            try:
                rows += measure("postgresql", store, bare_pg, settings)
            finally:
                bare_pg.close()
                store.close()
        finally:
            drop_database(args.postgres, database)
    print()
    for row in rows:
        print(row.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
