"""The approver's view: from the plan and the gateway's own amounts, never the agent's words."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import people
from gateway.people import World, question_doc
from gateway.routes import branch, plan_doc
from hatp.demo import trip_plan
from hatp.demo.trip import CARD, FLIGHT
from hatp.errors import AskInvalid, PlanInvalid, QuestionInvalid, RequirementBelowTotal
from hatp.evidence import digest
from hatp.gateway._shown_json import MAX_DEPTH, MAX_STRING, MAX_TEXT
from hatp.gateway._view import (
    AGENT_TEXT_LABEL,
    STEP_ARGUMENTS_LABEL,
    ApproverView,
    approver_view,
    format_amount,
    question_view,
    render_question_text,
    render_text,
)
from hatp.model import Tier, parse_plan

CLAIM = "Total: 10 USD. Pre-approved by the CFO.\nYou approve spending:\n  10 USD"


def with_agent_text(doc: dict[str, Any], summary: str) -> dict[str, Any]:
    return {**doc, "agentText": {"summary": summary}}


def view_of(*branches: dict[str, Any], **plan: Any) -> ApproverView:
    return approver_view(plan_doc(*branches, **plan), "finance")


def after_label(rendered: str) -> list[str]:
    lines = rendered.splitlines()
    return lines[lines.index(AGENT_TEXT_LABEL) + 1 :]


def before_label(rendered: str) -> str:
    return rendered.split(AGENT_TEXT_LABEL)[0]


# --- amounts ----------------------------------------------------------------------------


def test_the_posts_1000_usd_with_2_percent_tolerance_reads_up_to_1020_usd() -> None:
    """[GW-VIEW] [GW-AMOUNT] The gateway's own numbers, with separators and the code after."""
    view = view_of(branch("charge", "1000"), tolerance="0.02")
    assert [a.text for a in view.amounts] == ["1,000 USD, up to 1,020 USD"]
    assert "\n  1,000 USD, up to 1,020 USD\n" in render_text(view)


def test_without_tolerance_the_amount_is_shown_once() -> None:
    """[GW-VIEW]"""
    view = view_of(branch("charge", "1000"))
    assert [a.text for a in view.amounts] == ["1,000 USD"]
    assert "up to" not in render_text(view)


def test_each_currency_is_shown_apart_and_each_payment_counted_once() -> None:
    """[GW-VIEW] [GW-AMOUNT]"""
    view = view_of(
        branch("seat", "420.00"),
        branch("room", "310.00"),
        branch("charge", "730.00", settles=("seat", "room")),
        branch("taxi", "40", currency="EUR"),
        tolerance="0.1",
    )
    assert [a.text for a in view.amounts] == [
        "40 EUR, up to 44 EUR",
        "730 USD, up to 803 USD",
    ]
    assert (
        "charge on mcp://charge.example, compensate (can be undone), 730 USD, settles seat, room"
        in (render_text(view))
    )


def test_a_plan_that_spends_nothing_says_so() -> None:
    """[GW-VIEW]"""
    rendered = render_text(view_of(branch("calendar", None)))
    assert "You approve spending: nothing (the plan spends no money)" in rendered
    assert "calendar: charge on mcp://calendar.example, compensate (can be undone), no amount" in (
        rendered
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("1020.00", "1,020 USD"),
        ("1234.5", "1,234.50 USD"),
        ("0.125", "0.125 USD"),
        ("0", "0 USD"),
        ("0.00", "0 USD"),
        ("25000", "25,000 USD"),
        ("1234567.891", "1,234,567.891 USD"),
        ("999999999999999999.000000000000000001", "999,999,999,999,999,999.000000000000000001 USD"),
    ],
)
def test_amounts_have_thousands_separators_and_keep_every_digit_that_matters(
    value: str, text: str
) -> None:
    """[GW-VIEW]"""
    assert format_amount(Decimal(value), "USD") == text


@given(st.decimals(min_value=0, max_value=Decimal("1e18"), places=18, allow_nan=False))
def test_a_formatted_amount_reads_back_as_the_same_number(value: Decimal) -> None:
    """[GW-VIEW] Nothing is rounded away on the way to the person."""
    number, currency = format_amount(value, "EUR").split(" ")
    assert currency == "EUR"
    assert Decimal(number.replace(",", "")) == value


# --- structure only ---------------------------------------------------------------------


def test_the_view_holds_the_plans_structured_members() -> None:
    """[GW-VIEW]"""
    doc = plan_doc(branch("charge", "1000"), tolerance="0.02")
    doc["branches"][0]["tier"] = "final"
    doc["approvals"][0]["requirement"]["passkey"] = True
    view = approver_view(doc, "finance")
    assert view.txn_id == "txn-gw-0001"
    assert view.plan_digest == digest(parse_plan(doc).to_wire())
    assert (view.initiator, view.on_behalf_of) == (
        "agent://acme.com/travel-bot",
        "human://acme.com/dana",
    )
    assert (view.group_id, view.action, view.passkey) == ("finance", "approve.spend", True)
    (step,) = view.steps
    assert (step.participant, step.operation, step.tier, step.amount) == (
        "mcp://charge.example",
        "charge",
        Tier.FINAL,
        "1,000 USD",
    )
    rendered = render_text(view)
    for needed in (
        "Approval asked: approve.spend",
        "group finance (human://acme.com/role/finance-approver), passkey required",
        "Proposed by agent://acme.com/travel-bot, acting for human://acme.com/dana",
        "final (cannot be undone)",
        "Decide by: 2026-12-02T10:15:00.000Z (UTC)",
        view.plan_digest,
    ):
        assert needed in rendered, needed
    assert AGENT_TEXT_LABEL not in rendered


def test_agent_text_claiming_another_amount_shows_only_in_the_labelled_part() -> None:
    """[GW-VIEW-AGENT-TEXT] The post: the agent's words never reach the gateway's lines."""
    doc = plan_doc(branch("charge", "1000"), tolerance="0.02")
    view = approver_view(with_agent_text(doc, CLAIM), "finance")
    assert view.agent_text == CLAIM
    for field in dataclasses.fields(view):
        if field.name != "agent_text":
            assert "10 USD" not in repr(getattr(view, field.name)), field.name
    rendered = render_text(view)
    assert "1,000 USD, up to 1,020 USD" in before_label(rendered)
    assert "10 USD" not in before_label(rendered).replace("1,0", "")
    assert after_label(rendered) == [
        "  | Total: 10 USD. Pre-approved by the CFO.",
        "  | You approve spending:",
        "  |   10 USD",
    ]
    assert before_label(rendered) == render_text(dataclasses.replace(view, agent_text=None)) + "\n"


@given(st.text(max_size=200))
def test_any_agent_text_stays_behind_the_bar_under_its_label(summary: str) -> None:
    """[GW-VIEW-AGENT-TEXT] [GW-VIEW-ESCAPE] No agent text adds, hides or changes a gateway line."""
    doc = plan_doc(branch("charge", "1000"), tolerance="0.02")
    view = approver_view(with_agent_text(doc, summary), "finance")
    rendered = render_text(view)
    assert before_label(rendered) == render_text(dataclasses.replace(view, agent_text=None)) + "\n"
    barred = after_label(rendered)
    assert len(barred) == summary.count("\n") + 1
    assert all(line.startswith("  | ") and line.isprintable() for line in barred)


@pytest.mark.parametrize(
    "participant",
    [
        "mcp://x.example\nYou approve spending:\n  1 USD",
        "mcp://x.example\x1b[2J\x1b[H",
        "mcp://x.example\u202e\u2028",
    ],
)
def test_a_string_from_the_plan_cannot_forge_a_line(participant: str) -> None:
    """[GW-VIEW-ESCAPE]"""
    doc = plan_doc(branch("charge", "1000"))
    doc["branches"][0]["participant"] = participant
    rendered = render_text(approver_view(doc, "finance"))
    plain = render_text(approver_view(plan_doc(branch("charge", "1000")), "finance"))
    assert rendered.count("\n") == plain.count("\n")
    assert all(line.isprintable() for line in rendered.splitlines())
    assert "mcp://x.example\\u" in rendered


@given(st.text(min_size=1, max_size=60))
def test_any_participant_name_renders_on_its_own_line(participant: str) -> None:
    """[GW-VIEW-ESCAPE]"""
    doc = plan_doc(branch("charge", "1000"))
    doc["branches"][0]["participant"] = participant
    lines = render_text(approver_view(doc, "finance")).splitlines()
    assert len(lines) == len(
        render_text(approver_view(plan_doc(branch("charge", "1000")), "finance")).splitlines()
    )
    assert all(line.isprintable() for line in lines)


# --- each step's arguments -------------------------------------------------------------

#: Where the lines under a step begin, and a line of its arguments behind the bar.
UNDER_STEP = "     "
ARGS_LINE = UNDER_STEP + "  | "
TRIP_DECIDE_BY = datetime(2026, 12, 2, 10, 15, tzinfo=UTC)


def trip_view(**options: Any) -> ApproverView:
    return approver_view(trip_plan("trip-view-1", decide_by=TRIP_DECIDE_BY, **options), "finance")


def step_block(rendered: str, number: int) -> list[str]:
    """The lines under step ``number``: its label, its arguments and any note."""
    lines = rendered.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {number}. "))
    block = []
    for line in lines[start + 1 :]:
        if not line.startswith(UNDER_STEP):
            break
        block.append(line)
    return block


def test_each_step_of_a_trip_carries_its_arguments_from_the_signed_plan() -> None:
    """[GW-VIEW-ARGS] The seat's flight and seat, the room's hotel, the charge's card and
    payee: the plan's structure, as the participant gets it."""
    plan = trip_plan("trip-view-1", decide_by=TRIP_DECIDE_BY, seat="22A")
    view = approver_view(plan, "finance")
    assert [step.args for step in view.steps] == [b["args"] for b in plan["branches"]]
    seat, room, _, charge = view.steps
    assert seat.args == {"flight": FLIGHT, "seat": "22A"}
    assert room.args == {"hotel": "midtown-lodge", "checkIn": "2026-12-14", "nights": 2}
    assert charge.args == {
        "card": CARD,
        "amount": {"value": "730.00", "currency": "USD"},
        "payee": "Acme Travel",
    }
    rendered = render_text(view)
    assert step_block(rendered, 1) == [
        UNDER_STEP + STEP_ARGUMENTS_LABEL,
        ARGS_LINE + '{"flight": "LH400", "seat": "22A"}',
    ]
    assert step_block(rendered, 4) == [
        UNDER_STEP + STEP_ARGUMENTS_LABEL,
        *(ARGS_LINE + line for line in charge.shown_args.lines),
    ]
    assert f'{ARGS_LINE}  "card": "{CARD}",' in step_block(rendered, 4)
    assert f'{ARGS_LINE}  "payee": "Acme Travel"' in step_block(rendered, 4)


def test_the_arguments_shown_are_the_plans_not_what_the_agent_says_they_are() -> None:
    """[GW-VIEW-ARGS] [GW-VIEW-AGENT-TEXT] The summary may claim another seat and card:
    the steps show the plan's; the claim stays in the agent's box."""
    plan = trip_plan("trip-view-1", decide_by=TRIP_DECIDE_BY)
    plan["agentText"]["summary"] = "Seat 1A in business, charged to card corp-9999."
    rendered = render_text(approver_view(plan, "finance"))
    steps = before_label(rendered)
    assert '"seat": "14C"' in steps and f'"card": "{CARD}"' in steps
    assert "1A" not in steps and "corp-9999" not in steps
    assert after_label(rendered) == ["  | Seat 1A in business, charged to card corp-9999."]


def test_a_step_without_arguments_says_so() -> None:
    """[GW-VIEW-ARGS]"""
    view = view_of(branch("charge", "1000"))
    assert view.steps[0].args == {}
    assert step_block(render_text(view), 1) == [UNDER_STEP + "no arguments"]


@pytest.mark.parametrize(
    "hostile",
    [
        "14C\nYou approve spending:\n  1 USD",
        "14C\x1b[2J\x1b[HYou approve spending: 1 USD",
        "14C\x9b2K\u202e\u2028",
        '<script>alert("x")</script><img src=x onerror=alert(1)>',
        "x" * 50_000,
    ],
)
def test_hostile_arguments_stay_behind_the_bar_on_their_own_lines(hostile: str) -> None:
    """[GW-VIEW-ARGS] [GW-VIEW-ESCAPE] [GW-VIEW-BOUNDED] Markup, newlines, terminal escape
    sequences and very long strings, in a key and in a value: every line printable, and
    every line they reach is behind the bar."""
    benign = trip_plan("trip-view-1", decide_by=TRIP_DECIDE_BY)
    plan = trip_plan("trip-view-1", decide_by=TRIP_DECIDE_BY)
    plan["branches"][0]["args"]["seat"] = hostile
    plan["branches"][0]["args"][hostile] = [hostile]
    rendered = render_text(approver_view(plan, "finance"))
    assert all(line.isprintable() for line in rendered.splitlines())
    assert sum(line.startswith("You approve") for line in rendered.splitlines()) == 1
    ours = [line for line in rendered.splitlines() if not line.startswith(ARGS_LINE)]
    theirs = [
        line
        for line in render_text(approver_view(benign, "finance")).splitlines()
        if not line.startswith(ARGS_LINE)
    ]
    # The same lines but the note of what was cut, and what names the plan's digest.
    note = [line for line in ours if line.startswith(UNDER_STEP + "Shown in part")]
    assert len(note) == (1 if len(hostile) > MAX_STRING else 0)
    assert [line for line in ours if line not in note and "sha256:" not in line] == [
        line for line in theirs if "sha256:" not in line
    ]


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=60), max_size=4))
def test_any_arguments_add_no_line_outside_the_bar(args: dict[str, str]) -> None:
    """[GW-VIEW-ARGS] [GW-VIEW-ESCAPE]"""
    doc = plan_doc(branch("charge", "1000"))
    doc["branches"][0]["args"] = {"k": "v"}
    plain = render_text(approver_view(doc, "finance")).splitlines()
    doc["branches"][0]["args"] = args
    rendered = render_text(approver_view(doc, "finance")).splitlines()
    assert all(line.isprintable() for line in rendered)
    behind = [line for line in rendered if line.startswith(ARGS_LINE)]
    outside = [line for line in rendered if not line.startswith(ARGS_LINE)]
    if args:
        assert [json.loads("\n".join(line[len(ARGS_LINE) :] for line in behind))] == [args]
        assert [line for line in outside if "sha256:" not in line] == [
            line for line in plain if not line.startswith(ARGS_LINE) and "sha256:" not in line
        ]
    else:
        assert behind == [] and UNDER_STEP + "no arguments" in outside


def test_huge_and_deeply_nested_arguments_are_shown_in_part_with_a_note() -> None:
    """[GW-VIEW-BOUNDED] As deep as a plan may nest, and far larger than anyone reads:
    shown cut, the note saying what was left out, the plan's args untouched."""
    deep: Any = "bottom"
    for _ in range(55):
        deep = {"next": deep}
    args = {"deep": deep, "blob": "y" * 200_000, "list": list(range(5000))}
    doc = plan_doc(branch("charge", "1000"))
    doc["branches"][0]["args"] = args
    view = approver_view(doc, "finance")
    assert view.steps[0].args == args
    block = step_block(render_text(view), 1)
    assert block[0] == UNDER_STEP + STEP_ARGUMENTS_LABEL
    assert block[-1] == UNDER_STEP + (
        f"Shown in part: 1 string cut after {MAX_STRING} characters; 1 object or array "
        f"nested deeper than {MAX_DEPTH} levels shown as {{…}} or […]; 4,960 members left out "
        "(at most 40 of one object or array are shown)."
    )
    assert all(line.startswith(ARGS_LINE) for line in block[1:-1])
    assert sum(len(line) for line in block) < MAX_TEXT + 3 * len(STEP_ARGUMENTS_LABEL)


def test_the_notice_a_person_is_sent_carries_each_steps_arguments(world: World) -> None:
    """[GW-VIEW-ARGS] What the gateway stores and delivers: the view in the notice holds
    the arguments of the plan it was asked about."""
    doc = people.plan_doc()
    doc["branches"][0]["args"] = {"card": CARD, "payee": "Acme Travel"}

    async def body(w: World) -> None:
        await w.gateway.ask(people.request(doc))
        (notice,) = w.inbox("alice")
        assert isinstance(notice.view, ApproverView)
        assert notice.view.steps[0].args == {"card": CARD, "payee": "Acme Travel"}
        assert f'"card": "{CARD}"' in render_text(notice.view)

    people.run(world, body)


# --- refusals ---------------------------------------------------------------------------


def test_a_group_the_plan_does_not_have_is_refused() -> None:
    with pytest.raises(AskInvalid) as caught:
        approver_view(plan_doc(branch("charge", "1000")), "legal")
    assert caught.value.data["reason"] == "UNKNOWN_GROUP"


def test_a_negative_amount_is_refused_before_it_is_shown() -> None:
    """[GW-NEGATIVE]"""
    with pytest.raises(PlanInvalid) as caught:
        approver_view(plan_doc(branch("charge", "25000"), branch("refund", "-24900")), "finance")
    assert caught.value.reason == "NEGATIVE_AMOUNT"


def test_a_group_declaring_less_than_the_plan_needs_is_refused() -> None:
    """[GW-BELOW-TOTAL]"""
    with pytest.raises(RequirementBelowTotal):
        view_of(branch("charge", "1000"), declared={"value": "10", "currency": "USD"})


# --- questions --------------------------------------------------------------------------


def question(kind: str, **members: Any) -> dict[str, Any]:
    typed: dict[str, Any] = {
        "choose": {"options": ["window", "aisle\nYou approve spending: 1 USD"]},
        "form": {"schema": {"type": "object", "required": ["name"]}},
        "text": {"maxLength": 2000},
    }[kind]
    prompt = {"summary": "Which seat?\nAnswer: choose option 1 (the gateway recommends it)"}
    return question_doc(kind, typed, **{"prompt": prompt, **members})


def test_a_questions_prompt_is_shown_labelled_as_the_agents() -> None:
    """[GW-VIEW-AGENT-TEXT]"""
    view = question_view(question("choose"))
    assert view.agent_text.startswith("Which seat?")
    rendered = render_question_text(view)
    lines = rendered.splitlines()
    assert lines[:3] == [
        "Question q-choose from agent://acme.com/travel-bot, acting for human://acme.com/dana",
        "Answer: choose one of 2 options",
        "Answer by: 2026-12-02T10:15:00.000Z (UTC)",
    ]
    assert after_label(rendered) == [
        "  | Which seat?",
        "  | Answer: choose option 1 (the gateway recommends it)",
        "Options (written by the agent):",
        "  1 | window",
        "  2 | aisle\\u000aYou approve spending: 1 USD",
    ]


def test_a_form_question_shows_its_schema_as_the_agents() -> None:
    """[GW-VIEW-AGENT-TEXT]"""
    rendered = render_question_text(question_view(question("form")))
    assert "Answer: fill a form (a JSON value that fits the schema below)" in rendered
    assert rendered.endswith(
        'Form schema (written by the agent):\n  | {\n  |   "required": [\n  |     "name"\n'
        '  |   ],\n  |   "type": "object"\n  | }\n'
    )


def test_a_text_question_shows_its_limit() -> None:
    """[GW-VIEW]"""
    assert "Answer: write a line of text, at most 2,000 characters" in render_question_text(
        question_view(question("text"))
    )
    assert question_view(question("text", maxLength=None)).max_length == 100_000


def test_an_invalid_question_has_no_view() -> None:
    """[Q-SHAPE]"""
    with pytest.raises(QuestionInvalid):
        question_view(question("text", options=["a", "b"]))


@given(st.text(max_size=200))
def test_any_prompt_stays_behind_the_bar(prompt: str) -> None:
    """[GW-VIEW-AGENT-TEXT] [GW-VIEW-ESCAPE]"""
    rendered = render_question_text(question_view(question("text", prompt={"summary": prompt})))
    barred = after_label(rendered)
    assert len(barred) == prompt.count("\n") + 1
    assert all(line.startswith("  | ") and line.isprintable() for line in barred)
