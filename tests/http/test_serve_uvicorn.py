"""``hatp serve --demo`` for real: a process of its own, uvicorn on 127.0.0.1 at a port the
system chose, called over TCP, stopped by SIGTERM and exiting cleanly."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import httpx2

from hatp.demo._people import DIRECTORY

#: How long starting, the exchange, and stopping may each take, at most.
BOUND = 60.0
SERVE = "from hatp.cli import main; main()"


def test_hatp_serve_demo_answers_over_real_http_and_stops_cleanly(
    tmp_path: Path, store_url: str
) -> None:
    """[SERVE-CLI] the URL on stdout once listening; the index, the well-known document, the
    directory, a transaction begun and its record, a typed refusal; SIGTERM: exit 0."""
    folder = tmp_path / "demo"

    async def go() -> tuple[list[Any], int, bytes]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SERVE, "serve", "--demo", "--port", "0",
            "--demo-folder", str(folder), "--db", store_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        try:
            url = (await asyncio.wait_for(process.stdout.readline(), BOUND)).decode().strip()
            assert url.startswith("http://127.0.0.1:"), url
            answers = await asyncio.wait_for(_exchange(url, folder), BOUND)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), BOUND)
        return answers, await process.wait(), stderr

    answers, code, stderr = asyncio.run(go())
    index, document, card, begun, record, unknown = answers
    assert code == 0, stderr.decode()
    assert b"hatp serve: stopped" in stderr
    assert index["serves"] == ["gateway", "directory", "coordinator"]
    assert document["directory"] == DIRECTORY
    assert card["id"] == "human://acme.com/bob"
    assert begun.status_code == 201 and begun.json()["state"] in ("active", "committing")
    assert record["record"]["recordId"] == begun.json()["txnId"]
    assert (unknown.status_code, unknown.json()["code"]) == (404, "TXN_UNKNOWN")


async def _exchange(url: str, folder: Path) -> list[Any]:
    body = json.loads((folder / "trip-plan.json").read_text(encoding="utf-8"))
    async with httpx2.AsyncClient(base_url=url) as http:
        begun = await http.post("/coordinator/txns", json=body)
        return [
            (await http.get("/")).json(),
            (await http.get("/.well-known/human-card.json")).json(),
            (await http.get("/directory/cards/human://acme.com/bob")).json(),
            begun,
            (await http.get(begun.headers["location"] + "/record")).json(),
            await http.get("/coordinator/txns/trip-none"),
        ]
