"""The participant package's public surface is exactly its ``__all__``."""

from __future__ import annotations

import hatp.participant


def test_exported_members_exist_and_nothing_else_is_public() -> None:
    names = set(hatp.participant.__all__)
    assert names == {
        "Committed",
        "NotUndoable",
        "Operation",
        "Participant",
        "ParticipantServer",
        "Prepared",
        "Quoted",
        "Refuse",
        "Relay",
        "Undo",
        "Undoing",
        "Work",
        "change",
        "no_preview",
        "observed",
        "preview",
        "render",
    }
    for name in names:
        assert getattr(hatp.participant, name).__module__.startswith("hatp.participant")
    public = {n for n in dir(hatp.participant) if not n.startswith("_")}
    assert public == names
