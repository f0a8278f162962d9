"""``hatp demo``: the business trip as one all-or-nothing transaction.

An airline seat (hold), a hotel room (hold), a calendar event (compensate)
and a card charge (authorized at prepare, captured as the final step), with
a finance approval over $500. It prints the timeline, every participant's
ledger, writes ``record.json`` and ``keyring.json``, and verifies the record
offline. ``--scenario`` shows the other paths; ``--list`` names them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hatp.cli._app import HatpCommand, app, err, escape, refuse, reports_errors
from hatp.cli._paths import new_folder

if TYPE_CHECKING:
    from hatp.demo import TripWorld
    from hatp.demo.scenarios import DemoRun
    from hatp.gateway import Channel

# The demo world (every role, the store) loads when the command runs, not at start-up.

#: The walks other than the trip's scenarios: at most one per run.
_WALKS = ("--gated", "--mcp", "--writes", "--lease", "--web", "--two-orgs")
#: The walks where nobody is asked at this terminal: --auto has nothing to do there.
_NOBODY_ASKED = ("--writes", "--lease", "--web", "--two-orgs")
#: Where --web and --gated --serve listen on localhost unless --port says.
_DEFAULT_PORT = 4321


@app.command("demo", cls=HatpCommand)
@reports_errors
def demo(
    scenario: Annotated[
        str | None,
        typer.Option(
            "--scenario", "-s", help="Which path to show (see --list).", show_default="commit"
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="A new or empty folder for record.json, keyring.json and the ledgers.",
            show_default="a new temp folder",
        ),
    ] = None,
    auto: Annotated[
        bool, typer.Option("--auto", help="The finance approver follows the script; no prompt.")
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="Name every scenario and exit.")] = False,
    gated: Annotated[
        bool,
        typer.Option(
            "--gated", help="Show one approval-gated tool call (charge_card) instead of the trip."
        ),
    ] = False,
    mcp: Annotated[
        bool,
        typer.Option(
            "--mcp",
            help="Run the trip with each participant an MCP server process (stdio and HTTP), "
            "then kill one after it votes yes.",
        ),
    ] = False,
    writes: Annotated[
        bool,
        typer.Option(
            "--writes",
            help="Show an approval-bound inventory correction on a SQLite ledger instead of "
            "the trip: approve, execute, a double-click replay, a drift refusal.",
        ),
    ] = False,
    lease: Annotated[
        bool,
        typer.Option(
            "--lease",
            help="Show a ticket update under a compensation lease over HTTP instead of the "
            "trip: a stale writer refused with 409, a retry replayed, a restore.",
        ),
    ] = False,
    web: Annotated[
        bool,
        typer.Option(
            "--web",
            help="Serve the trip with the approver page and wait for the finance approver "
            "to decide in the browser, signing with a passkey.",
        ),
    ] = False,
    passkey: Annotated[
        bool,
        typer.Option("--passkey", help="With --web: the plan's finance group requires a passkey."),
    ] = False,
    two_orgs: Annotated[
        bool,
        typer.Option(
            "--two-orgs",
            help="acme's trip needs a partner's approval at globex: two hatp serve processes, "
            "each checking the other with the keys it publishes (a rotated and a revoked "
            "key refused).",
        ),
    ] = False,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="With --gated: serve the payments MCP server (charge_card gated, "
            "card_balance plain), acme's gateway and approver page over HTTP until stopped.",
        ),
    ] = False,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            help="With --web or --gated --serve: the port on localhost (0: any free one).",
            min=0,
            max=65535,
            show_default="4321",
        ),
    ] = None,
) -> None:
    """Book a business trip as one transaction and show every step.

    Prints the walk on stderr and the folder it wrote on stdout (with --gated
    --serve: the endpoints it serves, until Ctrl-C or SIGTERM). With a
    terminal attached (and without --auto) you are the finance approver.
    --out is a new or empty folder. Exit 2 for flags that do not go together.
    """
    from hatp.demo.scenarios import SCENARIOS

    given = {
        "--scenario": scenario is not None,
        "--out": out is not None,
        "--auto": auto,
        "--gated": gated,
        "--mcp": mcp,
        "--writes": writes,
        "--lease": lease,
        "--web": web,
        "--two-orgs": two_orgs,
        "--passkey": passkey,
        "--serve": serve,
        "--port": port is not None,
    }
    _check_flags(given, list_=list_)
    if list_:
        for name, item in SCENARIOS.items():
            typer.echo(f"{name:<10} {item.summary}")
        typer.echo(f"{'--gated':<10} one tool call gated by an approval of exactly that call")
        typer.echo(
            f"{'--gated --serve':<10} charge_card served over MCP until stopped: call it from any "
            "MCP client, a person approves"
        )
        typer.echo(f"{'--mcp':<10} the trip over MCP, four server processes; one killed and back")
        typer.echo(f"{'--writes':<10} an inventory correction: approved, run once, drift refused")
        typer.echo(f"{'--lease':<10} a ticket update under a lease: stale writer 409, a restore")
        typer.echo(f"{'--web':<10} the finance approver decides in the browser, with a passkey")
        typer.echo(
            f"{'--two-orgs':<10} acme and globex, two hatp serve processes: an approval at the "
            "partner, each side checking the other's published keys"
        )
        return
    chosen = SCENARIOS.get(scenario or "commit")
    if chosen is None:
        refuse(f"--scenario: no scenario {scenario!r}; choose one of: {', '.join(SCENARIOS)}")
    folder = (
        Path(tempfile.mkdtemp(prefix="hatp-demo-")) if out is None else new_folder(out, "--out")
    )
    if web:
        _web(folder, passkey=passkey, port=_DEFAULT_PORT if port is None else port)
    elif two_orgs:
        _two_orgs(folder)
    elif lease:
        _lease(folder)
    elif writes:
        _writes(folder)
    elif mcp:
        _mcp(folder, auto)
    elif gated and serve:
        _gated_serve(folder, auto=auto, port=_DEFAULT_PORT if port is None else port)
    elif gated:
        _gated(folder, auto)
    else:
        _trip(chosen.name, folder, auto)


def _two_orgs(folder: Path) -> None:
    err.rule("hatp demo --two-orgs: an approval at a partner, trusted by published keys")
    from hatp.demo.two_orgs import run_two_orgs

    def said(line: str) -> None:
        err.print(f"  {escape(line)}", soft_wrap=True)

    run = asyncio.run(run_two_orgs(folder, said))
    err.print(f"  the trip: {run.state.value}")
    for verified in (run.acme_set, run.globex_set):
        err.print(f"  {escape(verified.organisation)}'s key set, version {verified.version}:")
        for key in verified.keys:
            until = f" until {key.not_after}" if key.not_after else ""
            revoked = f" at {key.revoked_at}" if key.revoked_at else ""
            err.print(
                f"    {escape(key.kid)}  {key.role}  {key.status}{until}{revoked}",
                soft_wrap=True,
                markup=False,
            )
    checks = [
        ("the trip committed", run.state.value == "committed"),
        ("its record verifies with both organisations' published keys", run.report.ok),
        ("and not with acme's alone", not run.acme_only.ok),
        ("acme's retired coordinator key is refused by globex (401)", run.retired_status == 401),
        ("globex's revoked gateway key is refused by the receiver", run.revoked_status == 400),
    ]
    for what, held in checks:
        err.print(f"  {'[green]✓[/]' if held else '[red]✗[/]'} {escape(what)}")
    (folder / "record.json").write_text(json.dumps(run.record, indent=2) + "\n", "utf-8")
    err.print(f"wrote {folder / 'record.json'}, and each organisation's folder", markup=False)
    typer.echo(str(folder))
    if not run.as_expected:
        raise typer.Exit(1)


def _check_flags(given: dict[str, bool], *, list_: bool) -> None:
    """Refuse flags that cannot go together, rather than ignore one of them.

    Raises:
        ConfigInvalid: two flags that do not go together, naming both.
    """
    chosen = [flag for flag, on in given.items() if on]
    if list_ and chosen:
        refuse(f"--list goes alone (it names every walk and exits), not with {chosen[0]}")
    walks = [flag for flag in _WALKS if given[flag]]
    if len(walks) > 1:
        refuse(f"{walks[0]} and {walks[1]} are two walks: choose one")
    if walks and given["--scenario"]:
        refuse(f"--scenario picks a path of the trip; {walks[0]} is another walk: choose one")
    if walks and walks[0] in _NOBODY_ASKED and given["--auto"]:
        refuse(f"--auto goes with the trip, --gated or --mcp; {walks[0]} asks nobody here")
    if given["--serve"] and not given["--gated"]:
        refuse("--serve goes with --gated (it serves the gated charge_card until stopped)")
    if given["--passkey"] and not given["--web"]:
        refuse("--passkey goes with --web (the approver's page and passkey, in a browser)")
    if given["--port"] and not (given["--web"] or given["--serve"]):
        refuse("--port goes with --web or --gated --serve (the port they listen on)")


def _trip(name: str, folder: Path, auto: bool) -> None:
    from hatp.demo.scenarios import SCENARIOS, run_scenario

    chosen = SCENARIOS[name]
    err.rule(f"hatp demo: {chosen.name} — {chosen.summary}")
    interactive = not auto and sys.stdin.isatty() and chosen.person_may_answer
    channel = _at_this_terminal if interactive else None
    run = asyncio.run(run_scenario(chosen, folder, channel=channel))
    try:
        ok = _show(run)
    finally:
        run.world.close()
    typer.echo(str(folder))  # stdout carries only the folder, for scripts
    if not ok:
        raise typer.Exit(1)


def _show(run: DemoRun) -> bool:
    from hatp.cli._timeline import print_timeline
    from hatp.cli._verify import print_report
    from hatp.evidence import verify_record
    from hatp.model import TxnState

    err.rule("Timeline (from the signed Transaction Record)")
    for note in run.notes:
        err.print(f"  [yellow]note[/] {escape(note)}")
    print_timeline(run.record, err.console)
    err.rule("Each participant's ledger")
    effects = _print_ledgers(run.world, run.outcome.txn_id)
    _write(run.folder / "record.json", run.record)
    _write(run.folder / "keyring.json", run.world.keyring.to_json())
    err.rule("Offline verification")
    report = verify_record(run.record, run.world.keyring)
    print_report(report, err.console)
    state = run.outcome.state.value.upper()
    undone = run.undo is not None and run.undo.outcome.state is TxnState.COMMITTED
    if undone:  # the trip committed whole, and the undo took all of it back
        all_or_none = all(e == "undone" for e in effects.values())
        shows = "the trip taken back" if all_or_none else "[red]a partial undo[/]"
    else:
        all_or_none = all(e in ("whole", "none") for e in effects.values())
        shows = "the whole effect or none" if all_or_none else "[red]a partial effect[/]"
    err.print(f"outcome [bold]{state}[/]; every ledger shows {shows}")
    if run.outcome.state is TxnState.NEEDS_RECOVERY:
        err.print(
            "[yellow]not whole[/]: the final step ran after holds lapsed; they were released, "
            "and a linked transaction was offered to a person, not run"
        )
    err.print(f"wrote {run.folder / 'record.json'} and {run.folder / 'keyring.json'}", markup=False)
    err.print(
        f"check it yourself: hatp verify {run.folder / 'record.json'} "
        f"--keys {run.folder / 'keyring.json'}",
        markup=False,
    )
    ok = report.ok and all_or_none
    if run.undo is not None:
        ok = _show_undo(run) and ok
    return ok


def _print_ledgers(world: TripWorld, txn_id: str) -> dict[str, str]:
    """Print each participant's ledger lines for ``txn_id`` and its effect; return those."""
    from hatp.cli._timeline import short
    from hatp.clock import format_time

    effects = world.effects(txn_id)
    for participant_id in world.participant_ids:
        lines = [x for x in world.ledger(participant_id) if x.txn_id == txn_id]
        err.print(f"  [bold]{short(participant_id)}[/] — effect: {effects[participant_id]}")
        for line in lines:
            err.print(
                f"      {format_time(line.time)[11:23]}  {line.kind:<11} {escape(line.detail)}",
                soft_wrap=True,
            )
        if not lines:
            err.print("      (nothing under this id)")
    return effects


def _show_undo(run: DemoRun) -> bool:
    """Show the trip's undo: its plan as people saw it, its timeline, the ledgers, and the
    offline checks of its record and of its link to the trip's; return whether all hold."""
    from hatp.cli._timeline import print_timeline
    from hatp.cli._verify import print_report
    from hatp.evidence import verify_record
    from hatp.model import Result

    undo = run.undo
    assert undo is not None  # callers check
    err.rule("The undo plan (what bob was shown before he approved it)")
    for line in undo.shown:
        err.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)
    err.rule("Undo timeline (from its own signed Transaction Record)")
    print_timeline(undo.record, err.console)
    err.rule("Each participant's ledger, for the undo")
    effects = _print_ledgers(run.world, undo.outcome.txn_id)
    err.print(
        "  (the calendar's event is removed by hatp.compensate with the trip's undo token: "
        "its line is the trip's, above)",
        soft_wrap=True,
    )
    _write(run.folder / "undo-record.json", undo.record)
    err.rule("Offline verification of the undo, and of its link to the trip")
    report = verify_record(undo.record, run.world.keyring)
    print_report(report, err.console)
    # verify_undo verifies both records again, then the undo rules: show those rules,
    # and anything of the rest that does not pass.
    err.print("[bold]the link[/]: the undo record checked against the trip's (verify_undo)")
    link = undo.link
    shown = [f for f in link.findings if f.rule.startswith("UNDO-") or f.result is not Result.PASS]
    print_report(link.model_copy(update={"findings": shown}), err.console)
    state = undo.outcome.state.value.upper()
    all_or_none = all(e in ("whole", "none") for e in effects.values())
    err.print(
        f"undo outcome [bold]{state}[/]; every ledger shows "
        + ("the whole effect or none" if all_or_none else "[red]a partial effect[/]")
    )
    err.print(f"wrote {run.folder / 'undo-record.json'}", markup=False)
    err.print(
        f"check the link yourself: hatp verify {run.folder / 'undo-record.json'} "
        f"--keys {run.folder / 'keyring.json'} --original {run.folder / 'record.json'}",
        markup=False,
        soft_wrap=True,
    )
    return report.ok and link.ok and all_or_none


def _mcp(folder: Path, auto: bool) -> None:
    err.rule("hatp demo --mcp: the trip over MCP, each participant a server process of its own")
    from hatp.demo.mcp_trip import run_mcp_demo  # the MCP SDK loads only for --mcp

    interactive = not auto and sys.stdin.isatty()
    demo = asyncio.run(run_mcp_demo(folder, channel=_at_this_terminal if interactive else None))
    ok = True
    try:
        for line in demo.layout:
            err.print(f"  {line}", markup=False)
        for run in demo.runs:
            err.rule(f"{run.scenario.name}: {run.scenario.summary}")
            ok = _show(run) and ok
    finally:
        demo.world.close()
    typer.echo(str(folder))
    if not ok:
        raise typer.Exit(1)


def _gated(folder: Path, auto: bool) -> None:
    err.rule("hatp demo --gated: charge_card runs only with an approval of exactly that call")
    from hatp.clock import SystemClock, format_time
    from hatp.demo import PAYMENTS, TripWorld
    from hatp.demo.gated import run_gated

    interactive = not auto and sys.stdin.isatty()
    with TripWorld.open(folder, SystemClock()) as world:
        channel = _at_this_terminal(world) if interactive else None
        run = asyncio.run(run_gated(world, channel))
        for number, step in enumerate(run.steps, start=1):
            mark, code = ("[green]✓[/]", "") if step.ok else ("[red]✗[/]", f"{step.code}: ")
            err.print(f"{number}. {step.title}")
            err.print(f"   {mark} {escape(code)}{escape(step.said)}")
            if number == 1 and run.requirement is not None:
                need = run.requirement
                amount = "no amount" if need.amount is None else str(need.amount)
                err.print(
                    f"   asks for: {need.address} ({need.action}, {amount}) over call "
                    f"{need.call_digest[:19]}…, tool {(need.tool_digest or '-')[:19]}…",
                    soft_wrap=True,
                )
        err.rule("The payments ledger")
        for line in world.ledger(PAYMENTS)[-3:]:
            err.print(f"  {format_time(line.time)[11:23]}  {line.kind:<8} {escape(line.detail)}")
    typer.echo(str(folder))
    approved = run.approval is not None and run.approval.decision == "approve"
    if approved and not run.as_expected:
        raise typer.Exit(1)


def _gated_serve(folder: Path, *, auto: bool, port: int) -> None:
    err.rule("hatp demo --gated --serve: charge_card over MCP, gated, until stopped")
    from hatp.demo._mcp_server import listen
    from hatp.demo.gated_serve import AUTO_SECONDS, Served, serve_gated

    try:
        sock = listen(port)
    except OSError as exc:
        refuse(f"--port: cannot listen on 127.0.0.1:{port}: {exc.strerror}; use another --port")

    def ready(served: Served) -> None:
        for line in served.lines():  # stdout: the endpoints, for programs
            typer.echo(line)
        err.print(f"  world: {folder}", markup=False)
        err.print(
            f"  MCP clients: connect to {served.mcp} (streamable HTTP) and call charge_card; "
            "it answers APPROVAL_REQUIRED and asks acme's gateway itself; once approved, "
            "call it again with the same arguments. Nobody is authenticated: every caller "
            "is the travel bot working for alice.",
            soft_wrap=True,
            markup=False,
        )
        if served.invite is None:
            err.print(
                f"  approvers: scripted, each approves {AUTO_SECONDS:g} s after an ask arrives",
                markup=False,
            )
        else:
            err.print(
                f"  You are {served.approver}, the finance approver: register your passkey "
                "with the invite link (it works once), sign in at the approve page and "
                "approve each ask there.",
                soft_wrap=True,
                markup=False,
            )
        err.print("  Ctrl-C stops it.", markup=False)

    with contextlib.closing(sock):
        asyncio.run(serve_gated(folder, sock, auto=auto, ready=ready))
    err.print("stopped")


def _writes(folder: Path) -> None:
    err.rule("hatp demo --writes: an inventory correction, approved for exactly this change")
    from hatp.clock import format_time
    from hatp.demo.writes import LEDGER, run_writes, signed_in

    err.print(
        f"  ledger: {folder / LEDGER} (SQLite: the inventory table and hatp's bookkeeping); "
        f"signed in: {signed_in().id}",
        markup=False,
    )
    run = run_writes(folder)
    for number, step in enumerate(run.steps, start=1):
        mark = "[green]✓[/]" if step.ok else f"[red]✗ expected {step.expected}[/]"
        err.print(f"{number}. {escape(step.title)}")
        for line in step.shown:
            err.print(f"     {line}", soft_wrap=True, markup=False, highlight=False)
        err.print(f"   {mark} {step.outcome}: {escape(step.said)}")
    err.rule("The journal (committed with each write)")
    for entry in run.journal:
        err.print(
            f"  #{entry.seq} {entry.plan_id} v{entry.version} {format_time(entry.at)[:19]} "
            f"by {', '.join(entry.approvers) or entry.source} ({entry.source}), "
            f"key {entry.key[:19]}…",
            soft_wrap=True,
        )
    if not run.journal:
        err.print("  (nothing)")
    err.rule("The inventory table")
    for sku, (on_hand, unit, version) in run.table.items():
        err.print(f"  {sku}  {on_hand:>4} {unit:<5} version {version}")
    err.rule("Do the table and the journal agree?")
    for what, held in run.checks:
        err.print(f"  {'[green]✓[/]' if held else '[red]✗[/]'} {escape(what)}")
    err.print(f"wrote {folder / LEDGER}, journal.json, steps.json and each plan", markup=False)
    typer.echo(str(folder))
    if not run.as_expected:
        raise typer.Exit(1)


def _lease(folder: Path) -> None:
    err.rule("hatp demo --lease: a ticket update under a compensation lease, over HTTP")
    from hatp.demo.lease import DATABASE, run_lease

    err.print(
        f"  system of record: {folder / DATABASE} (SQLite: the tickets and the lease tables), "
        "served by uvicorn on a loopback port",
        markup=False,
    )
    run = run_lease(folder)
    err.print(f"  API: {run.url}", markup=False)
    for number, step in enumerate(run.steps, start=1):
        mark = "[green]✓[/]" if step.ok else f"[red]✗ expected {step.expected}[/]"
        err.print(f"{number}. {escape(step.title)}")
        err.print(f"   {mark} {step.outcome}: {escape(step.said)}", soft_wrap=True)
    err.rule("Ticket 4711 now")
    for column, value in run.ticket.items():
        err.print(f"  {column:<9} {value}", markup=False)
    err.rule("Checked offline, with the ticket system's public key alone")
    for what, held in run.checks:
        err.print(f"  {'[green]✓[/]' if held else '[red]✗[/]'} {escape(what)}")
    err.print(f"wrote {folder / DATABASE}, every lease and receipt, and keyring.json", markup=False)
    typer.echo(str(folder))
    if not run.as_expected:
        raise typer.Exit(1)


def _web(folder: Path, *, passkey: bool, port: int) -> None:
    required = ", a passkey required" if passkey else ""
    err.rule(f"hatp demo --web: the finance approver decides in the browser{required}")
    from hatp.demo.web import WEB_FILE, WebReady, run_web_demo

    def ready(shown: WebReady) -> None:
        err.print(f"  approver page: {shown.approve}", markup=False)
        err.print(
            f"  1. You are {shown.approver}, the finance approver. Register your passkey "
            "by opening this link (it works once):",
            soft_wrap=True,
        )
        err.print(f"     {shown.invite}", soft_wrap=True, markup=False)
        err.print(
            "  2. Sign in with the passkey. The trip then begins and waits for your answer "
            "on the page; approve or reject it with the passkey.",
            soft_wrap=True,
        )
        err.print(f"  (both links are in {folder / WEB_FILE}; Ctrl-C stops the demo)", markup=False)

    def registered(kid: str) -> None:
        err.print(f"  passkey {kid} is on the approver's card: the trip begins", soft_wrap=True)

    def notice(line: str) -> None:
        err.print(f"  [dim]notice:[/] {escape(line)}", soft_wrap=True)

    try:
        run = asyncio.run(
            run_web_demo(
                folder,
                port=port,
                passkey=passkey,
                ready=ready,
                registered=registered,
                notices=notice,
            )
        )
    except OSError as exc:
        refuse(f"--port: cannot listen on localhost:{port}: {exc.strerror}; use another --port")
    if run is None:
        err.print("no passkey was registered in time; nothing was begun")
        typer.echo(str(folder))
        raise typer.Exit(1)
    try:
        ok = _show(run)
    finally:
        run.world.close()
    typer.echo(str(folder))
    if not ok:
        raise typer.Exit(1)


def _at_this_terminal(world: TripWorld) -> Channel:
    """You, at this terminal, are whoever the gateway asks (bob first)."""
    from hatp.gateway import TerminalChannel

    err.print("[bold]You are the finance approver[/]: the gateway will ask you below.")
    return TerminalChannel(sys.stdin, sys.stderr, world.people, world.clock)


def _write(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
