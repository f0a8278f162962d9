"""The participant SDK: how a tool server takes part in a HATP transaction.

A tool server writes one :class:`Operation` per operation it offers and
hands them to a :class:`ParticipantServer`, which keeps each branch's state
in the store, checks fences, plans, costs, leases and preconditions, and
signs every receipt. An operation says what its commit will change
(:func:`preview`, with a certainty) and what it changed (:func:`observed`),
each built from :func:`change` s. The coordinator talks to anything that is a
:class:`Participant`. An operation says how its commits can be taken back
(``inverse`` and :meth:`Operation.undo_terms`: :class:`Undo` or :class:`NotUndoable`);
an inverse operation sees the step it takes back in ``Work.undoing`` (:class:`Undoing`).
"""

from hatp.participant._effects import change, no_preview, observed, preview, render
from hatp.participant._operation import (
    Committed,
    NotUndoable,
    Operation,
    Prepared,
    Quoted,
    Refuse,
    Undo,
    Undoing,
    Work,
)
from hatp.participant._protocol import Participant
from hatp.participant._relay import Relay
from hatp.participant._server import ParticipantServer

__all__ = [
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
]
