"""The switchboard of protocol checks, for planted-violation tests only.

Every check that enforces a rule of ``docs/spec.md`` asks :func:`is_on` with
its requirement id before it refuses. In production every check is on and
nothing here changes that. The test suite's switch-off test turns one check
off at a time with :func:`unsafe_switched_off` and shows that exactly the
planted violations naming that check stop being refused: proof that the
check, and not something else, is what refuses them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_switched_off: set[str] = set()


def is_on(rule_id: str) -> bool:
    """Return whether the check for ``rule_id`` is enforced (always, outside tests)."""
    return rule_id not in _switched_off


@contextmanager
def unsafe_switched_off(*rule_ids: str) -> Iterator[None]:
    """Turn checks off inside the ``with`` block. Never use outside tests."""
    added = [r for r in rule_ids if r not in _switched_off]
    _switched_off.update(added)
    try:
        yield
    finally:
        _switched_off.difference_update(added)
