"""What a write plan's approver is shown: its exact preview, rendered as the gateway renders
a step's, under hatp's own label (not a participant's signature) [WRITE-PREVIEW].

The preview itself is the one the write participant signs at prepare
(test_participant.py); here, how it reads: the certainty in the gateway's
words, the summary and each change behind the bar, every value escaped and
bounded, and "cannot say" for a plan whose changes do not fit a preview.
"""

from __future__ import annotations

from hatp.gateway import STEP_PREVIEW_LABEL, WRITE_PREVIEW_LABEL, write_preview_lines
from hatp.model import Certainty
from hatp.participant import change, preview
from hatp.store import Store
from hatp.writes import Writes
from writes.executor_world import ADJUST, propose
from writes.inventory import stock

BAR = "  | "
EXACT = "Certainty: exact (will do exactly this)"
CANNOT_SAY = "Certainty: none (cannot say what it will change)"


def _outside_the_bar(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith(BAR)]


def test_an_exact_preview_shows_each_change_under_the_write_label_WRITE_PREVIEW(
    writes: Writes, store: Store
) -> None:
    proposal = propose(writes, store, corrections=[ADJUST])
    assert write_preview_lines(proposal.preview) == [
        WRITE_PREVIEW_LABEL,
        EXACT,
        BAR + "update inventory/SKU-1: on_hand 10 → 15; update inventory/SKU-1: version 1 → 2",
        BAR + "- inventory/SKU-1: update, on_hand 10 → 15",
        BAR + "- inventory/SKU-1: update, version 1 → 2",
    ]


def test_the_write_label_is_hatps_words_not_a_participants_signature() -> None:
    assert WRITE_PREVIEW_LABEL != STEP_PREVIEW_LABEL
    assert "signed" not in WRITE_PREVIEW_LABEL
    assert "computed by hatp" in WRITE_PREVIEW_LABEL


def test_a_newline_in_a_live_value_adds_no_line_outside_the_bar_WRITE_PREVIEW(
    writes: Writes, store: Store
) -> None:
    """A unit a clerk typed with a newline and a forged certainty stays one escaped value."""
    stock(store, {"SKU-3": (4, "x\nCertainty: ok")})
    proposal = propose(writes, store, corrections=[("set_unit", {"sku": "SKU-3", "unit": "kg"})])
    lines = write_preview_lines(proposal.preview)
    assert _outside_the_bar(lines) == [WRITE_PREVIEW_LABEL, EXACT]
    assert BAR + '- inventory/SKU-3: update, unit "x\\nCertainty: ok" → "kg"' in lines
    assert all(line.isprintable() for line in lines)


def test_an_over_long_value_is_shown_in_part_with_a_note() -> None:
    """The demo's columns are short: a preview with a long value, as a wide column gives."""
    long = preview(
        Certainty.EXACT,
        [change("inventory/SKU-1", "update", field="unit", before="each", after="y" * 1_000)],
    )
    lines = write_preview_lines(long)
    (shown,) = [line for line in lines if line.startswith(BAR + "- ")]
    assert len(shown) < 300
    assert shown.startswith(BAR + '- inventory/SKU-1: update, unit "each" → "yyy')
    assert lines[-1].startswith("Shown in part: 1 value shown in part")
    assert _outside_the_bar(lines) == [WRITE_PREVIEW_LABEL, EXACT, lines[-1]]


def test_a_plan_whose_changes_do_not_fit_a_preview_is_shown_as_cannot_say_WRITE_PREVIEW(
    writes: Writes, store: Store
) -> None:
    stock(store, {f"SKU-{n}": (1, "each") for n in range(100, 170)})
    adjust = [
        ("adjust_stock", {"sku": f"SKU-{n}", "delta": 5, "reason": "recount"})
        for n in range(100, 170)
    ]
    proposal = propose(writes, store, corrections=adjust)
    assert proposal.preview is None
    lines = write_preview_lines(proposal.preview)
    assert lines[:2] == [WRITE_PREVIEW_LABEL, CANNOT_SAY]
    assert len(lines) == 3  # hatp's summary only: no change is listed, none made up
    assert lines[2].startswith(BAR + "hatp cannot list this plan's changes: more than 64 records")
