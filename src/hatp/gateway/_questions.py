"""Questions beyond approve/reject: parse one, check an answer fits it, sign the answer.

An agent may ask a person to choose one of a few options, fill a form (a
JSON Schema, draft 2020-12) or write a line of text. The gateway signs an
:class:`~hatp.model.Answer` bound to the question's digest only after
:func:`check_answer` found the answer fits: an answer that does not is
refused with ``ANSWER_INVALID`` and never signed ([Q-SIGNED]).

Form schemas are checked once, when the question arrives: a valid JSON
Schema, self-contained (every ``$ref`` a JSON Pointer into the schema
itself), so that checking an answer never fetches anything. ``format`` is
not asserted (it is an annotation in draft 2020-12). A ``pattern`` is an
agent's regular expression run on a person's answer, so it runs on RE2, in
time linear in the answer (``google-re2``; Python's backtracking ``re`` would
let ``^(a+)+$`` pin a CPU): it must be a pattern RE2 takes, and
``patternProperties`` (which jsonschema matches with ``re`` wherever it looks
for evaluated properties) is not taken in a form.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import unquote

import re2  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, validators  # type: ignore[import-untyped]
from jsonschema.exceptions import (  # type: ignore[import-untyped]
    SchemaError,
    ValidationError,
    best_match,
)
from pydantic import ValidationError as ModelError
from referencing.exceptions import Unresolvable

from hatp.clock import format_time
from hatp.errors import AddressInvalid, AnswerInvalid, InvalidJson, QuestionInvalid
from hatp.evidence import SigningKey, canonicalize, digest, sign
from hatp.model import Answer, Question, QuestionType, parse_address
from hatp.version import PROTOCOL_VERSION, require_supported

__all__ = [
    "MAX_TEXT_LENGTH",
    "check_answer",
    "parse_question",
    "question_digest",
    "sign_answer",
]

#: How long a text answer may be when the question sets no ``maxLength``: the
#: largest ``maxLength`` a question may set.
MAX_TEXT_LENGTH = 100_000
#: The only control characters a text answer may hold.
_ALLOWED_CONTROLS = frozenset("\n\t")
#: The 2020-12 meta-schema: the only ``$schema`` a form may name.
_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
#: Members whose values are data, not subschemas: a ``$ref`` inside them is not a reference.
_DATA_MEMBERS = frozenset({"const", "enum", "default", "examples"})
#: Keywords whose members are names, each naming a subschema.
_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
#: RE2 without its own logging: a refused pattern is the question's refusal, not a log line.
_RE2 = re2.Options()
_RE2.log_errors = False
#: Validation errors of the Question model and the reason each becomes.
_MODEL_REASONS = {"QUESTION_FIELDS": "FIELDS", "DUPLICATE": "DUPLICATE_OPTION"}


def parse_question(doc: Mapping[str, Any] | Question) -> Question:
    """Parse and check a question from its wire form; return it. [Q-SHAPE] [Q-SCHEMA]

    Raises:
        QuestionInvalid: ``data.reason`` is a key of
            :data:`hatp.errors.QUESTION_REASONS` and ``data.where`` a JSON
            Pointer into the question.
        VersionUnsupported: the question names a protocol version this build
            does not know.
    """
    if isinstance(doc, Question):
        doc = doc.to_wire()
    if not isinstance(doc, Mapping):
        raise QuestionInvalid("a question is a JSON object", reason="SHAPE", where="")
    require_supported(doc, "question")
    try:
        question = Question.model_validate(doc)
    except ModelError as exc:
        raise _question_error(exc) from None
    try:
        parse_address(question.address)
    except AddressInvalid as exc:
        raise QuestionInvalid(
            f"/address: {exc.message}", reason="ADDRESS", where="/address", detail=exc.reason
        ) from None
    if question.address.startswith("agent://"):
        raise QuestionInvalid(
            "/address: a question is answered by people; give a human:// address",
            reason="ADDRESS",
            where="/address",
        )
    if question.form_schema is not None:
        _check_schema(question.form_schema)
    return question


def _question_error(exc: ModelError) -> QuestionInvalid:
    error = exc.errors()[0]
    reason = _MODEL_REASONS.get(error["type"], "SHAPE")
    where = "" if reason != "SHAPE" else _pointer(error["loc"])
    if reason == "DUPLICATE_OPTION":
        where = "/options"
    return QuestionInvalid(f"{where or 'the question'}: {error['msg']}", reason=reason, where=where)


def _check_schema(schema: dict[str, Any]) -> None:
    declared = schema.get("$schema", _DRAFT_2020_12)
    if declared != _DRAFT_2020_12:
        raise QuestionInvalid(
            f"/schema/$schema: a form's schema is draft 2020-12 ({_DRAFT_2020_12}), "
            f"not {declared!r}",
            reason="SCHEMA",
            where="/schema/$schema",
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/schema" + _pointer(exc.absolute_path)
        raise QuestionInvalid(
            f"{where}: not a valid JSON Schema: {_short(exc.message)}",
            reason="SCHEMA",
            where=where,
        ) from None
    for where, member, value in _keywords(schema, "/schema"):
        if member in ("$ref", "$dynamicRef") and isinstance(value, str):
            if member != "$ref" or not _resolves(schema, value):
                raise QuestionInvalid(
                    f"{where}: {member} {_short(value)!r} is not a JSON Pointer into the "
                    "form's own schema ('#' or '#/…'); a form schema must be self-contained",
                    reason="REF",
                    where=where,
                )
        elif member == "patternProperties":
            raise QuestionInvalid(
                f"{where}: patternProperties is not taken in a form schema; name the "
                "form's fields in properties",
                reason="SCHEMA",
                where=where,
            )
        elif member == "pattern" and isinstance(value, str):
            try:
                _regex(value)
            except re2.error as exc:
                raise QuestionInvalid(
                    f"{where}: {_short(value)!r} is not a pattern RE2 takes ({_re2_error(exc)}); "
                    "answers are matched in linear time, so backreferences and lookaround "
                    "are not taken",
                    reason="SCHEMA",
                    where=where,
                ) from None


def _keywords(node: Any, where: str, *, names: bool = False) -> Iterator[tuple[str, str, Any]]:
    """Every keyword of a schema and its subschemas, with its place and value; data
    members (``const``, ``enum``…) are not schemas and are skipped, and the members of
    ``properties``, ``$defs`` … are names, each of a subschema."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}/{_escape(key)}"
            if names:
                yield from _keywords(value, here)
            elif key not in _DATA_MEMBERS:
                yield here, key, value
                yield from _keywords(value, here, names=key in _NAME_MAPS)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _keywords(item, f"{where}/{index}")


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (the same few patterns come with question after question).

    Raises:
        re2.error: RE2 does not take it.
    """
    return re2.compile(pattern, _RE2)


def _re2_error(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else exc
    return detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """The ``pattern`` keyword, matched by RE2 (jsonschema's own uses ``re``)."""
    if validator.is_type(instance, "string") and _regex(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: Draft 2020-12, with ``pattern`` on RE2: what answers to forms are checked with.
_FormValidator = validators.extend(Draft202012Validator, {"pattern": _pattern})


def _resolves(schema: dict[str, Any], ref: str) -> bool:
    # Only '#' and '#/…' pointers, resolved against the schema's root: an
    # anchor or a $dynamicRef would need the full resolution machinery,
    # which could then look outside the schema.
    if not (ref == "#" or ref.startswith("#/")):
        return False
    node: Any = schema
    for part in ref[2:].split("/") if ref != "#" else []:
        token = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return isinstance(node, dict | bool)


def question_digest(question: Mapping[str, Any] | Question) -> str:
    """Return the digest of the question's wire form: what an Answer is bound to. [Q-DIGEST]

    A wire document is parsed first, so it digests the same as its normal
    form (absent optional members written as ``null``).

    Raises:
        QuestionInvalid: the document is not a valid question.
    """
    return digest(parse_question(question).to_wire())


def check_answer(question: Question, value: Any) -> None:
    """Refuse an answer that does not fit the question; return ``None`` if it fits.

    ``choose``: one of the options, exactly ([Q-CHOOSE]). ``form``: a JSON
    value that validates against the schema ([Q-FORM]). ``text``: a string of
    1 to ``maxLength`` characters (Unicode code points; :data:`MAX_TEXT_LENGTH`
    when unset) with no control character but newline and tab ([Q-TEXT]).

    Raises:
        AnswerInvalid: ``data.reason`` is a key of :data:`hatp.errors.ANSWER_REASONS`;
            for a form, ``data.where`` is the JSON Pointer of the first member
            that fails the schema.
        QuestionInvalid: the question's schema refers to something that is
            not in it (a question from :func:`parse_question` never does).
    """
    checks = {
        QuestionType.CHOOSE: _check_choice,
        QuestionType.FORM: _check_form,
        QuestionType.TEXT: _check_text,
    }
    checks[question.type](question, value)


def _refuse(question: Question, reason: str, message: str, **data: Any) -> AnswerInvalid:
    return AnswerInvalid(message, reason=reason, question=question.question_id, **data)


def _check_choice(question: Question, value: Any) -> None:
    options: Sequence[str] = question.options or ()
    if not isinstance(value, str):
        raise _refuse(
            question, "WRONG_TYPE", f"choose one of the {len(options)} options, as a string"
        )
    if value not in options:
        raise _refuse(
            question,
            "NOT_AN_OPTION",
            f"{_short(value)!r} is not one of the {len(options)} options; "
            "answer with one of them exactly as written",
        )


def _check_form(question: Question, value: Any) -> None:
    _require_json(question, value)
    validator = _FormValidator(question.form_schema or {})
    try:
        error: ValidationError | None = best_match(validator.iter_errors(value))
    except Unresolvable as exc:
        raise QuestionInvalid(
            f"the question's schema cannot be resolved: {exc}", reason="REF", where="/schema"
        ) from None
    if error is not None:
        where = _pointer(error.absolute_path)
        raise _refuse(
            question,
            "SCHEMA",
            f"the answer at {where or '/'} does not fit the form: {_short(error.message)}",
            where=where,
        )


def _check_text(question: Question, value: Any) -> None:
    limit = question.max_length or MAX_TEXT_LENGTH
    if not isinstance(value, str):
        raise _refuse(question, "WRONG_TYPE", "a text answer is a string")
    if not value:
        raise _refuse(question, "EMPTY", "the answer is empty; write at least one character")
    if len(value) > limit:
        raise _refuse(
            question,
            "TOO_LONG",
            f"the answer has {len(value)} characters; at most {limit} are allowed",
            length=len(value),
            max_length=limit,
        )
    for index, char in enumerate(value):
        if unicodedata.category(char) == "Cc" and char not in _ALLOWED_CONTROLS:
            raise _refuse(
                question,
                "CONTROL_CHAR",
                f"character {index} is a control character (U+{ord(char):04X}); "
                "only newline and tab are allowed",
                index=index,
            )
    _require_json(question, value)


def _require_json(question: Question, value: Any) -> None:
    try:
        canonicalize(value)
    except InvalidJson as exc:
        raise _refuse(
            question, "NOT_JSON", f"the answer cannot be signed as JSON: {exc.message}"
        ) from None


def sign_answer(
    key: SigningKey,
    gateway_id: str,
    ask_id: str,
    question: Question,
    value: Any,
    answered_by: str,
    declined_by: Sequence[str],
    at: datetime,
) -> dict[str, Any]:
    """Check the answer fits, then return the gateway-signed :class:`~hatp.model.Answer`. [Q-SIGNED]

    The answer is bound to the question by :func:`question_digest`.

    Raises:
        AnswerInvalid: the answer does not fit the question (see
            :func:`check_answer`); nothing is signed.
        ValueError: ``ask_id`` or a person is not of the Answer form (a
            pydantic ``ValidationError``).
    """
    check_answer(question, value)
    body = {
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "answer",
        "askId": ask_id,
        "questionId": question.question_id,
        "questionDigest": question_digest(question),
        "type": question.type.value,
        "value": value,
        "answeredBy": answered_by,
        "declinedBy": list(declined_by),
        "gateway": gateway_id,
        "answeredAt": format_time(at),
    }
    signed = sign(body, key)
    Answer.model_validate(signed)
    return signed


def _pointer(path: Sequence[Any] | Iterator[Any]) -> str:
    return "".join(f"/{_escape(str(part))}" for part in path)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
