"""What each step will change, as the approver sees it: its participant's signed preview.

In holds-first mode the hold terms carry every step's effect preview; the view
shows each under its step, rendered from its structure, labelled as the
participant's, its certainty in words that cannot be confused, escaped and
bounded as the arguments are ([GW-VIEW-PREVIEW]).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import people
from gateway.people import World
from hatp.clock import format_time
from hatp.demo import trip_plan
from hatp.demo.trip import CARD
from hatp.errors import AskInvalid
from hatp.evidence import digest
from hatp.gateway import STEP_PREVIEW_LABEL, ApproverView, PreviewView, render_text
from hatp.gateway._preview_view import (
    CERTAINTY_WORDS,
    MAX_SHOWN_CHANGES,
    MAX_VALUE_TEXT,
    NO_CHANGES,
    preview_view,
)
from hatp.gateway._shown_json import MAX_TEXT
from hatp.gateway._view import approver_view
from hatp.model import Certainty, Change, EffectPreview, HoldTerms, parse_plan

UNDER_STEP = "     "
BEHIND_BAR = UNDER_STEP + "  | "
DECIDE_BY = datetime(2026, 12, 2, 10, 15, tzinfo=UTC)
TRAVELLER = "human://acme.com/alice"
CHARGE_SUMMARY = (
    "charge card corp-4242: payee (none) → Acme Travel 730.00 USD, plus a fee the bank "
    "sets at capture (at most 750.00 USD in all)"
)


def usd(value: str) -> dict[str, str]:
    return {"value": value, "currency": "USD"}


def change(resource: str, kind: str, **members: Any) -> dict[str, Any]:
    return {"resource": resource, "kind": kind, **members}


def seat_preview() -> dict[str, Any]:
    return {
        "certainty": "exact",
        "summary": f"ticket flight LH400 seat 14C: traveller (none) → {TRAVELLER} 420.00 USD",
        "changes": [
            change(
                "flight LH400 seat 14C",
                "ticket",
                field="traveller",
                before=None,
                after=TRAVELLER,
                amount=usd("420.00"),
            )
        ],
        "bound": None,
    }


def charge_preview(**changes: Any) -> dict[str, Any]:
    return {
        "certainty": "predicted",
        "summary": CHARGE_SUMMARY,
        "changes": [
            change(
                f"card {CARD}",
                "charge",
                field="payee",
                before=None,
                after="Acme Travel",
                amount=usd("730.00"),
            )
        ],
        "bound": usd("750.00"),
        **changes,
    }


def none_preview() -> dict[str, Any]:
    return {
        "certainty": "none",
        "summary": "add_event gives no preview of what it will change",
        "changes": [],
        "bound": None,
    }


def trip_terms(plan: dict[str, Any], previews: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "hold-terms",
        "planDigest": digest(parse_plan(plan).to_wire()),
        "holds": [],
        "approveBy": format_time(DECIDE_BY),
        "previews": previews,
    }


def trip_view(previews: dict[str, Any] | None = None, **options: Any) -> ApproverView:
    """The trip's finance view; with ``previews``, holds-first with those in its terms."""
    plan = trip_plan("trip-preview-1", decide_by=DECIDE_BY, **options)
    terms = None if previews is None else trip_terms(plan, previews)
    return approver_view(plan, "finance", terms=terms)


def preview_block(rendered: str, number: int) -> list[str]:
    """The lines of step ``number``'s preview: from its label to the step's end."""
    lines = rendered.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {number}. "))
    block: list[str] = []
    for line in lines[start + 1 :]:
        if not line.startswith(UNDER_STEP):
            break
        block.append(line)
    label = UNDER_STEP + STEP_PREVIEW_LABEL
    return block[block.index(label) :] if label in block else []


# --- what each certainty reads as -------------------------------------------------------


def test_exact_predicted_with_its_bound_and_none_each_read_in_their_own_words() -> None:
    """[GW-VIEW-PREVIEW] Each step's preview under it, as its participant signed it: the
    seat will do exactly this, the charge expects 730 USD and may differ up to 750 USD,
    the calendar cannot say; the room's preview is not in the terms: nothing is shown."""
    view = trip_view(
        {"seat": seat_preview(), "charge": charge_preview(), "calendar": none_preview()}
    )
    seat, room, calendar, charge = view.steps
    assert seat.preview == PreviewView(
        Certainty.EXACT,
        f"ticket flight LH400 seat 14C: traveller (none) → {TRAVELLER} 420.00 USD",
        (f'flight LH400 seat 14C: ticket, traveller null → "{TRAVELLER}", 420 USD',),
    )
    assert room.preview is None
    assert calendar.preview == PreviewView(
        Certainty.NONE, "add_event gives no preview of what it will change", ()
    )
    assert charge.preview == PreviewView(
        Certainty.PREDICTED,
        CHARGE_SUMMARY,
        (f'card {CARD}: charge, payee null → "Acme Travel", 730 USD',),
        bound="750 USD",
    )
    rendered = render_text(view)
    assert preview_block(rendered, 1) == [
        UNDER_STEP + STEP_PREVIEW_LABEL,
        UNDER_STEP + "Certainty: exact (will do exactly this)",
        BEHIND_BAR + seat.preview.summary,
        BEHIND_BAR + f'- flight LH400 seat 14C: ticket, traveller null → "{TRAVELLER}", 420 USD',
    ]
    assert preview_block(rendered, 2) == []
    assert preview_block(rendered, 3) == [
        UNDER_STEP + STEP_PREVIEW_LABEL,
        UNDER_STEP + "Certainty: none (cannot say what it will change)",
        BEHIND_BAR + "add_event gives no preview of what it will change",
    ]
    assert preview_block(rendered, 4) == [
        UNDER_STEP + STEP_PREVIEW_LABEL,
        UNDER_STEP + "Certainty: predicted (expects, may differ; at most 750 USD)",
        BEHIND_BAR + CHARGE_SUMMARY,
        BEHIND_BAR + f'- card {CARD}: charge, payee null → "Acme Travel", 730 USD',
    ]


def test_the_three_certainties_read_in_the_words_the_spec_gives_them() -> None:
    """[GW-VIEW-PREVIEW]"""
    assert CERTAINTY_WORDS == {
        Certainty.EXACT: "will do exactly this",
        Certainty.PREDICTED: "expects, may differ",
        Certainty.NONE: "cannot say what it will change",
    }


def test_a_predicted_preview_without_a_bound_says_no_at_most() -> None:
    """[GW-VIEW-PREVIEW]"""
    view = trip_view({"charge": charge_preview(bound=None)})
    assert view.steps[3].preview is not None
    assert view.steps[3].preview.certainty_text == "predicted (expects, may differ)"
    certainty = preview_block(render_text(view), 4)[1]
    assert certainty == UNDER_STEP + "Certainty: predicted (expects, may differ)"


def test_a_bound_on_a_preview_that_is_not_predicted_is_not_shown() -> None:
    """[GW-VIEW-PREVIEW] A bound means something only to a predicted preview (§13): an
    exact one that carries one still reads 'will do exactly this', with no 'at most'."""
    view = trip_view({"seat": {**seat_preview(), "bound": usd("999.00")}})
    assert view.steps[0].preview is not None
    assert view.steps[0].preview.bound is None
    assert "999" not in render_text(view)


def test_an_exact_preview_that_lists_no_change_says_so_in_the_gateways_words() -> None:
    """[GW-VIEW-PREVIEW]"""
    view = trip_view({"seat": {**seat_preview(), "summary": "", "changes": []}})
    assert preview_block(render_text(view), 1) == [
        UNDER_STEP + STEP_PREVIEW_LABEL,
        UNDER_STEP + "Certainty: exact (will do exactly this)",
        UNDER_STEP + NO_CHANGES,
    ]


def test_a_change_shows_its_field_before_and_after_as_json_and_when_it_takes_effect() -> None:
    """[GW-VIEW-PREVIEW] Structure, not prose: what, how, the field from before to after,
    the money moved, when."""
    at = "2026-12-14T13:00:00.000Z"
    shown = preview_view(
        EffectPreview.model_validate(
            {
                "certainty": "exact",
                "summary": "s",
                "changes": [
                    change("calendar alice", "create", field="event", after={"b": 1, "a": [2]}),
                    change("calendar alice", "update", field="version", before=0, after=1, at=at),
                    change("inbox", "send"),
                    change("fund", "move", amount=usd("1234.5")),
                ],
            }
        )
    )
    assert shown.changes == (
        'calendar alice: create, event null → {"a": [2], "b": 1}',
        f"calendar alice: update, version 0 → 1, at {at} (UTC)",
        "inbox: send",
        "fund: move, 1,234.50 USD",
    )


def test_no_terms_and_terms_without_previews_show_nothing_about_previews() -> None:
    """[GW-VIEW-PREVIEW] Parallel and approval-first asks have no terms; a preview is never
    made up for a step the terms say nothing about."""
    for view in (trip_view(), trip_view({})):
        assert [step.preview for step in view.steps] == [None] * 4
        text = render_text(view)
        assert STEP_PREVIEW_LABEL not in text and "Certainty" not in text


# --- escaped and bounded ----------------------------------------------------------------

HOSTILE = [
    "card\nYou approve spending:\n  1 USD",
    "card\x1b[2J\x1b[HCertainty: exact (will do exactly this)",
    "card\x9b2K\u202e\u2028",
    '<script>alert("x")</script><img src=x onerror=alert(1)>',
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_text_in_a_preview_stays_behind_the_bar_on_its_own_lines(hostile: str) -> None:
    """[GW-VIEW-PREVIEW] [GW-VIEW-ESCAPE] A newline, a terminal escape sequence, a bidi
    override or markup in the summary, a resource, a field and a value: every line
    printable, no line the participant's text reaches outside the bar, and the gateway's
    own lines (the certainty among them) exactly as with a benign preview."""
    hostile_change = change(
        hostile, "charge", field=hostile, before=hostile, after={hostile: hostile}
    )
    view = trip_view({"charge": charge_preview(summary=hostile, changes=[hostile_change])})
    rendered = render_text(view)
    lines = rendered.splitlines()
    assert all(line.isprintable() for line in lines)
    assert sum(line.startswith("You approve") for line in lines) == 1
    assert sum(line.startswith(UNDER_STEP + "Certainty:") for line in lines) == 1
    block = preview_block(rendered, 4)
    assert block[1] == UNDER_STEP + "Certainty: predicted (expects, may differ; at most 750 USD)"
    assert all(line.startswith(BEHIND_BAR) for line in block[2:])
    benign = render_text(trip_view({"charge": charge_preview()})).splitlines()
    # The same lines but what names the terms' digest (the terms differ).
    assert [
        line for line in lines if not line.startswith(BEHIND_BAR) and "sha256:" not in line
    ] == [line for line in benign if not line.startswith(BEHIND_BAR) and "sha256:" not in line]
    if "\x1b" in hostile:
        assert "\\u001b[2J" in rendered


@given(st.text(max_size=120), st.text(min_size=1, max_size=60))
def test_any_summary_and_resource_add_no_line_outside_the_bar(summary: str, resource: str) -> None:
    """[GW-VIEW-PREVIEW] [GW-VIEW-ESCAPE]"""
    view = trip_view(
        {"charge": charge_preview(summary=summary, changes=[change(resource, "charge")])}
    )
    block = preview_block(render_text(view), 4)
    assert all(line.isprintable() for line in block)
    assert block[:2] == [
        UNDER_STEP + STEP_PREVIEW_LABEL,
        UNDER_STEP + "Certainty: predicted (expects, may differ; at most 750 USD)",
    ]
    assert all(line.startswith(BEHIND_BAR) for line in block[2:])
    assert len(block) == (4 if summary else 3)


def test_a_huge_preview_is_shown_in_part_with_a_note() -> None:
    """[GW-VIEW-PREVIEW] [GW-VIEW-BOUNDED] 64 changes with very long values: at most 20
    changes (and 4,000 characters of them) shown, each value cut to one short line, and
    the note, outside the bar, says what was left out."""
    big = {"blob": "y" * 5000, "list": list(range(100))}
    many = [change(f"row {n}", "update", field="data", before=big, after=big) for n in range(64)]
    view = trip_view({"charge": charge_preview(changes=many)})
    shown = view.steps[3].preview
    assert shown is not None
    assert 0 < len(shown.changes) <= MAX_SHOWN_CHANGES
    assert sum(len(line) for line in shown.changes) <= MAX_TEXT
    assert all(len(line) < 2 * MAX_VALUE_TEXT + 60 for line in shown.changes)
    left = 64 - len(shown.changes)
    assert shown.note == (
        f"Shown in part: {2 * len(shown.changes)} values shown in part (at most "
        f"{MAX_VALUE_TEXT} characters of each); {left} more changes not shown (at most "
        f"{MAX_SHOWN_CHANGES} of one preview, {MAX_TEXT:,} characters of them)."
    )
    block = preview_block(render_text(view), 4)
    assert block[-1] == UNDER_STEP + shown.note
    assert all(line.startswith(BEHIND_BAR) for line in block[2:-1])


def test_texts_past_the_wires_limits_are_cut_even_in_a_preview_built_without_checks() -> None:
    """[GW-VIEW-BOUNDED] The wire caps a summary at 500 characters and a resource at 256;
    the view cuts them there itself, whatever object it is handed."""
    unchecked = EffectPreview.model_construct(
        certainty=Certainty.EXACT,
        summary="s" * 10_000,
        changes=[Change.model_construct(resource="r" * 10_000, kind="k" * 1000)],
        bound=None,
    )
    shown = preview_view(unchecked)
    assert shown.summary == "s" * 500 + "… (9,500 more characters)"
    assert shown.changes == (
        "r" * 256 + "… (9,744 more characters): " + "k" * 128 + "… (872 more characters)",
    )
    assert shown.note == "Shown in part: 3 texts cut at the preview's limits."


# --- through the gateway ----------------------------------------------------------------


def test_the_notice_of_a_holds_first_ask_carries_each_steps_preview(world: World) -> None:
    """[GW-VIEW-PREVIEW] [GW-TERMS] What the gateway stores and delivers: the view in the
    notice holds the preview the terms carry, the one the vote's termsDigest binds."""
    req = people.terms_request()
    terms = people.hold_terms(req, previews={"charge": charge_preview()})

    async def body(w: World) -> None:
        await w.gateway.ask(replace(req, terms=terms))
        (notice,) = w.inbox("alice")
        assert isinstance(notice.view, ApproverView)
        preview = notice.view.steps[0].preview
        assert preview is not None and preview.certainty is Certainty.PREDICTED
        assert notice.payload["termsDigest"] == digest(HoldTerms.model_validate(terms).to_wire())
        text = render_text(notice.view)
        assert "Certainty: predicted (expects, may differ; at most 750 USD)" in text

    people.run(world, body)


def test_an_ask_whose_terms_carry_a_preview_that_is_not_one_is_refused(world: World) -> None:
    """[GW-TERMS] A preview with an unknown certainty is not shown as something else: the
    ask is refused before anyone is asked."""
    req = people.terms_request()
    terms = people.hold_terms(req, previews={"charge": charge_preview(certainty="surely")})

    async def body(w: World) -> None:
        with pytest.raises(AskInvalid) as caught:
            await w.gateway.ask(replace(req, terms=terms))
        assert caught.value.data["reason"] == "TERMS_INVALID"
        assert caught.value.data["where"] == "/previews/charge/certainty"
        assert w.inbox("alice") == []

    people.run(world, body)
