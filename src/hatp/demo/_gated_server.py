"""The served gated demo as a process of its own, for tests and for stdio hosts.

``python -m hatp.demo._gated_server FOLDER --http PORT [--auto]`` serves
what ``hatp demo --gated --serve`` serves (:mod:`hatp.demo.gated_serve`), on
``127.0.0.1:PORT`` (0: any free port), printing the same lines on stdout
once it accepts connections, until SIGINT or SIGTERM.

``... FOLDER --stdio [--auto]`` serves the payments MCP server on stdin and
stdout (nothing else is written to stdout) until stdin closes or SIGTERM;
acme's gateway runs in the process, and its approver page and MCP endpoint
listen on a free port of 127.0.0.1 all the same: ``FOLDER/served.json``
says where. In both modes the log goes to ``FOLDER/logs/gated.log``.

``--editable`` adds the plain tool ``edit_listing(description)``, which
changes ``charge_card``'s listed description: a test's way to change the
tool under an approval. ``hatp demo`` never offers it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

from hatp._logs import configure_logging
from hatp.demo._mcp_server import listen
from hatp.demo.gated_serve import Served, serve_gated

__all__ = ["LOG_FILE", "main"]

#: The log of the process, under ``FOLDER/logs/``.
LOG_FILE = "gated.log"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the served gated demo as the arguments say; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m hatp.demo._gated_server")
    parser.add_argument("folder", type=Path, help="the trip world's folder (made if missing)")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--stdio", action="store_true", help="serve payments on stdin/stdout")
    how.add_argument("--http", type=int, metavar="PORT", help="serve on 127.0.0.1:PORT")
    parser.add_argument("--auto", action="store_true", help="scripted approvers approve")
    parser.add_argument("--editable", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder: Path = args.folder
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    with (folder / "logs" / LOG_FILE).open("a", encoding="utf-8") as log:
        configure_logging("info", stream=log)
        sock = listen(0 if args.stdio else args.http)

        def ready(served: Served) -> None:
            if not args.stdio:  # over stdio, stdout is the MCP channel
                print("\n".join(served.lines()), flush=True)

        with contextlib.closing(sock):
            asyncio.run(
                serve_gated(
                    folder,
                    sock,
                    auto=args.auto,
                    ready=ready,
                    stdio=args.stdio,
                    editable=args.editable,
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
