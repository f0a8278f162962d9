"""A proposed write plan's effect as its approver is shown it (§22 [WRITE-PREVIEW]).

:func:`write_preview_lines` renders a write plan's preview
(:attr:`hatp.writes.Proposal.preview`) exactly as the Human Gateway renders
a step's signed preview (:func:`preview_view`, :func:`preview_lines`):
the certainty in the gateway's words, the summary and each change on a line
of its own behind a bar, every string escaped and bounded, what was left out
said in a note. Its label, :data:`hatp.gateway.WRITE_PREVIEW_LABEL`, says
whose words they are: hatp's, computed from the plan's snapshot of the live
records, not a participant's signature. A proposal whose changes do not fit
a preview is shown as certainty ``none`` through the same path, never as a
made-up list.
"""

from __future__ import annotations

from hatp.gateway._preview_view import WRITE_PREVIEW_LABEL, preview_lines, preview_view
from hatp.model import Certainty, EffectPreview
from hatp.model.effects import MAX_CHANGES

__all__ = ["write_preview_lines"]

#: What sets the preview's own text (its summary and changes) apart from hatp's words.
_BAR = "  | "

#: What an approver is shown when a plan's changes do not fit a preview.
_CANNOT_LIST = EffectPreview(
    certainty=Certainty.NONE,
    summary=(
        f"hatp cannot list this plan's changes: more than {MAX_CHANGES} records, or a "
        "record name too long for a preview; read the plan's corrections"
    ),
    changes=[],
)


def write_preview_lines(preview: EffectPreview | None) -> list[str]:
    """The lines that show a write plan's effect (``preview``, a
    :attr:`~hatp.writes.Proposal.preview`) to its approver: the label, the certainty
    line, then the summary and one line per change behind a bar (``"  | "``), then what
    was left out, if anything; "cannot say" when it has no preview (``None``).

    Never raises: the preview's strings are escaped (one printable line each) and cut
    at the gateway's bounds.
    """
    shown = preview_view(preview or _CANNOT_LIST)
    return preview_lines(shown, _BAR, label=WRITE_PREVIEW_LABEL)
