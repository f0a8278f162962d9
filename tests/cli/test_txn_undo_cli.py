"""``hatp txn undo TXN`` against a running ``hatp serve --demo`` (a process of its own, over
TCP): the dry run prints the undo plan for a person (each step taken back with its operation
and its fee or refund, each step kept and why) and begins nothing; the undo begun prints
its txnId and state, the demo's people approve it and it commits; every refusal is its
code, its reason and its message on stderr with exit 2."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from cli.served_demo import Demo
from hatp.cli import app

#: The trip's committed steps; the calendar event (compensate tier) can always be taken back.
STEPS = {"seat", "room", "calendar", "charge"}


def _hatp(*argv: str) -> Result:
    return CliRunner().invoke(app, list(argv))


def _committed(demo: Demo, txn_id: str, folder: Path) -> None:
    submitted = _hatp("txn", "submit", str(demo.plan_file(txn_id, folder / f"{txn_id}.json")),
                      "--server", demo.url)  # fmt: skip
    assert submitted.exit_code == 0, submitted.stderr
    assert demo.finished(txn_id) == {txn_id: "committed"}


def _refused(done: Result, code: str, reason: str | None) -> str:
    """The refusal's line, once it is ``code`` (with ``reason``) and exit 2, stdout empty."""
    assert done.exit_code == 2, (done.exit_code, done.stdout, done.stderr)
    assert done.stdout == ""
    head = f"error {code}: " + ("" if reason is None else reason)
    assert head in done.stderr, done.stderr
    return " ".join(done.stderr.split())


def _fee_text(branch: dict[str, Any]) -> str:
    """The fee the dry run shows for ``branch``: its amount less the refund it pays back."""
    amount, refund = branch["amount"], branch["args"].get("refund")
    if amount is None:
        return "fee none"
    if refund is None:
        return f"fee {amount['value']} {amount['currency']}"
    return "fee "  # the difference, checked with the refund itself below


def test_the_dry_run_shows_the_plan_for_a_person_and_begins_nothing_UNDO_CLI(
    demo: Demo, tmp_path: Path
) -> None:
    """[UNDO-CLI] --dry-run prints, for each step taken back in order, its operation, where,
    its tier and its fee (and refund); for each step kept, why; who approves it. --json
    prints the server's {plan}. Nothing was begun: the plan's txnId is unknown after."""
    _committed(demo, "trip-undo-cli-dry", tmp_path)
    url = demo.url

    shown = _hatp("txn", "undo", "trip-undo-cli-dry", "-s", url, "--dry-run", "--step", "calendar")
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("undo plan trip-undo-cli-dry.undo-")
    assert lines[0].endswith(" for trip-undo-cli-dry: 1 step(s) to take back, 3 kept")
    assert lines[1:3] == [
        "take back, in this order:",
        "  calendar: hatp.compensate at mcp://calendar.example (hold); fee none",
    ]
    assert lines[3] == "kept as they are (not undone):"
    assert sorted(lines[4:7]) == [f"  {s}: not asked to undo" for s in sorted(STEPS - {"calendar"})]
    assert lines[7].startswith(
        "approved by: human://acme.com/role/finance-approver (finance), by 20"
    )
    assert "nothing was begun" in shown.stderr
    assert f"hatp txn undo trip-undo-cli-dry --server {url} --step calendar" in shown.stderr

    as_json = _hatp("txn", "undo", "trip-undo-cli-dry", "-s", url, "--dry-run", "--json")
    assert as_json.exit_code == 0, as_json.stderr
    plan = json.loads(as_json.stdout)["plan"]
    assert plan["undoes"]["txnId"] == "trip-undo-cli-dry"
    every = _hatp("txn", "undo", "trip-undo-cli-dry", "-s", url, "--dry-run")
    assert every.exit_code == 0, every.stderr
    taken = [line for line in every.stdout.splitlines() if line.startswith("  ")]
    kept = {k["branchId"]: k["reason"] for k in plan["undoes"]["kept"]}
    assert len(taken) == len(plan["branches"]) + len(kept)
    for line, branch in zip(taken, plan["branches"], strict=False):
        assert line.startswith(
            f"  {branch['branchId']}: {branch['operation']} at {branch['participant']} "
            f"({branch['tier']}); {_fee_text(branch)}"
        ), line
        refund = branch["args"].get("refund")
        if refund is not None:
            assert line.endswith(f"; refund {refund['value']} {refund['currency']}"), line
    for line, (step, reason) in zip(taken[len(plan["branches"]) :], kept.items(), strict=True):
        assert line == f"  {step}: {reason}"
    assert {b["branchId"] for b in plan["branches"]} | set(kept) == STEPS

    status = _hatp("txn", "status", str(plan["txnId"]), "-s", url)
    _refused(status, "TXN_UNKNOWN", None)


def test_an_undo_begun_from_the_cli_is_approved_and_commits_UNDO_CLI(
    demo: Demo, tmp_path: Path
) -> None:
    """[UNDO-CLI] without --dry-run: txnId<TAB>state of the undo on stdout; the demo's people
    approve it and it commits. Asked again for the calendar: UNDO_REFUSED ALREADY_UNDONE
    naming the step; once every other step is taken back (--json), NOTHING_TO_UNDO."""
    _committed(demo, "trip-undo-cli", tmp_path)
    url = demo.url

    begun = _hatp("txn", "undo", "trip-undo-cli", "-s", url, "--step", "calendar",
                  "--decide-in", "600")  # fmt: skip
    assert begun.exit_code == 0, begun.stderr
    undo_id, state = begun.stdout.strip().split("\t")
    assert undo_id.startswith("trip-undo-cli.undo-")
    assert state in ("active", "committing", "committed")
    assert "taking back calendar" in begun.stderr
    assert demo.finished(undo_id) == {undo_id: "committed"}

    again = _hatp("txn", "undo", "trip-undo-cli", "-s", url, "--step", "calendar")
    assert "ALREADY_UNDONE (step calendar): " in _refused(again, "UNDO_REFUSED", "ALREADY_UNDONE")

    rest = _hatp("txn", "undo", "trip-undo-cli", "-s", url, "--json")
    assert rest.exit_code == 0, rest.stderr
    answer = json.loads(rest.stdout)
    assert set(answer) == {"txnId", "state", "plan"}
    assert "calendar" not in [b["branchId"] for b in answer["plan"]["branches"]]
    assert demo.finished(answer["txnId"]) == {answer["txnId"]: "committed"}
    nothing = _hatp("txn", "undo", "trip-undo-cli", "-s", url, "--dry-run")
    assert "trip-undo-cli" in _refused(nothing, "UNDO_REFUSED", "NOTHING_TO_UNDO")


def test_every_refusal_is_its_code_reason_and_message_with_exit_2_UNDO_CLI(
    demo_sqlite: Demo, tmp_path: Path
) -> None:
    """[UNDO-CLI] an unknown transaction TXN_UNKNOWN; a step that is not the transaction's
    UNDO_REFUSED UNKNOWN_STEP naming it; a --decide-in the server does not take
    INVALID_JSON naming /decideSeconds; an unreachable server PEER_UNAVAILABLE naming the
    URL: each on stderr, exit 2, nothing on stdout, nothing begun."""
    url = demo_sqlite.url
    _committed(demo_sqlite, "trip-undo-cli-refused", tmp_path)

    assert "trip-none" in _refused(_hatp("txn", "undo", "trip-none", "-s", url),
                                   "TXN_UNKNOWN", None)  # fmt: skip
    lunch = _hatp("txn", "undo", "trip-undo-cli-refused", "-s", url, "--step", "lunch")
    assert "UNKNOWN_STEP (step lunch): " in _refused(lunch, "UNDO_REFUSED", "UNKNOWN_STEP")
    zero = _hatp("txn", "undo", "trip-undo-cli-refused", "-s", url, "--decide-in", "0")
    assert "/decideSeconds" in _refused(zero, "INVALID_JSON", None)
    listed = _hatp("txn", "list", "-s", url, "--json")
    assert [t["txnId"] for t in json.loads(listed.stdout)["transactions"]] == [
        "trip-undo-cli-refused"
    ]

    with socket.socket() as taken:  # a port nobody listens on
        taken.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{taken.getsockname()[1]}"
    for argv in ([], ["--dry-run"]):
        gone = _hatp("txn", "undo", "trip-1", "--server", nobody, *argv)
        assert nobody in _refused(gone, "PEER_UNAVAILABLE", None)
