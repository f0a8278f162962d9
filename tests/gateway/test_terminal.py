"""The terminal channel: a person reads the view at a console and types their response.

The responder here stands where the gateway stands and checks what the
gateway checks on the way in: the vote is signed by the person's own key
and parses as a HumanVote; an answer fits its question (``check_answer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import timedelta
from typing import Any, Literal

import pytest

from gateway import people
from gateway.routes import GATEWAY_ID, GATEWAY_KEY, START, branch, plan_doc
from hatp.clock import ManualClock, format_time
from hatp.demo import trip_plan
from hatp.demo.trip import CARD, FLIGHT
from hatp.errors import HatpError, StoreUnavailable
from hatp.evidence import Keyring, SigningKey, digest, verify
from hatp.gateway import STEP_PREVIEW_LABEL, HumanGateway
from hatp.gateway._channels import Notice
from hatp.gateway._questions import check_answer, parse_question, question_digest
from hatp.gateway._terminal import DECLINE_COMMAND, TerminalChannel
from hatp.gateway._view import STEP_ARGUMENTS_LABEL, approver_view, question_view, render_text
from hatp.model import Answer, Approval, HumanVote, Question, parse_plan
from hatp.store import AskStore, Store

BOB = "human://acme.com/bob"
CAROL = "human://acme.com/carol"
KEYS = {
    BOB: SigningKey.from_seed(bytes([41]) * 32, f"{BOB}#key-1"),
    CAROL: SigningKey.from_seed(bytes([42]) * 32, f"{CAROL}#key-1"),
}
PLAN = plan_doc(branch("charge", "1000"), tolerance="0.02")


class Console(io.StringIO):
    """The screen: tests wait, with a bound, for a text to appear on it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def write(self, text: str) -> int:
        self.changed.set()
        return super().write(text)

    async def shows(self, text: str, times: int = 1) -> None:
        async with asyncio.timeout(5):
            while self.getvalue().count(text) < times:
                self.changed.clear()
                await self.changed.wait()


class Responder:
    """Where the gateway stands: takes what the channel hands over, checked as the gateway does."""

    def __init__(self, questions: Mapping[str, Question] | None = None) -> None:
        self.questions = dict(questions or {})
        self.votes: list[dict[str, Any]] = []
        self.answers: list[tuple[str, str, Any]] = []
        self.declines: list[tuple[str, str]] = []
        self.refusal: HatpError | None = None
        self.during_vote: Callable[[], Awaitable[None]] | None = None

    async def submit_vote(self, ask_id: str, vote: Mapping[str, Any]) -> None:
        if self.refusal is not None:
            raise self.refusal
        person = str(vote["human"])
        keyring = Keyring([(KEYS[person].public, person)], trusted_issuers=[person])
        assert verify(vote, keyring).issuer == person
        assert HumanVote.model_validate(vote).ask_id == ask_id
        if self.during_vote is not None:
            await self.during_vote()
        self.votes.append(dict(vote))

    async def submit_answer(self, ask_id: str, human: str, value: Any) -> None:
        check_answer(self.questions[ask_id], value)
        self.answers.append((ask_id, human, value))

    async def decline(self, ask_id: str, human: str) -> None:
        self.declines.append((ask_id, human))


def approval(
    ask_id: str = "ask-approval-01", human: str = BOB, plan_doc: Mapping[str, Any] = PLAN
) -> Notice:
    plan = parse_plan(plan_doc)
    return Notice(
        ask_id=ask_id,
        human=human,
        kind="approval",
        view=approver_view(plan, "finance"),
        payload={
            "askId": ask_id,
            "txnId": plan.txn_id,
            "planDigest": digest(plan.to_wire()),
            "groupId": "finance",
            "human": human,
        },
        decide_by=START + timedelta(minutes=75),
        respond_by=START + timedelta(minutes=15),
    )


def question_doc(kind: str, **members: Any) -> dict[str, Any]:
    typed: dict[str, Any] = {
        "choose": {"options": ["window", "aisle"]},
        "form": {"schema": {"type": "object", "required": ["name"]}},
        "text": {"maxLength": 20},
    }[kind]
    return people.question_doc(kind, typed, **{"address": BOB, **members})


def asked(kind: str, ask_id: str = "ask-question-01") -> tuple[Notice, Responder]:
    question = parse_question(question_doc(kind))
    notice = Notice(
        ask_id=ask_id,
        human=BOB,
        kind="question",
        view=question_view(question),
        payload={
            "askId": ask_id,
            "questionId": question.question_id,
            "questionDigest": question_digest(question),
        },
        decide_by=START + timedelta(minutes=75),
        respond_by=START + timedelta(minutes=15),
    )
    return notice, Responder({ask_id: question})


def converse(
    typed: str,
    *notices: Notice,
    responder: Responder | None = None,
    keys: Mapping[str, SigningKey] = KEYS,
    clock: ManualClock | None = None,
) -> tuple[Responder, str]:
    """Deliver ``notices`` to a terminal where the person types ``typed``; return what
    reached the gateway and what the screen shows."""
    took = responder or Responder()
    out = io.StringIO()

    async def run() -> None:
        channel = TerminalChannel(io.StringIO(typed), out, keys, clock or ManualClock(START))
        for notice in notices:
            await channel.deliver(notice, took)
        await channel.idle()

    asyncio.run(run())
    return took, out.getvalue()


# --- approvals --------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_the_person_sees_the_view_and_their_vote_is_signed_with_their_own_key(
    decision: Literal["approve", "reject"],
) -> None:
    """[GW-TERMINAL] [GW-VIEW]"""
    clock = ManualClock(START)
    clock.advance(90)
    took, screen = converse(f"{decision}\n", approval(), clock=clock)
    (vote,) = took.votes
    assert vote["decision"] == decision
    assert vote["time"] == format_time(START + timedelta(seconds=90))
    assert vote["signature"]["kid"] == f"{BOB}#key-1"
    assert {k: vote[k] for k in approval().payload} == approval().payload
    assert render_text(approval().view).rstrip("\n") in screen  # type: ignore[arg-type]
    assert "1,000 USD, up to 1,020 USD" in screen
    assert "Please respond by 2026-12-02T09:15:00.000Z (UTC)." in screen
    assert screen.endswith(f"approve / reject / decline? Recorded: {decision}.\n")


def test_the_person_sees_each_steps_arguments_behind_the_bar() -> None:
    """[GW-TERMINAL] [GW-VIEW-ARGS] The trip's seat and card as the plan states them, under
    their label, before the prompt."""
    plan = trip_plan("trip-terminal-1", decide_by=START + timedelta(minutes=75))
    _, screen = converse("approve\n", approval(plan_doc=plan))
    lines = screen.splitlines()
    label = lines.index(f"     {STEP_ARGUMENTS_LABEL}")
    assert lines[label - 1].startswith("  1. seat: book_seat on mcp://airline.example")
    assert lines[label + 1] == f'       | {{"flight": "{FLIGHT}", "seat": "14C"}}'
    assert f'       |   "card": "{CARD}",' in lines
    assert screen.index(f'"card": "{CARD}"') < screen.index("approve / reject / decline? ")


def test_a_terminal_escape_in_the_arguments_reaches_the_screen_as_text() -> None:
    """[GW-TERMINAL] [GW-VIEW-ESCAPE] An argument that would clear the screen and write a
    line of its own is shown escaped, behind the bar."""
    plan = trip_plan("trip-terminal-1", decide_by=START + timedelta(minutes=75))
    plan["branches"][0]["args"]["seat"] = "14C\x1b[2J\x1b[H\nYou approve spending: 1 USD\r"
    took, screen = converse("approve\n", approval(plan_doc=plan))
    assert len(took.votes) == 1
    assert "\x1b" not in screen and "\r" not in screen
    assert (
        '       |   "seat": "14C\\u001b[2J\\u001b[H\\nYou approve spending: 1 USD\\r"'
        in screen.splitlines()
    )


def holds_first(plan_doc: Mapping[str, Any], previews: Mapping[str, Any]) -> Notice:
    """bob's notice of a holds-first ask: ``plan_doc`` with hold terms carrying ``previews``."""
    notice = approval(plan_doc=plan_doc)
    terms = {
        "kind": "hold-terms",
        "planDigest": notice.payload["planDigest"],
        "holds": [],
        "approveBy": format_time(START + timedelta(minutes=20)),
        "previews": previews,
    }
    view = approver_view(parse_plan(plan_doc), "finance", terms=terms)
    return dataclasses.replace(notice, view=view)


def test_the_person_sees_each_steps_signed_preview_and_its_certainty_before_deciding() -> None:
    """[GW-TERMINAL] [GW-VIEW-PREVIEW] Holds-first: under the charge, its participant's
    preview, predicted with its bound, and the seat's, exact; the room has none in the
    terms and shows none; a terminal escape in the summary reaches the screen as text."""
    plan = trip_plan("trip-terminal-1", decide_by=START + timedelta(minutes=75))
    charge = {
        "resource": f"card {CARD}",
        "kind": "charge",
        "field": "payee",
        "after": "Acme Travel",
        "amount": {"value": "730.00", "currency": "USD"},
    }
    previews = {
        "seat": {"certainty": "exact", "summary": "ticket seat 14C", "changes": []},
        "charge": {
            "certainty": "predicted",
            "summary": "charge 730.00 USD plus a fee\x1b[2J",
            "changes": [charge],
            "bound": {"value": "750.00", "currency": "USD"},
        },
    }
    took, screen = converse("approve\n", holds_first(plan, previews))
    assert len(took.votes) == 1
    assert "\x1b" not in screen
    lines = screen.splitlines()
    labels = [n for n, line in enumerate(lines) if line == f"     {STEP_PREVIEW_LABEL}"]
    assert len(labels) == 2  # the seat's and the charge's, not the room's or the calendar's
    seat, charge_at = labels
    assert lines[seat + 1 : seat + 4] == [
        "     Certainty: exact (will do exactly this)",
        "       | ticket seat 14C",
        "     no changes listed",
    ]
    assert lines[charge_at + 1 : charge_at + 4] == [
        "     Certainty: predicted (expects, may differ; at most 750 USD)",
        "       | charge 730.00 USD plus a fee\\u001b[2J",
        f'       | - card {CARD}: charge, payee null → "Acme Travel", 730 USD',
    ]
    assert lines[charge_at - 1].startswith("       | ")  # the charge's arguments above it
    assert screen.index(STEP_PREVIEW_LABEL) < screen.index("approve / reject / decline? ")


def test_unreadable_input_is_asked_for_again() -> None:
    """[GW-TERMINAL]"""
    took, screen = converse("yes\n\nok sure\n  APPROVE \n", approval())
    assert [v["decision"] for v in took.votes] == ["approve"]
    assert screen.count("Type approve, reject or decline.") == 3


@pytest.mark.parametrize("typed", ["decline\n", f"{DECLINE_COMMAND}\n", "maybe\nDecline\n"])
def test_the_person_can_decline(typed: str) -> None:
    """[GW-TERMINAL]"""
    took, screen = converse(typed, approval())
    assert (took.votes, took.declines) == ([], [("ask-approval-01", BOB)])
    assert screen.endswith("Declined: the gateway will ask someone else.\n")


@pytest.mark.parametrize("typed", ["", "perhaps\n", "perhaps"])
def test_end_of_input_declines(typed: str) -> None:
    """[GW-TERMINAL] A closed console never leaves the ask hanging, nor guesses a vote."""
    took, screen = converse(typed, approval())
    assert (took.votes, took.declines) == ([], [("ask-approval-01", BOB)])
    assert "(end of input)" in screen


def test_a_person_with_no_key_here_cannot_vote_and_declines() -> None:
    """[GW-TERMINAL]"""
    took, screen = converse("approve\n", approval(), keys={CAROL: KEYS[CAROL]})
    assert (took.votes, took.declines) == ([], [("ask-approval-01", BOB)])
    assert f"No signing key for {BOB} is set up on this terminal." in screen


def test_a_vote_the_gateway_refuses_is_shown_and_not_asked_again() -> None:
    """[GW-TERMINAL]"""
    responder = Responder()
    responder.refusal = StoreUnavailable("the database is down; try again")
    took, screen = converse("approve\napprove\n", approval(), responder=responder)
    assert took.votes == []
    assert screen.endswith(
        "The gateway refused it: STORE_UNAVAILABLE: the database is down; try again\n"
    )
    assert screen.count("approve / reject / decline? ") == 1


def test_two_asks_are_put_to_the_console_one_after_the_other() -> None:
    """[GW-TERMINAL]"""
    took, screen = converse(
        "reject\napprove\n", approval("ask-approval-01", BOB), approval("ask-approval-02", CAROL)
    )
    assert [(v["askId"], v["human"], v["decision"]) for v in took.votes] == [
        ("ask-approval-01", BOB, "reject"),
        ("ask-approval-02", CAROL, "approve"),
    ]
    first, second = screen.split("=== For ")[1:]
    assert first.startswith(f"{BOB} (ask ask-approval-01)")
    assert first.endswith("Recorded: reject.\n")
    assert second.startswith(f"{CAROL} (ask ask-approval-02)")


def test_delivering_the_same_ask_again_does_not_ask_twice() -> None:
    """[GW-TERMINAL]"""
    took, screen = converse("approve\nreject\n", approval(), approval())
    assert [v["decision"] for v in took.votes] == ["approve"]
    assert screen.count("=== For ") == 1


# --- questions --------------------------------------------------------------------------


def test_a_choice_is_typed_as_an_option_number() -> None:
    """[GW-TERMINAL] [Q-CHOOSE]"""
    notice, responder = asked("choose")
    took, screen = converse("3\n0\nwindow\n-1\n2\n", notice, responder=responder)
    assert took.answers == [("ask-question-01", BOB, "aisle")]
    assert screen.count("Type a number from 1 to 2, or /decline.") == 4
    assert "  2 | aisle" in screen
    assert "option number (1-2) or /decline? " in screen


def test_a_form_is_typed_as_json_and_a_misfit_is_asked_for_again() -> None:
    """[GW-TERMINAL] [Q-FORM]"""
    notice, responder = asked("form")
    typed = 'name: Dana\n{"name": "Dana", "name": "Kim"}\n{"nom": "Dana"}\n{"name": "Dana"}\n'
    took, screen = converse(typed, notice, responder=responder)
    assert took.answers == [("ask-question-01", BOB, {"name": "Dana"})]
    assert screen.count("That is not JSON:") == 2
    assert "Not accepted: the answer at / does not fit the form: 'name' is a required property" in (
        screen
    )
    assert screen.endswith("Recorded your answer.\n")


def test_a_text_answer_is_the_line_and_an_empty_line_is_asked_for_again() -> None:
    """[GW-TERMINAL] [Q-TEXT]"""
    notice, responder = asked("text")
    took, screen = converse(
        "\r\n\nthis line is far too long\n  aisle please\r\n", notice, responder=responder
    )
    assert took.answers == [("ask-question-01", BOB, "  aisle please")]
    assert screen.count("Not accepted: the answer is empty") == 2
    assert "Not accepted: the answer has 25 characters; at most 20 are allowed" in screen


@pytest.mark.parametrize("kind", ["choose", "form", "text"])
def test_a_question_can_be_declined_and_end_of_input_declines_it(kind: str) -> None:
    """[GW-TERMINAL]"""
    notice, responder = asked(kind)
    took, _ = converse(f"{DECLINE_COMMAND}\n", notice, responder=responder)
    assert (took.answers, took.declines) == ([], [("ask-question-01", BOB)])
    notice, responder = asked(kind)
    took, _ = converse("", notice, responder=responder)
    assert (took.answers, took.declines) == ([], [("ask-question-01", BOB)])


def test_the_word_decline_is_a_text_answer_like_any_other() -> None:
    """[GW-TERMINAL] Only /decline declines a question, so any text can be answered."""
    notice, responder = asked("text")
    took, _ = converse("decline\n", notice, responder=responder)
    assert took.answers == [("ask-question-01", BOB, "decline")]


# --- withdrawal -------------------------------------------------------------------------


def _run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _run_closing(scenario: Callable[[], Coroutine[Any, Any, None]], write_end: int) -> None:
    """Run ``scenario``, closing the pipe's write end before the loop shuts down (which
    waits for reader threads), so a failing scenario fails instead of hanging."""

    async def closing() -> None:
        try:
            await scenario()
        finally:
            _close(write_end)

    asyncio.run(closing())


def test_an_ask_withdrawn_before_it_is_shown_is_never_shown() -> None:
    """[GW-TERMINAL]"""
    screen = Console()
    took = Responder()

    async def scenario() -> None:
        channel = TerminalChannel(io.StringIO("approve\n"), screen, KEYS, ManualClock(START))
        await channel.deliver(approval(), took)
        await channel.withdraw("ask-approval-01", BOB)
        await channel.idle()

    _run(scenario)
    assert (took.votes, took.declines, screen.getvalue()) == ([], [], "")


def test_a_line_typed_before_an_ask_was_withdrawn_never_answers_the_next_ask() -> None:
    """[GW-TERMINAL-FRESH] The read in flight for ask 1 returns "approve": it is thrown away,
    not taken as a vote on ask 2 (a different plan); ask 2 gets the next line."""
    screen = Console()
    took = Responder()
    read_end, write_end = os.pipe()

    async def scenario() -> None:
        with os.fdopen(read_end, "r") as console_in:
            channel = TerminalChannel(console_in, screen, KEYS, ManualClock(START))
            await channel.deliver(approval("ask-approval-01", BOB), took)
            await screen.shows("approve / reject / decline? ")
            await channel.withdraw("ask-approval-01", BOB)
            await channel.deliver(approval("ask-approval-02", BOB), took)
            await screen.shows("approve / reject / decline? ", times=2)
            os.write(write_end, b"approve\n")
            await screen.shows("was ignored")
            os.write(write_end, b"reject\n")
            await channel.idle()

    _run_closing(scenario, write_end)
    assert [(v["askId"], v["decision"]) for v in took.votes] == [("ask-approval-02", "reject")]
    shown = screen.getvalue()
    assert (
        f"Ask ask-approval-01 for {BOB} was withdrawn; nothing more is needed. "
        "(The next line you type is ignored.)"
    ) in shown
    assert "(A line typed for a withdrawn ask was ignored; please answer again.)" in shown


def test_end_of_input_during_a_withdrawn_read_declines_the_next_ask() -> None:
    """[GW-TERMINAL-FRESH] And waiting for the channel to go idle survives the withdrawal."""
    screen = Console()
    took = Responder()
    read_end, write_end = os.pipe()

    async def scenario() -> None:
        with os.fdopen(read_end, "r") as console_in:
            channel = TerminalChannel(console_in, screen, KEYS, ManualClock(START))
            await channel.deliver(approval("ask-approval-01", BOB), took)
            idle = asyncio.create_task(channel.idle())
            await screen.shows("approve / reject / decline? ")
            await channel.withdraw("ask-approval-01", BOB)
            await channel.deliver(approval("ask-approval-02", BOB), took)
            _close(write_end)
            async with asyncio.timeout(5):
                await idle
            await channel.idle()

    _run_closing(scenario, write_end)
    assert (took.votes, took.declines) == ([], [("ask-approval-02", BOB)])


def test_a_vote_on_its_way_to_the_gateway_is_not_cut_off_by_a_withdrawal() -> None:
    """[GW-TERMINAL] The gateway may withdraw the ask while taking the vote (it decided the
    group, from this very call or another task); the vote still completes."""
    screen = Console()
    took = Responder()
    entered, release = asyncio.Event(), asyncio.Event()
    channel: TerminalChannel

    async def in_the_gateway() -> None:
        await channel.withdraw("ask-approval-01", BOB)  # from inside the call: no self-cancel
        entered.set()
        await release.wait()

    async def scenario() -> None:
        nonlocal channel
        channel = TerminalChannel(io.StringIO("approve\n"), screen, KEYS, ManualClock(START))
        took.during_vote = in_the_gateway
        await channel.deliver(approval(), took)
        async with asyncio.timeout(5):
            await entered.wait()
        await channel.withdraw("ask-approval-01", BOB)  # from another task
        release.set()
        await channel.idle()

    _run(scenario)
    assert [v["decision"] for v in took.votes] == ["approve"]
    assert screen.getvalue().endswith("Recorded: approve.\n")
    assert "withdrawn" not in screen.getvalue()


def test_idle_reraises_what_a_conversation_raised() -> None:
    """[GW-TERMINAL]"""
    broken = dataclasses.replace(approval(), payload={"askId": "ask-approval-01"})
    with pytest.raises(ValueError, match="a vote payload names exactly"):
        converse("approve\n", broken)


def test_the_channel_type_is_terminal() -> None:
    channel = TerminalChannel(io.StringIO(), io.StringIO(), KEYS, ManualClock(START))
    assert channel.channel_type == "terminal"


def test_answer_invalid_from_the_gateway_reaches_the_person_with_its_reason() -> None:
    """[GW-TERMINAL] [Q-TEXT]"""
    notice, responder = asked("text")
    took, screen = converse("\x1b[2J\nfine\n", notice, responder=responder)
    assert took.answers == [("ask-question-01", BOB, "fine")]
    assert "Not accepted: character 0 is a control character (U+001B)" in screen


# --- with the gateway -------------------------------------------------------------------


def _gateway_world(
    store: Store, typed: str, out: io.StringIO
) -> tuple[HumanGateway, TerminalChannel]:
    """bob, a finance approver reached on the terminal, and a gateway on ``store``."""
    clock = ManualClock(START)
    found = people.people_directory(people.person_card("bob", channels=["terminal"]))
    terminal = TerminalChannel(
        io.StringIO(typed), out, {people.human("bob"): people.KEYS["bob"]}, clock
    )
    gateway = HumanGateway(
        GATEWAY_ID,
        GATEWAY_KEY,
        found,
        AskStore(store),
        {"terminal": terminal},
        clock,
        initiator_principals={people.AGENT: people.PRINCIPAL},
    )
    return gateway, terminal


def test_a_person_at_the_terminal_decides_a_gateway_ask(store: Store) -> None:
    """[GW-TERMINAL] The gateway asks bob on his terminal; his typed approve, signed with
    his key, decides the group, and the gateway's signed Approval carries it."""
    out = io.StringIO()
    gateway, terminal = _gateway_world(store, "maybe\napprove\n", out)

    async def scenario() -> dict[str, Any]:
        pending = await gateway.ask(people.request())
        await terminal.idle()
        return await gateway.poll(pending["askId"])

    approval = asyncio.run(scenario())
    parsed = Approval.model_validate(approval)
    assert (parsed.decision.value, parsed.approvers) == ("approve", [people.human("bob")])
    assert verify(approval, people.keyring()).issuer == GATEWAY_ID
    (vote,) = approval["votes"]
    assert vote["signature"]["kid"] == f"{people.human('bob')}#key-1"
    assert "1,000 USD" in out.getvalue()


def test_an_answer_typed_at_the_terminal_is_checked_then_signed_by_the_gateway(
    store: Store,
) -> None:
    """[GW-TERMINAL] [Q-TEXT] [Q-SIGNED]"""
    out = io.StringIO()
    gateway, terminal = _gateway_world(store, "\n\x1b[31mred\nan aisle seat\n", out)
    doc = question_doc("text", address=people.human("bob"))

    async def scenario() -> dict[str, Any]:
        pending = await gateway.ask_question(doc)
        await terminal.idle()
        return await gateway.poll_question(pending["askId"])

    answer = asyncio.run(scenario())
    assert verify(answer, people.keyring()).issuer == GATEWAY_ID
    parsed = Answer.model_validate(answer)
    assert (parsed.value, parsed.answered_by) == ("an aisle seat", people.human("bob"))
    assert parsed.question_digest == question_digest(doc)
    assert "Not accepted: the answer is empty" in out.getvalue()
    assert "Not accepted: character 0 is a control character (U+001B)" in out.getvalue()


def test_a_read_left_waiting_by_a_withdrawn_ask_does_not_keep_the_program_alive() -> None:
    """[GW-TERMINAL] The ask is withdrawn while the terminal waits for a line and nobody
    types: the program still ends (the read runs on a daemon thread, not the executor
    that ``asyncio.run`` waits for)."""
    screen = Console()
    took = Responder()
    read_end, write_end = os.pipe()
    console_in = os.fdopen(read_end, "r")

    async def scenario() -> None:
        channel = TerminalChannel(console_in, screen, KEYS, ManualClock(START))
        await channel.deliver(approval("ask-approval-01", BOB), took)
        await screen.shows("approve / reject / decline? ")
        await channel.withdraw("ask-approval-01", BOB)
        await channel.idle()

    try:
        # The program, on a thread of its own: it must end although the read still waits.
        program = threading.Thread(target=asyncio.run, args=(scenario(),), daemon=True)
        program.start()
        program.join(30)
        assert not program.is_alive(), "the program is kept alive by the waiting read"
        readers = [t for t in threading.enumerate() if t.name == "hatp-terminal-read"]
        assert readers and all(t.daemon and t.is_alive() for t in readers)
    finally:
        _close(write_end)  # ends the read
        for thread in threading.enumerate():
            if thread.name == "hatp-terminal-read":
                thread.join(5)
        console_in.close()
    assert (took.votes, took.declines) == ([], [])
