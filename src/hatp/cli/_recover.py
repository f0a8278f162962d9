"""``hatp recover``: finish, now, what a stopped coordinator left open.

A served deployment does this by itself (every ``hatp serve`` with the
coordinator role recovers at start and keeps looking); this command is the
operator's: with ``--config`` it takes over every open transaction whose
owner's lease has ended and drives each as far as it goes now, printing one
line per transaction; with ``--db`` alone (no keys, no participants) it only
reports what is open and who holds it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from hatp.cli._app import HatpCommand, app, err, reports_errors
from hatp.errors import ConfigInvalid


@app.command(
    "recover",
    epilog="Exit 0: nothing left open; 1: something still open; 2: unusable.",
    cls=HatpCommand,
)
@reports_errors
def recover(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="hatp serve's settings file: its coordinator takes the transactions over.",
            show_default=False,
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Only report what is open in this log (a SQLite file or postgresql:// URL); "
            "with --config, the log to use instead of the file's.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout instead of lines.")
    ] = False,
) -> None:
    """Finish the transactions a stopped coordinator left open, once, now.

    With --config, this process's coordinator takes over each open transaction
    whose owner's lease has ended and drives it as far as it goes: presumed abort
    if nothing was decided, otherwise phase 2 by the logged decision. A
    transaction whose owner is alive is left to it. With --db alone, it lists the
    open transactions, their state and owner, and whether their lease has ended.
    """
    if config is not None:
        rows = asyncio.run(_finish(config, db))
    elif db is not None:
        rows = _report(db)
    else:
        raise ConfigInvalid("say where: --config FILE (to finish) or --db URL (to report)")
    still_open = [row for row in rows if row["open"]]
    if as_json:
        typer.echo(json.dumps({"transactions": rows, "open": len(still_open)}, indent=2))
    else:
        for row in rows:
            typer.echo(f"{row['txnId']}\t{row['state']}\t{row.get('owner') or '-'}\t{row['note']}")
        err.print(f"{len(rows)} transaction(s); {len(still_open)} still open", soft_wrap=True)
    if still_open:
        raise typer.Exit(1)


def _report(db: str) -> list[dict[str, Any]]:
    from hatp.store import DecisionLog, open_store

    store = open_store(db)
    try:
        log = DecisionLog(store)
        now = datetime.now(UTC)
        claimable = set(log.claimable(now))
        rows = []
        for txn_id in log.open_transactions():
            row = log.get(txn_id)
            lease = "-" if row.lease_until is None else row.lease_until.isoformat()
            note = (
                "its owner stopped: recover takes it over"
                if txn_id in claimable
                else f"owned until {lease}"
            )
            rows.append(
                {
                    "txnId": txn_id,
                    "state": row.state.value,
                    "owner": row.owner,
                    "claimable": txn_id in claimable,
                    "open": True,
                    "note": note,
                }
            )
        return rows
    finally:
        store.close()


async def _finish(config: Path, db: str | None) -> list[dict[str, Any]]:
    from hatp.http import load_config, open_services

    settings = load_config(config).with_flags(db=db, only=("coordinator",))
    async with open_services(settings) as services:
        recovery = services.recovery
        if recovery is None:
            raise ConfigInvalid(
                "the settings serve no coordinator: add [coordinator] (and [gateway], "
                "[directory], server.keyring) to recover its transactions",
                key="coordinator",
            )
        await recovery.turn()
        outcomes = await recovery.settle()
        log = services.coordinator.log if services.coordinator is not None else None
        rows = [
            {
                "txnId": outcome.txn_id,
                "state": outcome.state.value,
                "owner": None,
                "claimable": False,
                "open": not outcome.state.finished,
                "note": outcome.reason,
            }
            for outcome in outcomes
        ]
        if log is not None:
            seen = {row["txnId"] for row in rows}
            for txn_id in await log.store.call(log.open_transactions):
                if txn_id not in seen:
                    row = await log.store.call(log.get, txn_id)
                    rows.append(
                        {
                            "txnId": txn_id,
                            "state": row.state.value,
                            "owner": row.owner,
                            "claimable": False,
                            "open": True,
                            "note": "its owner is alive: left to it",
                        }
                    )
        return rows
