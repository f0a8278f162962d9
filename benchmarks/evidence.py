"""Benchmarks of the evidence layer against bare Ed25519, measured in the same run.

Run with ``.venv/bin/python benchmarks/evidence.py`` (or ``make bench``).

Every hatp figure is printed next to a baseline taken in the same process,
interleaved with it, so that the ratio is what matters, not the machine:

1. ``sign(plan, key)`` (canonicalize + sign) vs ``Ed25519PrivateKey.sign`` on
   the same precomputed canonical bytes.
2. ``verify(signed_plan, keyring)`` vs ``Ed25519PublicKey.verify`` on the same
   precomputed bytes.
3. ``verify_record`` of a sealed 10,000-event record, in memory and from a
   file (``load_record`` + ``verify_record``), vs 10,000 bare verifies over
   the same precomputed signing inputs.

and, for context, ``canonicalize`` vs the ``rfc8785`` reference.

Each figure is the best of several repeats (the median is shown too), after
a warm-up. Targets are labelled PASS or MISS; nothing here asserts a timing
and the exit status is 0 whatever the figures. ``--quick`` shrinks every size
so a test can smoke-run the script; ``--profile`` adds cProfile listings.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import gc
import io
import json
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cryptography
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from _timing import Timing
from hatp.clock import ManualClock
from hatp.evidence import (
    Keyring,
    RecordWriter,
    SigningKey,
    canonicalize,
    load_record,
    sign,
    verify,
    verify_record,
)

ISSUER = "https://issuer.example/hatp"
RECORD_ID = "rec-2026-03-01-7f3c9a1e-44b2-4c1d-9e0a-5b8d2f6c3a71"
TXN_ID = "txn-2026-03-01-7f3c9a1e-44b2-4c1d-9e0a-5b8d2f6c3a71"
PLAN_DIGEST = "sha256:3q2-7wAAAAC6vu8BI0VniavN7wEjRWeJq83vASNFZ4k"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Settings:
    """How big and how long: the full run, or ``--quick`` for a smoke run."""

    repeats: int
    seconds_per_repeat: float
    record_events: int
    record_repeats: int


FULL = Settings(repeats=15, seconds_per_repeat=0.08, record_events=10_000, record_repeats=7)
QUICK = Settings(repeats=3, seconds_per_repeat=0.03, record_events=1_000, record_repeats=3)


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    name: str
    hatp: Timing
    bare: Timing
    unit: str  # "ops" (shown as ops/s) or "run" (shown as ms per run)
    target: float | None  # the highest acceptable hatp/bare ratio; None: context only


# --------------------------------------------------------------------------- inputs


def seed(index: int) -> bytes:
    """The 32-byte private seed of test key ``index``."""
    return bytes([index + 1]) * 32


def make_key(index: int, name: str) -> SigningKey:
    """A deterministic key, so every run signs the same bytes."""
    return SigningKey.from_seed(seed(index), f"{name}#key-{index}")


def unb64url(text: str) -> bytes:
    """Decode unpadded base64url (the signatures hatp itself wrote)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def build_plan() -> dict[str, Any]:
    """A realistic multi-branch plan of about 2 KB canonical JSON."""
    specs: list[tuple[str, str, str, str, dict[str, Any], str, str]] = [
        (
            "flights",
            "agent://travel.example/flights",
            "flight.book",
            "T2",
            {"route": "SFO-NRT", "date": "2026-03-14", "cabin": "economy", "passengers": 1},
            "1240.50",
            "USD",
        ),
        (
            "hotel",
            "agent://travel.example/hotels",
            "hotel.reserve",
            "T2",
            {"propertyId": "htl-88213", "checkIn": "2026-03-14", "nights": 5},
            "890.00",
            "USD",
        ),
        (
            "rail",
            "agent://rail.example/jr",
            "rail.pass.purchase",
            "T1",
            {"pass": "jr-7day-ordinary", "holder": "A. Traveller"},
            "50000",
            "JPY",
        ),
        (
            "insurance",
            "agent://insure.example/travel",
            "policy.bind",
            "T1",
            {"product": "trip-cancel-basic", "coverage": "2130.50"},
            "64.20",
            "USD",
        ),
        (
            "fx",
            "agent://bank.example/fx",
            "fx.convert",
            "T3",
            {"sell": "USD", "buy": "JPY", "rateLockSeconds": 900},
            "400.00",
            "USD",
        ),
        (
            "expense",
            "agent://corp.example/expenses",
            "expense.file",
            "T1",
            {"costCenter": "CC-4410", "memo": "Q1 offsite travel"},
            "0.00",
            "USD",
        ),
    ]
    branches: list[dict[str, Any]] = []
    for number, (name, participant, operation, tier, args, value, currency) in enumerate(
        specs, start=1
    ):
        branches.append(
            {
                "branchId": f"b{number}-{name}",
                "participant": participant,
                "operation": operation,
                "tier": tier,
                "args": args,
                "amount": {"value": value, "currency": currency},
                "settles": [f"b{number - 1}-settle"] if number > 1 else [],
            }
        )
    return {
        "hatpVersion": "0.1",
        "txnId": TXN_ID,
        "initiator": "agent://assistant.example/planner",
        "onBehalfOf": "human://alice@example.com",
        "purpose": "Book the Tokyo offsite trip",
        "branches": branches,
        "approvals": [
            {
                "approver": "human://alice@example.com",
                "scope": ["b1-flights", "b2-hotel"],
                "tier": "T2",
                "quorum": 1,
            },
            {"approver": "human://finance@example.com", "scope": ["b5-fx"], "tier": "T3"},
        ],
        "deadlines": {
            "prepareBy": "2026-03-01T12:05:00.000Z",
            "voteBy": "2026-03-01T12:30:00.000Z",
            "commitBy": "2026-03-01T13:00:00.000Z",
        },
        "createdAt": "2026-03-01T12:00:00.000Z",
    }


def event_body(seq: int) -> tuple[str, dict[str, Any]]:
    """A small vote/receipt-like event body (about 300-350 bytes canonical)."""
    branch = f"b{seq % 6 + 1}-branch-{seq % 97:02d}"
    kind = seq % 4
    if kind == 0:
        return "vote.cast", {
            "txnId": TXN_ID,
            "planDigest": PLAN_DIGEST,
            "branchId": branch,
            "vote": "commit" if seq % 7 else "abort",
            "voter": "human://alice@example.com",
            "tier": "T2",
            "reason": "approved in the mobile app after biometric check",
            "expiresAt": "2026-03-01T12:30:00.000Z",
        }
    if kind == 1:
        return "receipt.issued", {
            "txnId": TXN_ID,
            "planDigest": PLAN_DIGEST,
            "branchId": branch,
            "participant": "agent://travel.example/flights",
            "receiptId": f"rcpt-{seq:08d}-7f3c9a1e",
            "amount": {"value": f"{seq % 5000}.{seq % 100:02d}", "currency": "USD"},
            "status": "settled",
        }
    if kind == 2:
        return "branch.prepared", {
            "txnId": TXN_ID,
            "planDigest": PLAN_DIGEST,
            "branchId": branch,
            "participant": "agent://travel.example/hotels",
            "holdId": f"hold-{seq:08d}",
            "holdExpiresAt": "2026-03-01T13:00:00.000Z",
            "attempt": seq % 3 + 1,
            "preparedAt": "2026-03-01T12:04:31.250Z",
        }
    return "approval.granted", {
        "txnId": TXN_ID,
        "planDigest": PLAN_DIGEST,
        "branchId": branch,
        "approver": "human://finance@example.com",
        "scope": [branch, "b5-fx"],
        "quorum": {"needed": 1, "have": 1},
        "channel": "push",
        "decidedAt": "2026-03-01T12:06:02.915Z",
    }


@dataclass(frozen=True)
class RecordCase:
    """A sealed record, the file it was written to, and the bare-verify inputs."""

    document: dict[str, Any]
    path: Path
    bare_inputs: list[tuple[Ed25519PublicKey, bytes, bytes]]
    build_seconds: float


def build_record(
    events: int, signers: Sequence[SigningKey], sealer: SigningKey, folder: Path
) -> RecordCase:
    """Append ``events - 1`` signed events, seal, and write the record to a file."""
    clock = ManualClock(START)
    writer = RecordWriter(RECORD_ID, clock)
    started = time.perf_counter()
    for seq in range(events - 1):
        event_type, body = event_body(seq)
        writer.append(event_type, body, signers[seq % len(signers)])
        clock.advance(0.137)
    writer.seal(sealer)
    build_seconds = time.perf_counter() - started
    document = writer.to_json()
    path = folder / "record.json"
    # The same file form the CLI writes.
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    publics = {key.kid: key.public for key in [*signers, sealer]}
    bare_inputs: list[tuple[Ed25519PublicKey, bytes, bytes]] = []
    for event in document["events"]:
        unsigned = {k: v for k, v in event.items() if k != "signature"}
        public = publics[event["signature"]["kid"]]
        bare_inputs.append(
            (
                Ed25519PublicKey.from_public_bytes(public.raw),
                unb64url(event["signature"]["sig"]),
                canonicalize(unsigned),
            )
        )
    return RecordCase(document, path, bare_inputs, build_seconds)


# --------------------------------------------------------------------------- timing


def per_op(fn: Callable[[], object], number: int) -> float:
    """Seconds per call of ``fn`` over ``number`` calls."""
    started = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - started) / number


def calibrate(fn: Callable[[], object], seconds: float) -> int:
    """How many calls of ``fn`` take about ``seconds`` (also serves as the warm-up)."""
    number, elapsed = 1, 0.0
    while True:
        started = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds / 4:
            break
        number *= 2
    return max(1, round(number * seconds / elapsed))


def measure(
    cases: Sequence[Callable[[], object]], numbers: Sequence[int], repeats: int
) -> list[Timing]:
    """Time each case ``repeats`` times, interleaved, so drift hits all of them alike."""
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(repeats):
        for index, (fn, number) in enumerate(zip(cases, numbers, strict=True)):
            gc.collect()
            samples[index].append(per_op(fn, number))
    return [Timing(tuple(s)) for s in samples]


def pair(
    name: str,
    hatp_fn: Callable[[], object],
    bare_fn: Callable[[], object],
    settings: Settings,
    target: float | None,
) -> Row:
    """Measure one hatp operation against its bare baseline."""
    numbers = [calibrate(fn, settings.seconds_per_repeat) for fn in (hatp_fn, bare_fn)]
    hatp_timing, bare_timing = measure([hatp_fn, bare_fn], numbers, settings.repeats)
    return Row(name, hatp_timing, bare_timing, "ops", target)


# --------------------------------------------------------------------------- output


def figure(seconds: float, unit: str) -> str:
    if unit == "ops":
        return f"{1 / seconds:>12,.0f}/s"
    return f"{seconds * 1e3:>11,.1f} ms"


def print_table(rows: Sequence[Row]) -> None:
    header = (
        f"{'measurement':<46} {'hatp':>14} {'baseline':>14} {'ratio':>7} "
        f"{'(median)':>9} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        ratio = row.hatp.best / row.bare.best
        median_ratio = row.hatp.median / row.bare.median
        if row.target is None:
            target, result = "-", "info"
        else:
            target = f"<={row.target:.1f}x"
            result = "PASS" if ratio <= row.target else "MISS"
        print(
            f"{row.name:<46} {figure(row.hatp.best, row.unit):>14} "
            f"{figure(row.bare.best, row.unit):>14} {ratio:>6.2f}x {median_ratio:>8.2f}x "
            f"{target:>7}  {result}"
        )


def profile(title: str, fn: Callable[[], object], calls: int, per: str) -> None:
    """Print where the time goes in ``fn`` (top functions by own time)."""
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(18)
    total = stats.get_stats_profile().total_tt
    print(f"\n--- cProfile: {title} (profiled {total / calls * 1e6:.1f} us per {per}) ---")
    print(out.getvalue().split("\n", 4)[-1].rstrip())


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="add cProfile listings")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    run_started = time.perf_counter()

    print(
        f"hatp evidence benchmark{' (--quick)' if args.quick else ''}: "
        f"Python {platform.python_version()}, cryptography {cryptography.__version__}, "
        f"{platform.machine()}; best of {settings.repeats} "
        f"({settings.record_repeats} for the record), median shown too"
    )

    plan_key = make_key(0, "agent://assistant.example/planner")
    voters = [
        make_key(1, "human://alice@example.com"),
        make_key(2, "agent://travel.example/flights"),
        make_key(3, "agent://travel.example/hotels"),
        make_key(4, "human://finance@example.com"),
    ]
    coordinator = make_key(5, "agent://coordinator.example")
    keyring = Keyring([(key.public, ISSUER) for key in [plan_key, *voters, coordinator]], [ISSUER])

    # ---- the plan
    plan = build_plan()
    plan_bytes = canonicalize(plan)
    if plan_bytes != rfc8785.dumps(plan):
        raise RuntimeError("hatp canonicalize disagrees with rfc8785 on the plan")
    signed_plan = sign(plan, plan_key)
    verify(signed_plan, keyring)
    raw_private = Ed25519PrivateKey.from_private_bytes(seed(0))
    raw_public = Ed25519PublicKey.from_public_bytes(plan_key.public.raw)
    raw_sig = unb64url(signed_plan["signature"]["sig"])
    raw_public.verify(raw_sig, plan_bytes)
    print(
        f"plan: {len(plan['branches'])} branches, {len(plan_bytes):,} bytes canonical "
        f"({len(canonicalize(signed_plan)):,} signed)"
    )

    rows: list[Row] = [
        pair(
            "canonicalize plan vs rfc8785.dumps",
            lambda: canonicalize(plan),
            lambda: rfc8785.dumps(plan),
            settings,
            None,
        ),
        pair(
            "sign(plan) vs Ed25519 sign",
            lambda: sign(plan, plan_key),
            lambda: raw_private.sign(plan_bytes),
            settings,
            1.5,
        ),
        pair(
            "verify(signed plan) vs Ed25519 verify",
            lambda: verify(signed_plan, keyring),
            lambda: raw_public.verify(raw_sig, plan_bytes),
            settings,
            1.5,
        ),
    ]

    # ---- the record
    with tempfile.TemporaryDirectory(prefix="hatp-bench-") as folder:
        case = build_record(settings.record_events, voters, coordinator, Path(folder))
        events = case.document["events"]
        sizes = sorted(len(item[2]) for item in case.bare_inputs)
        bodies = sorted(len(canonicalize(event["body"])) for event in events)
        print(
            f"record: {len(events):,} events by {len({e['kid'] for e in events})} keys; "
            f"signing input median {statistics.median(sizes):.0f} bytes "
            f"(body median {statistics.median(bodies):.0f} bytes); "
            f"file {case.path.stat().st_size / 1e6:.1f} MB; "
            f"built in {case.build_seconds:.2f} s "
            f"({len(events) / case.build_seconds:,.0f} appends/s)"
        )
        report = verify_record(case.document, keyring)
        if not report.ok or report.events != len(events):
            raise RuntimeError(f"the benchmark record does not verify: {report.findings}")

        def bare_all() -> None:
            for public, signature, message in case.bare_inputs:
                public.verify(signature, message)

        def in_memory() -> None:
            verify_record(case.document, keyring)

        def from_file() -> None:
            verify_record(load_record(case.path), keyring)

        def load_only() -> None:
            load_record(case.path)

        record_fns: list[Callable[[], object]] = [in_memory, from_file, load_only, bare_all]
        for fn in record_fns:  # warm-up
            fn()
        in_mem_t, file_t, load_t, bare_t = measure(
            record_fns, [1] * len(record_fns), settings.record_repeats
        )
        label = f"{len(events):,}-event record"
        rows += [
            Row(f"verify_record {label} (memory)", in_mem_t, bare_t, "run", 1.3),
            Row(f"load+verify_record {label} (file)", file_t, bare_t, "run", None),
            Row(f"load_record alone {label}", load_t, bare_t, "run", None),
        ]
        print()
        print_table(rows)
        per_event = in_mem_t.best / len(events)
        bare_per_event = bare_t.best / len(events)
        print(
            f"\nper event: verify_record {per_event * 1e6:.1f} us, bare Ed25519 verify "
            f"{bare_per_event * 1e6:.1f} us, overhead {(per_event - bare_per_event) * 1e6:.1f} us; "
            f"file path adds {(file_t.best - in_mem_t.best) / len(events) * 1e6:.1f} us"
        )
        print(
            "ratio = hatp time / baseline time (best of repeats; lower is better). "
            "The canonicalize row's baseline is the pure-Python rfc8785 reference."
        )

        if args.profile:
            calls = 2_000 if args.quick else 20_000

            def sign_many() -> None:
                for _ in range(calls):
                    sign(plan, plan_key)

            def verify_many() -> None:
                for _ in range(calls):
                    verify(signed_plan, keyring)

            profile("sign(plan)", sign_many, calls, "op")
            profile("verify(signed plan)", verify_many, calls, "op")
            profile("verify_record (memory)", in_memory, len(events), "event")
            profile("load_record", load_only, len(events), "event")

    print(f"\ntotal run time {time.perf_counter() - run_started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
