"""The approver page in a real browser: ``hatp demo --web`` driven in Debian's chromium.

The demo serves the trip with the approver page and invites bob, the finance
approver, to register a passkey. In chromium, with a virtual platform
authenticator, bob opens the invitation, registers a passkey, signs in with
it, reads the ask (the plan's steps, each with its arguments, and amounts,
the agent's words under their label), and votes with the passkey. The demo then finishes the trip,
writes its record and verifies it offline; the test checks the record
itself too. Screenshots of the approval screen and of its steps are saved in
``artifacts/``.

A holds-first trip is driven too, on the approver page over the trip world
(:mod:`web_world`) served by uvicorn in a thread: its ask shows each step's
signed effect preview and how sure it is, before bob approves.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from browser.conftest import ARTIFACTS
from hatp.clock import SystemClock
from hatp.demo import trip_plan
from hatp.demo.trip import CaptureFee
from hatp.evidence import Keyring, load_record, verify_record
from hatp.gateway import AGENT_TEXT_LABEL, STEP_ARGUMENTS_LABEL, STEP_PREVIEW_LABEL
from hatp.model import Result
from hatp.store import open_store
from web_world import open_web_served

BOB = "human://acme.com/bob"
#: How long the demo may take from start to its verified record, at most.
BOUND = 120.0


class Demo:
    """``hatp demo --web`` running in a child process, and what it wrote."""

    def __init__(self, folder: Path, *flags: str) -> None:
        hatp = Path(sys.executable).parent / "hatp"
        self.folder = folder
        self.process = subprocess.Popen(
            [str(hatp), "demo", "--web", "--port", "0", "--out", str(folder), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.web = self._web_json()

    def _web_json(self) -> dict[str, Any]:
        written = self.folder / "web.json"
        until = time.monotonic() + 30
        while time.monotonic() < until:
            if written.exists() and written.stat().st_size:
                return dict(json.loads(written.read_text()))
            if self.process.poll() is not None:
                break
            time.sleep(0.05)  # waits for another process; no protocol time involved
        _, err = self.process.communicate(timeout=10)
        raise AssertionError(f"the demo did not start: {err[-2000:]}")

    @property
    def invite(self) -> str:
        return str(self.web["invites"][BOB])

    def finish(self) -> tuple[int, str, str]:
        """Wait for the demo to end; return its exit code, stdout and stderr."""
        out, err = self.process.communicate(timeout=BOUND)
        return self.process.returncode, out, err

    def record(self) -> tuple[dict[str, Any], Keyring]:
        record = load_record(self.folder / "record.json")
        return record, Keyring.load(self.folder / "keyring.json")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=10)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Any]:
    """``demo(*flags)`` starts ``hatp demo --web`` with ``flags``; stopped after the test."""
    started: list[Demo] = []

    def start(*flags: str) -> Demo:
        started.append(Demo(tmp_path / f"demo-{len(started)}", *flags))
        return started[-1]

    yield start
    for running in started:
        running.stop()


def register_and_sign_in(page: Any, demo: Demo) -> None:
    """Bob registers a passkey from his invitation, then signs in with it."""
    page.goto(demo.invite)
    page.get_by_role("button", name="Register a passkey").click()
    page.locator("#registered").wait_for(state="visible")
    assert f"{BOB}#passkey-1" in page.inner_text("#enrol-for")
    assert "#invite=" not in page.url  # the invitation leaves the address bar
    page.get_by_role("link", name="Sign in with it").click()
    page.get_by_role("button", name="Sign in with your passkey").click()
    page.locator("#signed-in-as").wait_for()
    assert page.inner_text("#signed-in-as") == BOB


def open_the_ask(page: Any) -> None:
    """Wait for the trip's ask to reach bob's inbox (the page refreshes), and open it."""
    page.locator(".ask-item a").wait_for()
    page.locator(".ask-item a").click()
    page.locator("#respond").wait_for()


def test_bob_registers_signs_in_and_approves_with_his_passkey_and_the_trip_commits(
    demo: Any, page: Any
) -> None:
    """[WEB-SIGN-IN] [WEB-VIEW] [WEB-VOTE] [TXN-PASSKEY] the whole path in chromium, with
    finance requiring the passkey; the screenshot of the approval screen is kept."""
    running = demo("--passkey")
    register_and_sign_in(page, running)
    open_the_ask(page)
    assert "passkey required" in page.inner_text("#ask")
    assert "730 USD" in page.inner_text("#amounts")
    agent = page.locator("#agent-text")
    assert agent.locator(".label").inner_text() == AGENT_TEXT_LABEL
    assert "Book Alice's trip to New York" in agent.inner_text()
    assert "agent-text" in (agent.get_attribute("class") or "")
    steps = page.inner_text("table.steps")
    for operation in ("book_seat", "hold_room", "add_event", "charge"):
        assert operation in steps
    # [GW-VIEW-ARGS] each step's arguments, under their label, as the plan states them
    seat = page.locator('tr.step-args[data-step="seat"] .step-arguments')
    assert seat.locator(".label").inner_text() == STEP_ARGUMENTS_LABEL
    assert seat.locator("pre").inner_text() == '{"flight": "LH400", "seat": "14C"}'
    assert seat.is_visible()
    charge = page.locator('tr.step-args[data-step="charge"] pre').inner_text()
    assert '"card": "corp-4242"' in charge and '"payee": "Acme Travel"' in charge
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "approver-page.png"), full_page=True)
    page.locator("section[aria-labelledby=h-steps]").screenshot(
        path=str(ARTIFACTS / "approver-step-arguments.png")
    )
    page.get_by_role("button", name="Approve with passkey").click()
    page.locator("#ask-state", has_text="Decided: approve").wait_for()
    code, out, err = running.finish()
    assert code == 0, err[-3000:]
    assert out.strip() == str(running.folder)
    assert "outcome COMMITTED" in err
    record, keyring = running.record()
    report = verify_record(record, keyring)
    assert report.ok
    passkey = next(f for f in report.findings if f.rule == "TXN-PASSKEY")
    assert passkey.result is Result.PASS and "1 passkey assertion" in passkey.detail
    assert (ARTIFACTS / "approver-page.png").stat().st_size > 10_000
    assert (ARTIFACTS / "approver-step-arguments.png").stat().st_size > 5_000


def test_bob_rejects_on_the_page_and_the_trip_aborts(demo: Any, page: Any) -> None:
    """[WEB-VOTE] a reject signed by the passkey: the trip aborts, nothing is left."""
    running = demo()
    register_and_sign_in(page, running)
    open_the_ask(page)
    page.get_by_role("button", name="Reject with passkey").click()
    page.locator("#ask-state", has_text="Decided: reject").wait_for()
    code, _, err = running.finish()
    assert code == 0, err[-3000:]
    assert "outcome ABORTED" in err and "the whole effect or none" in err
    record, keyring = running.record()
    assert verify_record(record, keyring).ok


def test_a_bogus_signature_is_refused_on_the_page_and_the_genuine_vote_then_counts(
    demo: Any, page: Any
) -> None:
    """[GW-PASSKEY] the vote's signature is changed on its way to the gateway: the page
    shows the refusal and its reason, nothing is recorded; bob's own vote then commits."""
    running = demo("--passkey")
    register_and_sign_in(page, running)
    open_the_ask(page)

    def tamper(route: Any) -> None:
        body = json.loads(route.request.post_data)
        signature = body["credential"]["response"]["signature"]
        body["credential"]["response"]["signature"] = signature[:-6] + "AAAAAA"
        route.continue_(post_data=json.dumps(body))

    page.route("**/approve/api/asks/*/vote", tamper)
    page.get_by_role("button", name="Approve with passkey").click()
    message = page.locator("#message")
    message.wait_for(state="visible")
    assert "RESPONSE_REFUSED (SIGNATURE)" in message.inner_text()
    page.unroute("**/approve/api/asks/*/vote")
    page.reload()
    assert "Open: waiting for your response" in page.inner_text("#ask-state")
    page.get_by_role("button", name="Approve with passkey").click()
    page.locator("#ask-state", has_text="Decided: approve").wait_for()
    code, _, err = running.finish()
    assert code == 0 and "outcome COMMITTED" in err, err[-3000:]


@pytest.fixture
def holds_first(tmp_path: Path) -> Iterator[Any]:
    """The approver page over the trip world, served by uvicorn in a thread on a loopback
    port, on the system clock; the card's bank adds a fee at capture (so payments
    previews the charge as predicted, with a bound)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    origin = f"http://localhost:{sock.getsockname()[1]}"
    store = open_store(f"sqlite:///{tmp_path / 'gateway.db'}")
    fee = CaptureFee(up_to=Decimal("20.00"), added=Decimal("35.00"))
    served = open_web_served(
        tmp_path / "trip", store, origin=origin, clock=SystemClock(), capture_fee=fee
    )
    server = uvicorn.Server(uvicorn.Config(served.app, log_level="warning", access_log=False))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    until = time.monotonic() + 10
    while not server.started and time.monotonic() < until:
        time.sleep(0.02)  # another thread's start-up; no protocol time involved
    assert server.started, "the approver page did not start"
    try:
        yield origin, served
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        served.world.close()
        store.close()


def test_a_holds_first_ask_shows_each_steps_preview_and_its_certainty_before_approving(
    holds_first: Any, page: Any
) -> None:
    """[WEB-VIEW] [GW-VIEW-PREVIEW] Holds-first: under each step bob sees its
    participant's signed preview, its certainty in words and in the box's edge (not
    colour alone): the seat exact, the charge predicted, at most 750 USD. He approves;
    the bank's fee takes the charge beyond that bound, and the record flags it."""
    origin, served = holds_first
    plan = trip_plan(
        "trip-browser-preview",
        decide_by=SystemClock().now() + timedelta(minutes=15),
        mode="holds-first",
    )
    page.goto(f"{origin}/approve/enrol#invite={served.enrolment.invite(BOB)}")
    page.get_by_role("button", name="Register a passkey").click()
    page.get_by_role("link", name="Sign in with it").click()
    page.get_by_role("button", name="Sign in with your passkey").click()
    page.locator("#signed-in-as").wait_for()
    with httpx2.Client(base_url=origin) as http:
        begun = http.post("/coordinator/txns", json={"plan": plan})
        assert begun.status_code == 201, begun.text
        page.locator(".ask-item a").wait_for()
        page.locator(".ask-item a").click()
        page.locator("#respond").wait_for()
        charge = page.locator('tr.step-preview[data-step="charge"] .effect-preview')
        assert charge.is_visible()
        assert charge.get_attribute("data-certainty") == "predicted"
        assert charge.locator(".label").inner_text() == STEP_PREVIEW_LABEL
        assert charge.locator(".certainty").inner_text() == (
            "Certainty: predicted (expects, may differ; at most 750 USD)"
        )
        assert "plus a fee the bank sets at capture" in charge.locator(".summary").inner_text()
        assert charge.locator(".changes li").all_inner_texts() == [
            'card corp-4242: charge, payee null → "Acme Travel", 730 USD'
        ]
        seat = page.locator('tr.step-preview[data-step="seat"] .effect-preview')
        assert seat.locator(".certainty").inner_text() == (
            "Certainty: exact (will do exactly this)"
        )
        # Not colour alone: the mark's own text and the box's edge differ too.
        edge = "e => getComputedStyle(e).borderLeftStyle"
        assert (seat.evaluate(edge), charge.evaluate(edge)) == ("solid", "dashed")
        mark = "e => getComputedStyle(e, '::before').content"
        assert charge.locator(".certainty-mark").evaluate(mark) == '"≈ "'
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator("section[aria-labelledby=h-steps]").screenshot(
            path=str(ARTIFACTS / "approver-step-previews.png")
        )
        page.get_by_role("button", name="Approve with passkey").click()
        page.locator("#ask-state", has_text="Decided: approve").wait_for()
        txn = f"/coordinator/txns/{plan['txnId']}"
        until = time.monotonic() + 30
        while http.get(txn).json()["state"] != "committed" and time.monotonic() < until:
            time.sleep(0.05)  # the coordinator runs in the server's thread
        record = http.get(f"{txn}/record").json()["record"]
    events = record["events"]
    (outcome,) = [e["body"] for e in events if e["type"] == "txn.outcome"]
    assert (outcome["state"], outcome["effectDiffers"]) == ("committed", ["charge"])
    (terms,) = [e["body"]["terms"] for e in events if e["type"] == "txn.terms"]
    assert terms["previews"]["charge"]["bound"] == {"value": "750.00", "currency": "USD"}
    assert (ARTIFACTS / "approver-step-previews.png").stat().st_size > 5_000
