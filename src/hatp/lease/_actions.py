"""The typed mutations a system of record offers, and running one (docs/spec.md §23).

An :class:`Action` is a pure function of a resource's state and params; a
mutation names one, ``{action, params}``. :func:`parse_mutation` reads a
mutation strictly and :func:`run_action` runs one on a copy of a state, so
that what an action refuses, or leaves that is not a state, is
``MUTATION_INVALID`` and never a half-written resource.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hatp.errors import InvalidJson, MutationInvalid
from hatp.evidence import digest
from hatp.lease._model import Mutation
from hatp.lease._resources import State
from hatp.model import first_error

__all__ = ["Action", "parse_mutation", "run_action"]


@dataclass(frozen=True)
class Action:
    """A typed mutation a system of record offers.

    ``apply(state, params)`` returns the state the mutation leaves (a new
    object; it may raise ``ValueError`` to refuse the params). ``inverse(state,
    params)``, if given, returns the ``{action, params}`` that undoes it from
    the state it leaves, computed from the pre-image ``state``: what a
    ``COMPENSATING_ACTION`` lease stages.
    """

    name: str
    apply: Callable[[State, dict[str, Any]], State]
    inverse: Callable[[State, dict[str, Any]], dict[str, Any]] | None = None


def parse_mutation(mutation: Mapping[str, Any]) -> Mutation:
    """Read ``{action, params}`` strictly.

    Raises:
        MutationInvalid: it is not of that form (``data.where`` names the member).
    """
    try:
        return Mutation.model_validate(dict(mutation))
    except ValidationError as exc:
        where, problem = first_error(exc)
        raise MutationInvalid(
            f"a mutation is {{action, params}}: {where}: {problem}", where=where
        ) from None


def run_action(action: Action, state: State, params: Mapping[str, Any]) -> State:
    """Run ``action`` on a copy of ``state``; its refusal is ``MUTATION_INVALID``."""
    try:
        after = action.apply(copy.deepcopy(state), copy.deepcopy(dict(params)))
    except (ValueError, KeyError, TypeError) as exc:
        raise MutationInvalid(
            f"{action.name} refused its params: {exc}", action=action.name
        ) from None
    if not isinstance(after, dict):
        raise MutationInvalid(f"{action.name} left no state object", action=action.name)
    try:
        digest(after)
    except InvalidJson as exc:
        raise MutationInvalid(
            f"{action.name} left a state with no canonical form: {exc.message}",
            action=action.name,
        ) from None
    return after
