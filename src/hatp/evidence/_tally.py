"""The verifier's tallies: which rules ran, which findings each produced, and which
signatures were checked, where, when and under which key."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from hatp import _checks
from hatp.clock import format_time
from hatp.errors import HatpError, SignatureInvalid
from hatp.evidence._keys import KeyPeriod, Keyring
from hatp.evidence._signing import Verified, verify
from hatp.model import Finding, Result, SignatureUse
from hatp.model.findings import SIGNATURE_VALID

#: The report's ``signatures``, validated as one list.
_USES = TypeAdapter(list[SignatureUse])


class Tally:
    """Collects failures per rule; a rule with no failures and no run is absent.

    A failure is recorded only while its rule is switched on
    (:func:`hatp._checks.is_on`), so the switch-off test can show that this
    rule, and nothing else, is what fails a planted violation.
    """

    def __init__(self, rules: Mapping[str, str]) -> None:
        self._rules = dict(rules)
        self._failures: dict[str, list[Finding]] = {rule: [] for rule in rules}
        self._ran: set[str] = set()
        self._absent: dict[str, str] = {}

    def ran(self, rule: str) -> None:
        """Record that ``rule`` ran (a pass unless it also failed)."""
        self._ran.add(rule)

    def fail(self, rule: str, detail: str, event: int | None = None) -> None:
        """Record a failure of ``rule`` at ``event`` (a position), if the rule is on."""
        self._ran.add(rule)
        if _checks.is_on(rule):
            self._failures[rule].append(
                Finding(rule=rule, result=Result.FAIL, detail=detail, event=event)
            )

    def absent(self, rule: str, detail: str) -> None:
        """Record that ``rule`` could not run, and why (reported ``absent``, never a pass)."""
        self._absent[rule] = detail

    def expect(self, rule: str, holds: bool, event: int | None, detail: Callable[[], str]) -> None:
        """Record that ``rule`` ran, failing with ``detail()`` unless it ``holds``."""
        if holds:
            self._ran.add(rule)
        else:
            self.fail(rule, detail(), event)

    def findings(self, passes: Mapping[str, str]) -> list[Finding]:
        """Return one finding per passing or absent rule, every failure of the others."""
        out: list[Finding] = []
        for rule, meaning in self._rules.items():
            if self._failures[rule]:
                out.extend(self._failures[rule])
            elif rule in self._absent:
                out.append(Finding(rule=rule, result=Result.ABSENT, detail=self._absent[rule]))
            elif rule in self._ran:
                out.append(Finding(rule=rule, result=Result.PASS, detail=passes.get(rule, meaning)))
            else:
                out.append(
                    Finding(rule=rule, result=Result.ABSENT, detail=f"not checked: {meaning}")
                )
        return out


@dataclass(frozen=True, slots=True)
class Place:
    """Where a signed object sits in a record, and the time of the event that carries
    it: what its signature is checked at (docs/spec.md [VER-PERIOD])."""

    #: The event's position; ``None`` for an object checked on its own.
    event: int | None = None
    #: The object's path in its event, e.g. ``body.approval``; empty for the event itself.
    path: str = ""
    #: The event's time; ``None`` when it cannot be read (or there is no event).
    at: datetime | None = None

    def member(self, name: str) -> Place:
        """The place of the object at member ``name`` of this one (``votes[0]``, say)."""
        return Place(self.event, f"{self.path}.{name}" if self.path else name, self.at)


#: What :class:`Signatures` keeps of one check until the report is made:
#: event, path, time, time as text (if the caller had it), kid, issuer, period, status.
_Use = tuple[
    int | None, str, datetime | None, str | None, str | None, str | None, KeyPeriod | None, str
]


class Signatures:
    """Every signature a verification checks, once each: where, at what time, under
    which key, and for a key with a period whether the signature fell inside it.

    :meth:`verify` is :func:`~hatp.evidence.verify` at the time of the place, noting
    the check; :meth:`uses` is the report's ``signatures`` ([VER-PERIOD]).
    """

    __slots__ = ("_uses",)

    def __init__(self) -> None:
        self._uses: dict[tuple[int | None, str], _Use] = {}

    def verify(
        self,
        doc: Mapping[str, Any],
        keyring: Keyring,
        place: Place,
        time: str | None = None,
    ) -> Verified:
        """Check ``doc``'s signature at ``place.at``, note it, and return who signed it.

        ``time`` is ``place.at`` as a wire time, when the caller has it (it is written
        otherwise). A place checked before is noted once, as first checked.

        Raises:
            HatpError: as :func:`~hatp.evidence.verify` raises, after noting the reason.
        """
        try:
            signer = verify(doc, keyring, at=place.at)
        except HatpError as exc:
            self._note_refusal(doc, keyring, place, time, exc)
            raise
        key = (place.event, place.path)
        if key not in self._uses:
            period = keyring.period(signer.kid)
            self._uses[key] = (
                place.event,
                place.path,
                place.at,
                time,
                signer.kid,
                signer.issuer,
                period,
                SIGNATURE_VALID,
            )
        return signer

    def _note_refusal(
        self,
        doc: Mapping[str, Any],
        keyring: Keyring,
        place: Place,
        time: str | None,
        exc: HatpError,
    ) -> None:
        key = (place.event, place.path)
        if key in self._uses:
            return
        signature = doc.get("signature") if isinstance(doc, Mapping) else None
        named = signature.get("kid") if isinstance(signature, dict) else None
        kid = named if isinstance(named, str) else None
        issuer = None if kid is None else _issuer(keyring, kid, exc)
        period = None if kid is None else keyring.period(kid)
        reason = str(exc.data.get("reason", exc.code))
        self._uses[key] = (place.event, place.path, place.at, time, kid, issuer, period, reason)

    def uses(self) -> list[SignatureUse]:
        """Every signature noted, in record order (by event; within one, as checked)."""
        times: dict[datetime, str] = {}
        periods: dict[KeyPeriod, dict[str, Any]] = {}
        noted = sorted(self._uses.values(), key=_record_order)
        # One validation of the whole list, in pydantic's core: a record holds thousands
        # of signatures, and building each model on its own costs more than checking it.
        return _USES.validate_python([_use(entry, times, periods) for entry in noted])


def _record_order(entry: _Use) -> int:
    event = entry[0]
    return -1 if event is None else event


def _issuer(keyring: Keyring, kid: str, exc: HatpError) -> str | None:
    """Who vouches for ``kid`` in ``keyring``, for a signature refused with ``exc``."""
    if kid not in keyring:
        return None
    try:
        return keyring.resolve(kid)[1]
    except SignatureInvalid as untrusted:
        found = untrusted.data.get("issuer", exc.data.get("issuer"))
        return found if isinstance(found, str) else None


def _use(
    entry: _Use, times: dict[datetime, str], periods: dict[KeyPeriod, dict[str, Any]]
) -> dict[str, Any]:
    # A record may hold many thousands of signatures by a handful of keys: each
    # time and period is written once.
    event, path, at, time, kid, issuer, period, status = entry
    if at is not None and time is None:
        time = times.get(at)
        if time is None:
            time = times[at] = format_time(at)
    where = path if event is None else f"event {event} {path}" if path else f"event {event}"
    if period is None:
        return {"event": event, "where": where, "kid": kid, "issuer": issuer, "at": time}
    members = periods.get(period)
    if members is None:
        members = periods[period] = _period_members(period)
    return {
        "event": event,
        "where": where,
        "kid": kid,
        "issuer": issuer,
        "at": time,
        "status": status,
        **members,
    }


def _period_members(period: KeyPeriod) -> dict[str, Any]:
    """A key's period as :class:`~hatp.model.SignatureUse` members."""
    return {
        "role": period.role,
        "organisation": period.organisation,
        "set_version": period.set_version,
        "not_before": format_time(period.not_before),
        "not_after": None if period.not_after is None else format_time(period.not_after),
        "revoked_at": None if period.revoked_at is None else format_time(period.revoked_at),
    }
