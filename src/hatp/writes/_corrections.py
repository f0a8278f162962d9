"""Correction types and the allowlist (:class:`Registry`).

A correction type is code the operator wrote and reviewed, never text from a
plan: an agent's plan only names a type and gives its params. Each type says
which records its params touch (:meth:`Correction.records`), what they hold
afterwards (:meth:`Correction.expect`, pure, so the postcondition of a plan
can be worked out before anything is written), and how to make it so
(:meth:`Correction.apply`, SQLAlchemy Core against the allowlisted tables);
optionally how to undo it (:meth:`Correction.inverse`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel

from hatp.writes._records import RecordName, RecordSet

__all__ = ["Correction", "Registry"]

P = TypeVar("P", bound=BaseModel)


class Correction(ABC, Generic[P]):
    """One type of correction on the allowlist.

    Subclasses set ``name`` (the ``type`` a plan names) and ``params`` (a
    pydantic model; make it strict with ``extra="forbid"``: a plan's params
    are validated against it as they are), and implement :meth:`records`,
    :meth:`expect` and :meth:`apply`; :meth:`size` is what the policy's
    ``allow_up_to`` bounds (1 unless overridden).
    """

    name: str
    params: type[P]

    @abstractmethod
    def records(self, params: P) -> list[RecordName]:
        """The names of the records these params touch (``"<set>/<key>"``)."""

    @abstractmethod
    def expect(
        self, params: P, before: Mapping[RecordName, dict[str, Any] | None]
    ) -> dict[RecordName, dict[str, Any] | None]:
        """The state of the touched records afterwards, given their state ``before``.

        Pure: reads only its arguments. ``before`` holds every record
        :meth:`records` names (``None``: no row). Returns the touched
        records' columns afterwards (``None``: no row). Raises ``ValueError``
        when the correction cannot be made to that state (e.g. stock would go
        below zero).
        """

    @abstractmethod
    def apply(self, conn: sa.Connection, sets: Mapping[str, RecordSet], params: P) -> None:
        """Make the correction, inside the caller's transaction (``conn``).

        Writes only through the tables of ``sets``; the executor checks the
        result against :meth:`expect` before it commits.
        """

    def size(self, params: P) -> int | Decimal:
        """How big the correction is, for the policy's ``allow_up_to`` (default 1)."""
        return 1

    def inverse(
        self, params: P, before: Mapping[RecordName, dict[str, Any] | None]
    ) -> list[tuple[str, dict[str, Any]]] | None:
        """The corrections that undo this one: ``(type, params)`` pairs, applied in order.

        ``before`` is the state of the records :meth:`records` names just
        before this correction (as :meth:`expect` gets it). The pairs name
        types on the allowlist with JSON params, like a plan's corrections.
        ``None`` (the default): it cannot be undone, so a plan that makes it
        cannot be a compensate-tier participant (docs/spec.md §22).
        """
        return None


class Registry:
    """The allowlist: the record sets corrections may touch and the correction types.

    Raises:
        ValueError: two record sets or two correction types share a name, or a
            correction type has no ``name`` or ``params``.
    """

    def __init__(
        self, record_sets: Iterable[RecordSet], corrections: Iterable[Correction[Any]]
    ) -> None:
        self._sets: dict[str, RecordSet] = {}
        for record_set in record_sets:
            if record_set.name in self._sets:
                raise ValueError(f"two record sets are named {record_set.name}")
            self._sets[record_set.name] = record_set
        self._corrections: dict[str, Correction[Any]] = {}
        for correction in corrections:
            name = getattr(correction, "name", None)
            params = getattr(correction, "params", None)
            if not isinstance(name, str) or not name:
                raise ValueError(f"correction {type(correction).__name__} has no name")
            if not (isinstance(params, type) and issubclass(params, BaseModel)):
                raise ValueError(f"correction {name} has no params model")
            if name in self._corrections:
                raise ValueError(f"two correction types are named {name}")
            self._corrections[name] = correction

    @property
    def sets(self) -> Mapping[str, RecordSet]:
        """The record sets on the allowlist, by name."""
        return dict(self._sets)

    @property
    def types(self) -> tuple[str, ...]:
        """The names of the correction types on the allowlist, sorted."""
        return tuple(sorted(self._corrections))

    def correction(self, name: str) -> Correction[Any] | None:
        """The correction type named ``name``, or ``None`` if it is not on the allowlist."""
        return self._corrections.get(name)
