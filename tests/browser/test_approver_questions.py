"""Questions on the approver page in a real browser: the form the page builds, a refusal
shown with its reason, and the answer that fits.

The approver page over the trip world (:mod:`web_world`) is served by uvicorn
in a thread on a loopback port, on the system clock; the agent's question is
asked over the gateway's JSON API; bob answers in chromium, signed in with
the passkey he registers from an invitation.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from hatp.clock import SystemClock, format_time
from hatp.gateway import AGENT_TEXT_LABEL
from hatp.store import open_store
from web_world import BOB, WebServed, open_web_served


class Live:
    """The approver page served by uvicorn in a thread, at ``origin``."""

    def __init__(self, folder: Path) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.origin = f"http://localhost:{self.sock.getsockname()[1]}"
        self.store = open_store(f"sqlite:///{folder / 'gateway.db'}")
        self.served: WebServed = open_web_served(
            folder / "trip", self.store, origin=self.origin, clock=SystemClock()
        )
        self.server = uvicorn.Server(
            uvicorn.Config(self.served.app, log_level="warning", access_log=False)
        )
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True
        )
        self.thread.start()
        until = time.monotonic() + 10
        while not self.server.started and time.monotonic() < until:
            time.sleep(0.02)  # another thread's start-up; no protocol time involved
        assert self.server.started, "the approver page did not start"

    def invite(self, human: str) -> str:
        return f"{self.origin}/approve/enrol#invite={self.served.enrolment.invite(human)}"

    def ask(self, question: dict[str, Any]) -> str:
        with httpx2.Client(base_url=self.origin) as http:
            asked = http.post("/gateway/questions", json={"question": question})
        assert asked.status_code == 200, asked.text
        return str(asked.json()["answer"]["askId"])

    def answer(self, ask_id: str) -> Any:
        with httpx2.Client(base_url=self.origin) as http:
            return http.get(f"/gateway/questions/{ask_id}").json()["answer"]

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
        self.served.world.close()
        self.store.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    served = Live(tmp_path)
    yield served
    served.close()


def _question(kind: str, **typed: Any) -> dict[str, Any]:
    return {
        "hatpVersion": "0.1",
        "kind": "question",
        "questionId": f"q-browser-{kind}",
        "asker": "agent://acme.com/travel-bot",
        "onBehalfOf": "human://acme.com/alice",
        "address": BOB,
        "type": kind,
        "prompt": {"summary": f"<b>Bob</b>, please answer this {kind} question"},
        "decideBy": format_time(SystemClock().now() + timedelta(minutes=30)),
        **typed,
    }


def _signed_in(page: Any, live: Live) -> None:
    page.goto(live.invite(BOB))
    page.get_by_role("button", name="Register a passkey").click()
    page.get_by_role("link", name="Sign in with it").click()
    page.get_by_role("button", name="Sign in with your passkey").click()
    page.locator("#signed-in-as").wait_for()


def test_a_form_answer_that_does_not_fit_is_refused_on_the_page_with_the_reason(
    live: Live, page: Any
) -> None:
    """[WEB-ANSWER] the page builds the form from the schema; an answer without the
    required field is refused with ``ANSWER_INVALID`` (``SCHEMA``) shown on the page and
    the question stays open; the completed form is taken."""
    schema = {
        "type": "object",
        "properties": {
            "nights": {"type": "integer", "title": "Nights"},
            "late": {"type": "boolean", "title": "Late check-in"},
            "room": {"enum": ["single", "double"], "title": "Room"},
        },
        "required": ["nights"],
        "additionalProperties": False,
    }
    _signed_in(page, live)
    ask_id = live.ask(_question("form", schema=schema))
    page.locator(".ask-item a").click()
    agent = page.locator("#agent-text")
    assert agent.locator(".label").inner_text() == AGENT_TEXT_LABEL
    assert "<b>Bob</b>, please answer this form question" in agent.inner_text()
    page.get_by_label("Room").select_option(label="double")
    page.get_by_role("button", name="Send answer").click()
    message = page.locator("#message")
    message.wait_for(state="visible")
    assert "ANSWER_INVALID (SCHEMA)" in message.inner_text()
    assert "Open: waiting for your response" in page.inner_text("#ask-state")
    page.get_by_label("Nights").fill("2")
    page.get_by_label("Late check-in").check()
    page.get_by_role("button", name="Send answer").click()
    page.locator("#ask-state", has_text=f"Answered by {BOB}").wait_for()
    assert live.answer(ask_id)["value"] == {"nights": 2, "late": True, "room": "double"}


def test_a_choice_is_answered_on_the_page(live: Live, page: Any) -> None:
    """[WEB-ANSWER] the options are the agent's, under their label; the one picked is
    the answer, exactly."""
    _signed_in(page, live)
    ask_id = live.ask(_question("choose", options=["window", "aisle"]))
    page.locator(".ask-item a").click()
    assert "Options (written by the agent)" in page.inner_text("#answer-form")
    page.get_by_role("button", name="Send answer").click()
    page.locator("#message").wait_for(state="visible")
    assert "ANSWER_INVALID" in page.inner_text("#message")
    page.get_by_label("aisle").check()
    page.get_by_role("button", name="Send answer").click()
    page.locator("#ask-state", has_text=f"Answered by {BOB}").wait_for()
    assert live.answer(ask_id)["value"] == "aisle"
