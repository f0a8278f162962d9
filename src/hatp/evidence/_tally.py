"""The verifier's tally: which rules ran, and which findings each produced."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hatp import _checks
from hatp.model import Finding, Result


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
