"""Benchmark of the approval gate against the floor its rules imply (issue 24).

Run with ``.venv/bin/python benchmarks/gate.py`` (or ``make bench``).

One gated call of ``charge_card`` with a fresh, valid approval (its own
approval id) is checked and its single use claimed durably, as
``ApprovalGate.check`` + ``ApprovalGate.use`` do before the tool runs. The
**floor** is the work the rules themselves require of that, done bare on the
same approval:

- the two signatures the check must verify: the gateway's on the approval and
  the approver's own vote, each one ``Ed25519PublicKey.verify`` of the same
  bytes hatp verifies (the approver's card is verified once and remembered,
  see docs/design-notes.md, so it is not in the floor);
- one canonicalization: :func:`hatp.evidence.canonicalize` of the approval
  without its signature, the bytes the gateway's signature covers (the vote's
  canonical bytes are made beforehand: the floor counts one, as issue 24 says,
  though the check also canonicalizes the vote, the terms and the arguments);
- one durable insert: a bare ``INSERT`` committed on a raw ``sqlite3``
  connection (WAL, ``synchronous=FULL``), or on psycopg with
  ``synchronous_commit=on``, as hatp's stores commit.

Printed, each hatp figure beside its baseline, measured in the same process,
interleaved with it (per repeat: the hatp calls, then as many floor ones):

1. ``check`` alone (no store) vs the floor's CPU (2 verifies + 1
   canonicalization): context.
2. On SQLite and on PostgreSQL (a fresh database on ``--postgres``, dropped
   afterwards; skipped, with the reason, when no server answers): ``use``
   alone vs the bare insert (context), and **check + use vs the floor**,
   the target: within 1.5x, PASS or MISS.

Each figure is the best of several repeats (the median is shown too). No
timing is asserted; the exit status is 0 whatever the figures. ``--quick``
shrinks every size so a test can smoke-run the script. ``--json`` prints one
JSON object on stdout, ``{"sqlite": {...}, "postgresql": {...}}``, each with
``ratio``, ``hatp_ms``, ``floor_ms``, ``target`` and ``verdict`` (and more; a
database not measured has them null and says why in ``skipped``); the human
report then goes to stderr.
"""

from __future__ import annotations

import argparse
import base64
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import cryptography
import psycopg
import sqlalchemy as sa

from _timing import Timing
from _trip_rig import BareCommit, PostgresCommit, SqliteCommit, create_database, drop_database
from hatp.clock import ManualClock, format_time
from hatp.directory import sign_card
from hatp.evidence import Keyring, SigningKey, call_digest, canonicalize, digest, sign, tool_digest
from hatp.gate import ApprovalGate, CheckedApproval, GatedTool, Requester
from hatp.gateway import sign_vote
from hatp.store import Store, UsedApprovals, open_store

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TARGET = 1.5
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
#: What each database's JSON object holds; all null (with ``skipped``) when not measured.
JSON_KEYS = (
    "ratio",
    "hatp_ms",
    "floor_ms",
    "hatp_median_ms",
    "floor_median_ms",
    "target",
    "verdict",
    "use_ms",
    "insert_ms",
)


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


Batch = Callable[[int], Iterator[Callable[[], Any]]]


def _signature(doc: dict[str, Any]) -> bytes:
    return base64.urlsafe_b64decode(doc["signature"]["sig"] + "==")


class Floor:
    """The floor's work on one approval, done bare: 1 canonicalization, 2 verifies, 1 insert.

    The keys are the raw ``cryptography`` ones; the vote's canonical bytes are
    made once here (the floor counts one canonicalization, the approval's).
    """

    def __init__(self, approvals: Approvals, commit: BareCommit) -> None:
        self._approvals = approvals
        self._commit = commit
        self._gateway = approvals.gateway_key.public._key
        self._voter = approvals.bob_key.public._key
        vote = approvals.vote
        self._vote_bytes = canonicalize({k: v for k, v in vote.items() if k != "signature"})
        self._vote_sig = _signature(vote)
        self.body = canonicalize(approvals.fresh(1)[0]).decode()

    def crypto(self, unsigned: dict[str, Any], sig: bytes) -> None:
        """The floor's CPU: canonicalize the approval, verify it and the vote."""
        self._gateway.verify(sig, canonicalize(unsigned))
        self._voter.verify(self._vote_sig, self._vote_bytes)

    def insert(self) -> None:
        self._commit.commit(self.body)

    def run(self, unsigned: dict[str, Any], sig: bytes) -> None:
        """The whole floor of one call: its CPU, then the insert."""
        self.crypto(unsigned, sig)
        self.insert()

    def batch(self, *, store: bool) -> Batch:
        """Floor operations on fresh approvals (made and split untimed); with or without
        the insert."""

        def make(count: int) -> Iterator[Callable[[], Any]]:
            for doc in self._approvals.fresh(count):
                unsigned = {k: v for k, v in doc.items() if k != "signature"}
                yield partial(self.run if store else self.crypto, unsigned, _signature(doc))

        return make


def interleaved(settings: Settings, hatp_batch: Batch, floor_batch: Batch) -> tuple[Timing, Timing]:
    """Time ``settings.per_repeat`` hatp operations then as many floor ones, per repeat."""
    ours, floor = [], []
    for _ in range(settings.repeats):
        ops = list(hatp_batch(settings.per_repeat))
        started = time.perf_counter()
        for op in ops:
            op()
        ours.append((time.perf_counter() - started) / len(ops))
        ops = list(floor_batch(settings.per_repeat))
        started = time.perf_counter()
        for op in ops:
            op()
        floor.append((time.perf_counter() - started) / len(ops))
    return Timing(tuple(ours)), Timing(tuple(floor))


def checks(gate: ApprovalGate, approvals: Approvals, *, use: bool) -> Batch:
    requester = Requester(AGENT, DANA)

    def check(doc: dict[str, Any]) -> CheckedApproval:
        return gate.check("charge_card", ARGS, doc, requester)

    def check_and_use(doc: dict[str, Any]) -> None:
        gate.use(gate.check("charge_card", ARGS, doc, requester))

    def batch(count: int) -> Iterator[Callable[[], Any]]:
        for doc in approvals.fresh(count):
            yield partial(check_and_use if use else check, doc)

    return batch


def uses(gate: ApprovalGate, approvals: Approvals) -> Batch:
    """The single-use claim alone, of approvals checked beforehand (not timed)."""
    requester = Requester(AGENT, DANA)

    def batch(count: int) -> Iterator[Callable[[], Any]]:
        checked = [
            gate.check("charge_card", ARGS, doc, requester) for doc in approvals.fresh(count)
        ]
        for one in checked:
            yield partial(gate.use, one)

    return batch


def repeated(op: Callable[[], Any]) -> Batch:
    return lambda count: iter([op] * count)


@dataclass(frozen=True)
class Row:
    """A hatp figure beside its baseline (the floor, or a part of it)."""

    name: str
    hatp: Timing
    base: Timing
    target: float | None

    @property
    def ratio(self) -> float:
        return self.hatp.best / self.base.best

    @property
    def verdict(self) -> str | None:
        return None if self.target is None else ("PASS" if self.ratio <= self.target else "MISS")

    def line(self) -> str:
        target = "context" if self.target is None else f"<={self.target:.1f}x {self.verdict}"
        return (
            f"{self.name:<44} {self.hatp.best * 1e6:8.1f} µs ({1 / self.hatp.best:6.0f}/s, "
            f"median {self.hatp.median * 1e6:6.1f})  vs {self.base.best * 1e6:7.1f} µs  "
            f"ratio {self.ratio:5.2f}x  {target}"
        )


@dataclass(frozen=True)
class Measured:
    """One database's rows: ``check`` alone (SQLite only), ``use`` vs the insert, and the
    target row, check + use vs the floor."""

    check: Row | None
    use: Row
    target: Row

    def to_json(self) -> dict[str, Any]:
        row = self.target
        return {
            "ratio": round(row.ratio, 3),
            "hatp_ms": _ms(row.hatp.best),
            "floor_ms": _ms(row.base.best),
            "hatp_median_ms": _ms(row.hatp.median),
            "floor_median_ms": _ms(row.base.median),
            "target": row.target,
            "verdict": row.verdict,
            "use_ms": _ms(self.use.hatp.best),
            "insert_ms": _ms(self.use.base.best),
        } | ({} if self.check is None else self._check_json(self.check))

    @staticmethod
    def _check_json(check: Row) -> dict[str, Any]:
        return {
            "check_ms": _ms(check.hatp.best),
            "floor_cpu_ms": _ms(check.base.best),
            "check_ratio": round(check.ratio, 3),
        }

    def lines(self) -> list[str]:
        rows = (
            [self.use, self.target] if self.check is None else [self.check, self.use, self.target]
        )
        return [row.line() for row in rows]


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


def _warm(settings: Settings) -> Settings:
    return Settings(repeats=1, per_repeat=max(5, settings.per_repeat // 10))


def measure(
    name: str, store: Store, bare_commit: BareCommit, settings: Settings, *, check: bool
) -> Measured:
    """The rows of one database; with ``check``, ``check`` alone vs the floor's CPU too
    (neither touches the store, so one database is enough)."""
    approvals = Approvals()
    gate = make_gate(store, approvals)
    floor = Floor(approvals, bare_commit)
    interleaved(_warm(settings), checks(gate, approvals, use=True), floor.batch(store=True))
    alone = None
    if check:
        hatp, bare = interleaved(
            settings, checks(gate, approvals, use=False), floor.batch(store=False)
        )
        alone = Row("check (no store) vs 2 verifies + canonicalize", hatp, bare, None)
    hatp, bare = interleaved(settings, uses(gate, approvals), repeated(floor.insert))
    use = Row(f"{name}: use vs the insert", hatp, bare, None)
    hatp, bare = interleaved(settings, checks(gate, approvals, use=True), floor.batch(store=True))
    target = Row(f"{name}: check + use vs the floor", hatp, bare, TARGET)
    return Measured(alone, use, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create a DB on")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object on stdout; the report to stderr"
    )
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    out: TextIO = sys.stderr if args.json else sys.stdout
    print(
        f"hatp gate benchmark{' (--quick)' if args.quick else ''}: Python "
        f"{platform.python_version()}, cryptography {cryptography.__version__}, SQLAlchemy "
        f"{sa.__version__}, psycopg {psycopg.__version__}; {settings.repeats} repeats of "
        f"{settings.per_repeat} calls, best shown",
        file=out,
    )
    print(
        "workload: charge_card(2140.00 USD), 1-of-1 finance approver, tool definition bound; "
        "each call a fresh approval (gateway, card and vote signatures checked)",
        file=out,
    )
    results: dict[str, Measured | str] = {}
    with tempfile.TemporaryDirectory(prefix="hatp-gate-bench-") as tmp:
        folder = Path(tmp)
        store = open_store(folder / "gate.db")
        bare = SqliteCommit(folder / "floor.db")
        try:
            results["sqlite"] = measure("sqlite", store, bare, settings, check=True)
        finally:
            bare.close()
            store.close()
    database, where = create_database(args.postgres)
    print(f"postgresql: {where}", file=out)
    if database is None:
        results["postgresql"] = where
    else:
        try:
            store = open_store(database)
            bare_pg = PostgresCommit(database)
            try:
                results["postgresql"] = measure("postgresql", store, bare_pg, settings, check=False)
            finally:
                bare_pg.close()
                store.close()
        finally:
            drop_database(args.postgres, database)
    print(file=out)
    for name, result in results.items():
        lines = [f"{name}: skipped: {result}"] if isinstance(result, str) else result.lines()
        print("\n".join(lines), file=out)
    print(
        "floor = canonicalize the approval + verify the gateway's signature and the "
        "approver's vote (2 bare Ed25519 verifies) + 1 bare durable insert; ratio = best "
        f"hatp / best floor, target {TARGET:.1f}x or less",
        file=out,
    )
    if args.json:
        report: dict[str, Any] = {
            name: dict.fromkeys(JSON_KEYS) | {"skipped": result}
            if isinstance(result, str)
            else result.to_json()
            for name, result in results.items()
        }
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
