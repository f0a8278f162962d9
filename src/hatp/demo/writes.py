"""``hatp demo --writes``: an approval-bound inventory correction on a SQLite ledger.

A stock bot, working for dana, finds SKU-1 miscounted and SKU-2 counted in
the wrong unit. It drafts a write plan from the live rows (the snapshot) and
proposes it; the policy says a person must approve. Executing it before the
approval is refused; the bot cannot approve its own plan; erin, signed in as
herself, approves that exact version; it runs once, its journal entry
committed with the write; a second click finds the completed key and writes
nothing. A second plan is approved, then a clerk changes its row at the
shelf: executing it is refused as drift, and nothing is written.

The approver is whoever :func:`signed_in` says, the demo's stand-in for the
caller's authentication layer, never a field of the plan. The inventory
table and hatp's bookkeeping share one SQLite file, ``inventory.db``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hatp.clock import Clock, SystemClock, format_time
from hatp.demo._inventory import POLICY, live, registry, stock, touch
from hatp.errors import HatpError
from hatp.gateway import write_preview_lines
from hatp.store import Store, open_store
from hatp.writes import (
    JournalEntry,
    Principal,
    Proposal,
    Verdict,
    WriteOutcome,
    Writes,
    draft_plan,
    read_records,
)

__all__ = [
    "AGENT",
    "LEDGER",
    "OWNER",
    "ROWS",
    "Step",
    "WritesRun",
    "run_writes",
    "signed_in",
]

#: The stock bot, as the authentication layer names it, and whom it works for.
AGENT = Principal("agent://acme.com/stock-bot", "agent")
OWNER = "human://acme.com/dana"
#: The stock the ledger starts from: ``{sku: (on_hand, unit)}``, each at version 1.
ROWS = {"SKU-1": (10, "each"), "SKU-2": (4, "box"), "SKU-3": (40, "each")}
#: The SQLite file holding the inventory and hatp's bookkeeping, in the demo's folder.
LEDGER = "inventory.db"
RECOUNT = "recount-2026-12-02"
UNIT = "unit-sku-3"
WORKER = "web-1"


def signed_in() -> Principal:
    """Who the demo's authentication layer says is at the keyboard: erin, a person.

    In a deployment this is the caller's session (SSO, a verified card), never
    a field the agent filled in.
    """
    return Principal("human://acme.com/erin", "human")


@dataclass(frozen=True)
class Step:
    """One step of the walk: what was tried, what should happen, what did.

    ``outcome`` and ``expected`` are codes: an error's (``NOT_APPROVED``,
    ``DRIFT_DETECTED``, ...), an execution status (``EXECUTED``,
    ``ALREADY_EXECUTED``), the policy's verdict (``REQUIRE_APPROVAL``) or
    ``APPROVED``. ``shown`` are lines for the approver (the plan's effect preview,
    the policy's verdict, the agent's unchecked note).
    """

    title: str
    expected: str
    outcome: str
    said: str
    shown: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome == self.expected


@dataclass
class WritesRun:
    """The walk's steps, and what the ledger holds at the end.

    ``checks`` are the end-of-walk checks that the table and the journal
    agree, each ``(what, held)``.
    """

    folder: Path
    steps: list[Step] = field(default_factory=list)
    journal: list[JournalEntry] = field(default_factory=list)
    table: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    checks: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def as_expected(self) -> bool:
        """Every step had its expected outcome and every check held."""
        return (
            bool(self.steps)
            and all(step.ok for step in self.steps)
            and all(held for _, held in self.checks)
        )


def run_writes(folder: Path, clock: Clock | None = None) -> WritesRun:
    """Walk the inventory corrections on a fresh ``folder/inventory.db``; see the module.

    Writes ``inventory.db``, each plan (``plan-<id>-v<n>.json``), the journal
    (``journal.json``) and the steps (``steps.json``) into ``folder``.

    Raises:
        StoreUnavailable: the SQLite file could not be opened or written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for old in (LEDGER, f"{LEDGER}-wal", f"{LEDGER}-shm"):
        (folder / old).unlink(missing_ok=True)  # the demo's own file, from an earlier run
    store = open_store(folder / LEDGER)
    try:
        stock(store, ROWS)
        writes = Writes(store, registry(), POLICY, clock or SystemClock(), lease_seconds=30.0)
        run = WritesRun(folder)
        _walk(run, store, writes)
        run.journal = writes.journal()
        run.table = live(store)
        run.checks = list(_agreement(run, store, writes))
    finally:
        store.close()
    _save(run)
    return run


def _walk(run: WritesRun, store: Store, writes: Writes) -> None:
    approver = signed_in()

    # 1. The bot drafts the recount from the live rows and proposes it.
    corrections: list[tuple[str, dict[str, Any]]] = [
        ("adjust_stock", {"sku": "SKU-1", "delta": -3, "reason": "cycle count found 7"}),
        ("set_unit", {"sku": "SKU-2", "unit": "case"}),
    ]
    proposal = _propose(run, store, writes, RECOUNT, corrections, "Counted the shelf this morning.")
    if proposal is None:
        return
    # 2. Executed before anyone approved: refused.
    _try(
        run,
        f"The bot executes {RECOUNT} v1 before anyone approved it",
        "NOT_APPROVED",
        lambda: _executed(writes.execute(RECOUNT, 1, WORKER)),
    )
    # 3. The bot approves its own plan: refused, whatever the plan says.
    _try(
        run,
        "The bot approves its own plan",
        "APPROVER_REFUSED",
        lambda: _approve(writes, RECOUNT, AGENT),
    )
    # 4. erin, signed in, approves exactly this version (its digest).
    _try(
        run,
        f"{approver.id} (signed in) approves {RECOUNT} v1, digest {proposal.digest[:19]}…",
        "APPROVED",
        lambda: _approve(writes, RECOUNT, approver),
    )
    # 5. It runs: the corrections, the key and the journal entry in one transaction.
    _try(
        run,
        f"Execute {RECOUNT} v1",
        "EXECUTED",
        lambda: _executed(writes.execute(RECOUNT, 1, WORKER)),
    )
    # 6. A double click: the same key, completed, answers with its result.
    after_first = live(store)
    _try(
        run,
        f"Execute {RECOUNT} v1 again (a double click)",
        "ALREADY_EXECUTED",
        lambda: _executed(writes.execute(RECOUNT, 1, WORKER), unchanged=(store, after_first)),
    )
    # 7. A second plan is approved; then a clerk changes its row at the shelf.
    second = _propose(run, store, writes, UNIT, [("set_unit", {"sku": "SKU-3", "unit": "case"})])
    if second is None:
        return
    _try(
        run,
        f"{approver.id} approves {UNIT} v1",
        "APPROVED",
        lambda: _approve(writes, UNIT, approver),
    )
    touch(store, "SKU-3", on_hand=38, version=2)
    # 8. Executed after the drift: refused, nothing written.
    _try(
        run,
        f"A clerk sells 2 of SKU-3 at the till; then execute {UNIT} v1",
        "DRIFT_DETECTED",
        lambda: _executed(writes.execute(UNIT, 1, WORKER)),
    )


def _propose(
    run: WritesRun,
    store: Store,
    writes: Writes,
    plan_id: str,
    corrections: list[tuple[str, dict[str, Any]]],
    note: str | None = None,
) -> Proposal | None:
    """The bot drafts ``plan_id`` v1 from the live rows and proposes it; a step either way."""
    title = f"The bot proposes {plan_id} v1 (snapshot read from the live rows)"
    try:
        with store.transaction() as conn:
            doc = draft_plan(
                conn,
                registry(),
                plan_id=plan_id,
                version=1,
                corrections=corrections,
                proposed_by=AGENT.id,
                on_behalf_of=OWNER,
                note=note,
            )
        proposal = writes.propose(doc, AGENT)
    except HatpError as error:
        run.steps.append(Step(title, "REQUIRE_APPROVAL", error.code, error.message))
        return None
    (run.folder / f"plan-{plan_id}-v1.json").write_text(_json(doc), encoding="utf-8")
    decision = proposal.decision
    shown = (
        *write_preview_lines(proposal.preview),
        f"policy: {decision.verdict.value} ({'; '.join(decision.reasons)})",
        *([f"note (written by the agent, not checked): {note}"] if note else []),
    )
    said = f"stored as version 1, digest {proposal.digest[:19]}…"
    run.steps.append(Step(title, Verdict.REQUIRE_APPROVAL.name, decision.verdict.name, said, shown))
    return proposal


def _try(run: WritesRun, title: str, expected: str, act: Callable[[], tuple[str, str]]) -> None:
    """Run one step; a hatp refusal is its outcome (by code), not a crash of the walk."""
    try:
        outcome, said = act()
    except HatpError as error:
        outcome, said = error.code, error.message
        for name, sides in error.data.get("records", {}).items():
            said += f"; {name}: " + ", ".join(f"{k} {v}" for k, v in sides.items())
    run.steps.append(Step(title, expected, outcome, said))


def _approve(writes: Writes, plan_id: str, who: Principal) -> tuple[str, str]:
    writes.approve(plan_id, 1, who)
    return "APPROVED", f"approval stored for {who.id} against this version's digest"


def _executed(
    outcome: WriteOutcome, unchanged: tuple[Store, dict[str, tuple[int, str, int]]] | None = None
) -> tuple[str, str]:
    records = outcome.result.get("records", {})
    shown = ", ".join(
        f"{name} {cols['on_hand']} {cols['unit']} v{cols['version']}"
        for name, cols in records.items()
        if cols is not None
    )
    said = f"key {outcome.key[:19]}…, journal entry {outcome.journal_seq}: {shown}"
    if unchanged is not None:
        store, before = unchanged
        same = live(store) == before
        said += "; the table is unchanged" if same else "; the table CHANGED"
        if not same:
            return "WROTE_TWICE", said
    return outcome.status.name, said


def _agreement(run: WritesRun, store: Store, writes: Writes) -> Iterator[tuple[str, bool]]:
    """The table and the journal tell the same story."""
    entries = {(e.plan_id, e.version): e for e in run.journal}
    yield "one journal entry, for the recount only", list(entries) == [(RECOUNT, 1)]
    entry = entries.get((RECOUNT, 1))
    if entry is not None:
        yield (
            f"the recount's entry names {signed_in().id} as approver",
            entry.approvers == (signed_in().id,) and entry.source == "direct",
        )
        with store.transaction() as conn:
            now = read_records(conn, registry().sets, entry.result["records"], lock=False)
        yield "its recorded records are the table's rows now", now == entry.result["records"]
    yield "SKU-1 was adjusted once (10 - 3 = 7)", run.table["SKU-1"][:2] == (7, "each")
    yield "SKU-2 counts in cases", run.table["SKU-2"][1] == "case"
    yield "SKU-3 holds the clerk's change, not the plan's", run.table["SKU-3"] == (38, "each", 2)
    second = writes.status(UNIT, 1)
    yield (
        f"{UNIT} is failed with DRIFT_DETECTED, no journal entry",
        second.plan.detail == "DRIFT_DETECTED" and second.journal_seq is None,
    )


def _save(run: WritesRun) -> None:
    journal = [
        {
            "seq": e.seq,
            "key": e.key,
            "planId": e.plan_id,
            "version": e.version,
            "digest": e.digest,
            "approvers": list(e.approvers),
            "source": e.source,
            "result": e.result,
            "at": format_time(e.at),
        }
        for e in run.journal
    ]
    steps = [
        {"title": s.title, "expected": s.expected, "outcome": s.outcome, "said": s.said}
        for s in run.steps
    ]
    (run.folder / "journal.json").write_text(_json(journal), encoding="utf-8")
    (run.folder / "steps.json").write_text(_json(steps), encoding="utf-8")


def _json(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
