"""``hatp db upgrade`` and ``hatp db current``: the store's schema revision.

A fresh database needs neither (opening it creates the tables at the newest
revision); one an older hatp made needs ``upgrade`` before this hatp serves it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from hatp.cli._app import app, err, reports_errors

db_app = typer.Typer(
    help="The store's schema: its revision, and upgrading it.", no_args_is_help=True
)
app.add_typer(db_app, name="db")

_DB = typer.Option(
    "--db",
    help="The store: a SQLite file (or sqlite:///path) or a postgresql+psycopg:// URL.",
    show_default=False,
)


@db_app.command("upgrade", epilog="Exit 0: at the newest revision; 2: refused, nothing changed.")
@reports_errors
def upgrade(db: Annotated[str, _DB]) -> None:
    """Bring the store's database to this hatp's newest schema revision.

    In one transaction, under the schema lock: a fresh database is created, one an
    older hatp made is stamped (and its missing tables created), one behind is
    upgraded. Prints "FROM -> TO" on stdout ("none" when no revision was recorded).
    Back the database up first.
    """
    from hatp.store import upgrade_store

    status = upgrade_store(db)
    typer.echo(f"{status.before or 'none'} -> {status.after}")
    if status.before == status.after:
        err.print(f"already at the newest revision, {status.head}: nothing to do")
    else:
        err.print(f"upgraded ({status.found.value} database) to {status.after}")


@db_app.command("current", epilog="Exit 0: reported; 2: the database cannot be read.")
@reports_errors
def current(db: Annotated[str, _DB]) -> None:
    """Print the store's schema revision ("none" when it records none), changing nothing.

    On stderr, how it stands against this hatp's newest revision.
    """
    from hatp.store import Found, schema_status

    status = schema_status(db)
    typer.echo(status.before or "none")
    advice = {
        Found.CURRENT: "this hatp's newest",
        Found.EMPTY: "no tables yet: opening creates them",
        Found.UNVERSIONED: "made before revisions began: hatp db upgrade stamps it",
        Found.PARTIAL: "some tables missing: run hatp db upgrade",
        Found.BEHIND: "behind: run hatp db upgrade",
        Found.NEWER: "newer than this hatp: upgrade hatp",
    }
    err.print(f"{status.found.value}: {advice[status.found]} (newest: {status.head})")


@db_app.command(
    "notices", epilog="Exit 0: reported; 2: the database cannot be read or is not this hatp's."
)
@reports_errors
def notices(
    db: Annotated[str, _DB],
    ask: Annotated[
        str | None,
        typer.Option("--ask", help="List this ask's notices, one per line.", show_default=False),
    ] = None,
) -> None:
    """The gateway's outbox: how many notices each push channel holds, by state
    (pending is the backlog), or with --ask one ask's notices: event, person, channel,
    state, attempts and the last failure ([OUTBOX]). Contact details are never shown.
    """
    from hatp.store import Outbox, open_store

    store = open_store(db)
    try:
        outbox = Outbox(store)
        if ask is None:
            counts = outbox.counts()
            for (channel, state), count in sorted(counts.items()):
                typer.echo(f"{channel}\t{state}\t{count}")
            due = outbox.next_due()
            err.print("no notices" if not counts else f"next due: {'none' if due is None else due}")
            return
        rows = outbox.for_ask(ask)
        for row in rows:
            failure = "" if row.last_error is None else f"\t{row.last_error}"
            typer.echo(
                f"{row.notice_id}\t{row.event}\t{row.human}\t{row.channel}\t{row.state.value}"
                f"\t{row.attempts}{failure}"
            )
        err.print(f"{len(rows)} notice(s) about ask {ask}")
    finally:
        store.close()
