"""Free-form JSON as a person is shown it: escaped, bounded, and never refused.

A plan step's ``args`` are JSON whose every value is the agent's choice, and
which only the participant checks. :func:`shown_json` turns such a value
into the one text every channel shows (the terminal behind the bar, the
approver page in a box): JSON with sorted keys, on one line when it is
short, else indented by two spaces. Every character that is not printable
is written as a JSON escape (``\\u001b``), so no string can add, hide or
fake a line and a terminal escape sequence is shown as text
([GW-VIEW-ESCAPE]); markup stays text because the page escapes it again.

What is shown is bounded ([GW-VIEW-BOUNDED]): strings and keys past
:data:`MAX_STRING` characters are cut, objects and arrays nested past
:data:`MAX_DEPTH` levels stand as ``"{…}"`` or ``"[…]"``, members past
:data:`MAX_MEMBERS` in one object or array are left out, and the text is cut
after :data:`MAX_TEXT` characters. Whatever was left out is said in
:attr:`ShownJson.note`, in the gateway's words, so a person always knows
they see the value in part. Nothing about the value is refused: a view must
be shown whatever the agent wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_MEMBERS",
    "MAX_STRING",
    "MAX_TEXT",
    "ShownJson",
    "escape_line",
    "shown_json",
]

#: Objects and arrays nested deeper than this are shown as ``"{…}"`` or ``"[…]"``.
MAX_DEPTH = 8
#: Members of one object (or items of one array) shown; the rest are counted.
MAX_MEMBERS = 40
#: Characters of a string or key shown; the rest are counted.
MAX_STRING = 300
#: Characters of the whole text shown.
MAX_TEXT = 4000
#: The compact one-line form is used up to this many characters.
_ONE_LINE = 72


@dataclass(frozen=True, slots=True)
class ShownJson:
    """A JSON value as shown to a person.

    ``text`` is the JSON, escaped and bounded: every line printable, one line
    when short. ``note`` says what was left out ("Shown in part: …"), or is
    ``None`` when the value is shown whole.
    """

    text: str
    note: str | None = None

    @property
    def lines(self) -> tuple[str, ...]:
        """The text's lines (none of them holds a line break or another control character)."""
        return tuple(self.text.split("\n"))

    @property
    def whole(self) -> bool:
        """Whether nothing was left out."""
        return self.note is None


@dataclass(slots=True)
class _Cuts:
    """What pruning left out, counted for the note."""

    strings: int = 0
    deep: int = 0
    members: int = 0
    #: The limit the text was cut at, if it was.
    text: int | None = None

    def note(self) -> str | None:
        said = []
        if self.strings:
            said.append(f"{_count(self.strings, 'string')} cut after {MAX_STRING:,} characters")
        if self.deep:
            said.append(
                f"{_count(self.deep, 'object or array', 'objects or arrays')} nested deeper "
                f"than {MAX_DEPTH} levels shown as {{…}} or […]"
            )
        if self.members:
            said.append(
                f"{_count(self.members, 'member')} left out (at most {MAX_MEMBERS} "
                "of one object or array are shown)"
            )
        if self.text is not None:
            said.append(f"the text cut after {self.text:,} characters")
        return "Shown in part: " + "; ".join(said) + "." if said else None


def shown_json(value: Any, *, one_line: bool = False, max_text: int = MAX_TEXT) -> ShownJson:
    """Return ``value`` (parsed JSON) as a person is shown it: escaped and bounded.
    [GW-VIEW-ESCAPE] [GW-VIEW-BOUNDED]

    ``one_line`` keeps the compact form however long it is (a value within a
    line of text, as an effect preview's ``before`` and ``after``);
    ``max_text`` is where the text is cut.

    Never raises: a part that is not JSON (which the wire models keep out)
    is shown as its ``str``, cut and escaped like a string.
    """
    cuts = _Cuts()
    pruned = _prune(value, 0, cuts)
    # Pruned, the value holds only JSON types and string keys: dumping it cannot fail.
    compact = json.dumps(pruned, ensure_ascii=False, separators=(", ", ": "))
    text = (
        compact
        if one_line or len(compact) <= _ONE_LINE
        else json.dumps(pruned, ensure_ascii=False, indent=2)
    )
    lines = [escape_line(line) for line in text.split("\n")]
    shown, size = [], 0
    for line in lines:
        if size + len(line) > max_text:
            shown.append(line[: max(0, max_text - size)] + "…")
            cuts.text = max_text
            break
        shown.append(line)
        size += len(line) + 1
    return ShownJson("\n".join(shown), cuts.note())


def _prune(value: Any, depth: int, cuts: _Cuts) -> Any:
    """``value`` with long strings cut, deep containers elided and long ones shortened."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _cut(value, cuts)
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            cuts.deep += 1
            return "{…}"
        members: dict[str, Any] = {}
        keys = sorted(value, key=str)
        for key in keys[:MAX_MEMBERS]:
            shown_key = _cut(str(key), cuts)
            if shown_key in members:  # two long keys alike up to the cut
                cuts.members += 1
                continue
            members[shown_key] = _prune(value[key], depth + 1, cuts)
        if len(keys) > MAX_MEMBERS:
            left = len(keys) - MAX_MEMBERS
            cuts.members += left
            members["…"] = f"{_count(left, 'more member')} not shown"
        return members
    if isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            cuts.deep += 1
            return "[…]"
        items = [_prune(item, depth + 1, cuts) for item in value[:MAX_MEMBERS]]
        if len(value) > MAX_MEMBERS:
            left = len(value) - MAX_MEMBERS
            cuts.members += left
            items.append(f"… {_count(left, 'more item')} not shown")
        return items
    return _cut(str(value), cuts)


def _cut(text: str, cuts: _Cuts) -> str:
    if len(text) <= MAX_STRING:
        return text
    cuts.strings += 1
    return f"{text[:MAX_STRING]}… ({len(text) - MAX_STRING:,} more characters)"


def _count(number: int, one: str, many: str | None = None) -> str:
    return f"{number:,} {one if number == 1 else (many or one + 's')}"


def escape_line(line: str) -> str:
    """``line`` with every character that is not printable written as a JSON escape
    (``\\u000a``; past U+FFFF, its surrogate pair), so it stays one printable line.
    [GW-VIEW-ESCAPE]"""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else _json_escape(c) for c in line)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes a character past the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
