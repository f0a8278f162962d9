"""`hatp demo --web`: the trip decided on the approver page, driven here over real HTTP.

The demo listens on a loopback port; this test is the approver's browser, its
passkey a software authenticator that answers as a platform authenticator
does (chromium itself drives the page in ``tests/browser``): it opens the
invitation, registers, signs in, and votes through the page's endpoints.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from hatp.cli import app
from hatp.coordinator import Outcome
from hatp.demo.scenarios import APPROVER, DemoRun
from hatp.demo.web import WEB_FILE, WebReady, run_web_demo
from hatp.evidence import verify_record
from hatp.evidence._b64 import b64url_decode
from hatp.gateway import SoftwareAuthenticator
from hatp.model import Result, TxnState

runner = CliRunner()
#: How long one run may take, at most.
BOUND = 60.0


async def _approver(ready: asyncio.Future[WebReady], decision: str, notices: list[str]) -> None:
    """The finance approver at the page: register from the invitation, sign in, wait for
    the e-mail (after the webhook failed), open its link, and vote on the page."""
    shown = await ready
    token = shown.invite.split("#invite=", 1)[1]
    device = SoftwareAuthenticator("localhost", "bob-device", origin=shown.url)
    async with httpx2.AsyncClient(base_url=shown.url, headers={"Origin": shown.url}) as http:

        async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            answer = await http.post(f"/approve/api/{path}", json=body)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        options = await post("enrol/options", {"invite": token})
        challenge = b64url_decode(options["options"]["challenge"])
        await post("enrol", {"invite": token, "credential": device.register(challenge)})
        options = await post("sign-in/options", {})
        await post("sign-in", {"credential": device.assertion(b64url_decode(options["challenge"]))})
        while not any(line.startswith("e-mail to") for line in notices):
            await asyncio.sleep(0.05)
        mailed = next(line for line in notices if line.startswith("e-mail to"))
        link = mailed.rsplit("open it: ", 1)[1]
        opened = await http.get(link.removeprefix(shown.url))
        assert opened.status_code == 303, opened.text
        version: int | None = None
        while True:
            query = "" if version is None else f"?since={version}&waitSeconds=10"
            inbox = (await http.get(f"/approve/api/inbox{query}")).json()
            if inbox["asks"]:
                break
            version = inbox["version"]
        ask_id = inbox["asks"][0]["askId"]
        assert opened.headers["location"] == f"/approve/asks/{ask_id}"
        options = await post(f"asks/{ask_id}/options", {"decision": decision})
        credential = device.assertion(b64url_decode(options["challenge"]))
        voted = await post(f"asks/{ask_id}/vote", {"decision": decision, "credential": credential})
        assert voted["decision"] == decision


def _run(
    folder: Path,
    decision: str,
    **options: Any,
) -> tuple[DemoRun | None, WebReady, list[str], list[str]]:
    registered: list[str] = []
    notices: list[str] = []

    async def go() -> tuple[DemoRun | None, WebReady]:
        ready: asyncio.Future[WebReady] = asyncio.get_running_loop().create_future()
        person = asyncio.create_task(_approver(ready, decision, notices))
        running = run_web_demo(
            folder,
            port=0,
            ready=ready.set_result,
            registered=registered.append,
            notices=notices.append,
            **options,
        )
        demo = await asyncio.wait_for(running, BOUND)
        await asyncio.wait_for(person, BOUND)
        return demo, ready.result()

    demo, shown = asyncio.run(go())
    return demo, shown, registered, notices


@pytest.mark.parametrize(
    ("decision", "state"), [("approve", TxnState.COMMITTED), ("reject", TxnState.ABORTED)]
)
def test_the_approvers_passkey_vote_on_the_page_decides_the_trip(
    tmp_path: Path, decision: str, state: TxnState
) -> None:
    """[WEB-VOTE] [TXN-PASSKEY] with the passkey required: the trip ends as bob decides,
    every ledger whole or untouched, and the record verifies offline."""
    demo, shown, registered, notices = _run(tmp_path, decision, passkey=True)
    assert demo is not None
    try:
        outcome: Outcome = demo.outcome
        assert outcome.state is state
        assert registered == [f"{APPROVER}#passkey-1"]
        assert shown.approve == f"{shown.url}/approve" and shown.url.startswith("http://localhost:")
        written = json.loads((tmp_path / WEB_FILE).read_text())
        assert written["invites"][APPROVER] == shown.invite
        effects = set(demo.world.effects(outcome.txn_id).values())
        assert effects == ({"whole"} if state is TxnState.COMMITTED else {"none"})
        report = verify_record(demo.record, demo.world.keyring)
        assert report.ok
        passkey = next(f for f in report.findings if f.rule == "TXN-PASSKEY")
        if decision == "approve":
            assert passkey.result is Result.PASS and "1 group needing one" in passkey.detail
        # [OUTBOX] [GW-CHANNEL-NEXT] bob was told by webhook (busy, then gone), then mailed.
        hooks = [line for line in notices if line.startswith("webhook to")]
        assert [h.rsplit("-> ", 1)[1][:3] for h in hooks[:2]] == ["503", "410"]
        assert all(f"webhook to {APPROVER}: ask" in h for h in hooks[:2])
        assert (tmp_path / "mail" / "001.eml").is_file()
        saved = json.loads((tmp_path / "directory.json").read_text())
        bob = next(c for c in saved["cards"] if c["id"] == APPROVER)
        assert any(k.get("use") == "webauthn" for k in bob["keys"])
    finally:
        demo.world.close()


def test_without_a_registered_passkey_nothing_is_begun(tmp_path: Path) -> None:
    """The demo waits for the passkey; when none comes in time, it begins no trip."""

    async def go() -> DemoRun | None:
        return await asyncio.wait_for(
            run_web_demo(tmp_path, port=0, wait=timedelta(milliseconds=300)), BOUND
        )

    assert asyncio.run(go()) is None
    with sqlite3.connect(tmp_path / "coordinator.db") as conn:
        assert conn.execute("SELECT count(*) FROM hatp_txn").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["demo", "--passkey"], "--passkey goes with --web"),
    ],
)
def test_the_web_flags_are_checked(args: list[str], said: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and said in " ".join(result.output.split())


def test_the_list_names_the_web_demo() -> None:
    result = runner.invoke(app, ["demo", "--list"])
    assert result.exit_code == 0 and "--web" in result.stdout
