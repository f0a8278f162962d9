"""Questions: parsed strictly, answers checked against them, and only fitting answers signed."""

from __future__ import annotations

import math
import unicodedata
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.people import question_doc
from hatp.errors import (
    ANSWER_REASONS,
    QUESTION_REASONS,
    AnswerInvalid,
    QuestionInvalid,
    VersionUnsupported,
    error_from_dict,
)
from hatp.evidence import Keyring, SigningKey, digest, verify
from hatp.gateway._questions import (
    MAX_TEXT_LENGTH,
    check_answer,
    parse_question,
    question_digest,
    sign_answer,
)
from hatp.model import Answer, Question

GATEWAY_ID = "https://gateway.acme.com"
GATEWAY_KEY = SigningKey.from_seed(bytes([31]) * 32, "acme-gateway-q")
ASK_ID = "ask-question-0001"
AT = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
SEATS = ["window", "aisle", "middle"]
TRAVELLERS = {
    "type": "object",
    "properties": {
        "passengers": {
            "type": "array",
            "items": {"$ref": "#/$defs/passenger"},
            "minItems": 1,
        },
        "meal/pref~x": {"enum": ["veg", "none"]},
    },
    "required": ["passengers"],
    "additionalProperties": False,
    "$defs": {
        "passenger": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "age": {"type": "integer", "minimum": 0},
            },
            "required": ["name", "age"],
        }
    },
}


def question(kind: str = "choose", **members: Any) -> dict[str, Any]:
    """A question's wire form; ``choose`` of seats, ``form`` of travellers, or ``text``."""
    typed: dict[str, Any] = {
        "options": None,
        "schema": None,
        "maxLength": None,
        **{"choose": {"options": SEATS}, "form": {"schema": TRAVELLERS}, "text": {"maxLength": 20}}[
            kind
        ],
    }
    prompt = {"summary": "Which seat do you want?"}
    return question_doc(kind, typed, **{"prompt": prompt, **members})


def refusal(kind: str, value: Any, **members: Any) -> AnswerInvalid:
    with pytest.raises(AnswerInvalid) as caught:
        check_answer(parse_question(question(kind, **members)), value)
    assert caught.value.reason in ANSWER_REASONS
    return caught.value


def question_refusal(doc: Any) -> QuestionInvalid:
    with pytest.raises(QuestionInvalid) as caught:
        parse_question(doc)
    assert caught.value.reason in QUESTION_REASONS
    return caught.value


# --- parsing a question -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["choose", "form", "text"])
def test_a_question_of_each_type_parses(kind: str) -> None:
    """[Q-SHAPE]"""
    parsed = parse_question(question(kind))
    assert parsed.type.value == kind
    assert parse_question(parsed) == parsed


def test_a_text_question_may_leave_max_length_out() -> None:
    """[Q-SHAPE]"""
    assert parse_question(question("text", maxLength=None)).max_length is None


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (["not", "an", "object"], ""),
        ({k: v for k, v in question().items() if k != "asker"}, "/asker"),
        (question(prompt="a bare string"), "/prompt"),
        (question(options=["only one"]), "/options"),
        (question(asker="human://acme.com/dana"), "/asker"),
        (question(extra=1), "/extra"),
    ],
)
def test_a_question_not_of_the_question_form_is_refused_as_shape(doc: Any, where: str) -> None:
    """[Q-SHAPE]"""
    error = question_refusal(doc)
    assert (error.reason, error.data["where"]) == ("SHAPE", where)


@pytest.mark.parametrize(
    "doc",
    [
        question("choose", schema={"type": "string"}),
        question("text", options=["a", "b"]),
        question("form", schema=None),
        question("choose", options=None),
    ],
)
def test_a_question_carries_the_members_of_its_type_and_no_other(doc: dict[str, Any]) -> None:
    """[Q-SHAPE]"""
    assert question_refusal(doc).reason == "FIELDS"


def test_an_option_listed_twice_is_refused() -> None:
    """[Q-SHAPE]"""
    error = question_refusal(question(options=["aisle", "window", "aisle"]))
    assert (error.reason, error.data["where"]) == ("DUPLICATE_OPTION", "/options")


@pytest.mark.parametrize(
    "address", ["human://acme.com/Dana", "agent://acme.com/helper", "mailto:dana@acme.com"]
)
def test_a_question_goes_to_a_valid_human_address(address: str) -> None:
    """[Q-SHAPE]"""
    error = question_refusal(question(address=address))
    assert (error.reason, error.data["where"]) == ("ADDRESS", "/address")


def test_a_question_of_an_unknown_version_is_refused_by_name() -> None:
    with pytest.raises(VersionUnsupported):
        parse_question(question(hatpVersion="9.9"))


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "colour"}, "/schema/type"),
        ({"properties": {"age": {"minimum": "zero"}}}, "/schema/properties/age/minimum"),
        ({"$schema": "http://json-schema.org/draft-04/schema#"}, "/schema/$schema"),
    ],
)
def test_a_form_schema_is_a_valid_draft_2020_12_json_schema(
    schema: dict[str, Any], where: str
) -> None:
    """[Q-SCHEMA]"""
    error = question_refusal(question("form", schema=schema))
    assert (error.reason, error.data["where"]) == ("SCHEMA", where)


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"$ref": "https://evil.example/schema.json"}, "/schema/$ref"),
        ({"items": {"$ref": "other.json#/x"}}, "/schema/items/$ref"),
        ({"items": {"$ref": "#/$defs/missing"}}, "/schema/items/$ref"),
        ({"$defs": {"a": {"$anchor": "a"}}, "$ref": "#a"}, "/schema/$ref"),
        ({"$dynamicRef": "#meta"}, "/schema/$dynamicRef"),
    ],
)
def test_a_form_schema_refers_only_inside_itself(schema: dict[str, Any], where: str) -> None:
    """[Q-SCHEMA] Checking an answer never fetches a schema from anywhere."""
    error = question_refusal(question("form", schema=schema))
    assert (error.reason, error.data["where"]) == ("REF", where)


@pytest.mark.parametrize(
    ("schema", "where", "says"),
    [
        ({"properties": {"code": {"pattern": "(a)\\1"}}}, "/schema/properties/code/pattern",
         "not a pattern RE2 takes"),
        ({"pattern": "^(?=x)x$"}, "/schema/pattern", "not a pattern RE2 takes"),
        ({"patternProperties": {"^x-": {"type": "string"}}}, "/schema/patternProperties",
         "patternProperties is not taken"),
        ({"items": {"patternProperties": {}}}, "/schema/items/patternProperties",
         "patternProperties is not taken"),
    ],
)  # fmt: skip
def test_a_form_pattern_is_one_matched_in_linear_time(
    schema: dict[str, Any], where: str, says: str
) -> None:
    """[Q-SCHEMA] an agent's pattern runs on a person's answer: it must be a pattern RE2
    takes (no backreference, no lookaround), and patternProperties (matched by
    backtracking ``re`` inside jsonschema) is not taken."""
    error = question_refusal(question("form", schema=schema))
    assert (error.reason, error.data["where"]) == ("SCHEMA", where)
    assert says in error.message


def test_a_field_named_like_a_keyword_is_a_name_not_a_keyword() -> None:
    """[Q-SCHEMA] under properties, "pattern" and "patternProperties" are fields' names."""
    schema = {
        "properties": {
            "pattern": {"type": "string", "pattern": "^[a-z]+$"},
            "patternProperties": {"type": "integer"},
        }
    }
    check_answer(parse_question(question("form", schema=schema)), {"pattern": "abc"})
    assert refusal("form", {"pattern": "ABC"}, schema=schema).data["where"] == "/pattern"


def test_a_pattern_that_backtracks_for_ever_in_re_is_matched_at_once() -> None:
    """[Q-FORM] ^(a+)+$ against 40 a's and a "!" takes about 2**40 steps in Python's re
    (this test would not finish); RE2 answers at once, and the answer is refused."""
    schema = {"properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    error = refusal("form", {"code": "a" * 40 + "!"}, schema=schema)
    assert (error.reason, error.data["where"]) == ("SCHEMA", "/code")
    assert "does not match" in error.message
    check_answer(parse_question(question("form", schema=schema)), {"code": "a" * 40})


def test_local_refs_resolve_and_a_ref_inside_data_is_not_a_reference() -> None:
    """[Q-SCHEMA]"""
    schema = {
        "$defs": {"a/b": {"type": "integer"}},
        "properties": {
            "n": {"$ref": "#/$defs/a~1b"},
            "t": {"prefixItems": [{"type": "string"}]},
            "s": {"$ref": "#/properties/t/prefixItems/0"},
            "whole": {"$ref": "#"},
            "c": {"const": {"$ref": "https://not.a.reference"}},
        },
    }
    parsed = parse_question(question("form", schema=schema))
    check_answer(parsed, {"n": 3, "s": "x", "c": {"$ref": "https://not.a.reference"}})
    assert refusal("form", {"n": "three"}, schema=schema).data["where"] == "/n"


def test_question_errors_round_trip_through_their_wire_form() -> None:
    error = question_refusal(question(options=["a", "a"]))
    back = error_from_dict(error.to_dict())
    assert isinstance(back, QuestionInvalid)
    assert back.reason == "DUPLICATE_OPTION"


# --- the digest -------------------------------------------------------------------------


def test_the_digest_is_of_the_question_wire_form_and_binds_every_member() -> None:
    """[Q-DIGEST]"""
    doc = question("text")
    parsed = parse_question(doc)
    assert question_digest(doc) == question_digest(parsed) == digest(parsed.to_wire())
    sparse = {k: v for k, v in doc.items() if k not in ("options", "schema")}
    assert question_digest(sparse) == question_digest(doc)
    assert question_digest(question("text", prompt={"summary": "Other?"})) != question_digest(doc)
    assert question_digest(question("text", maxLength=21)) != question_digest(doc)


# --- choose -----------------------------------------------------------------------------


@pytest.mark.parametrize("option", SEATS)
def test_every_option_is_an_answer(option: str) -> None:
    """[Q-CHOOSE]"""
    check_answer(parse_question(question()), option)


@pytest.mark.parametrize("value", ["Window", " window", "window ", "", "seat 1"])
def test_a_choice_must_be_an_option_exactly(value: str) -> None:
    """[Q-CHOOSE]"""
    assert refusal("choose", value).reason == "NOT_AN_OPTION"


@pytest.mark.parametrize("value", [1, None, ["window"], {"seat": "window"}, True])
def test_a_choice_is_a_string(value: Any) -> None:
    """[Q-CHOOSE]"""
    assert refusal("choose", value).reason == "WRONG_TYPE"


@given(st.text(max_size=30).filter(lambda t: t not in SEATS))
def test_any_string_not_in_the_options_is_refused(value: str) -> None:
    """[Q-CHOOSE]"""
    with pytest.raises(AnswerInvalid) as caught:
        check_answer(parse_question(question()), value)
    assert caught.value.reason == "NOT_AN_OPTION"


# --- form -------------------------------------------------------------------------------


def test_a_form_answer_that_fits_the_schema_is_accepted() -> None:
    """[Q-FORM]"""
    check_answer(
        parse_question(question("form")),
        {"passengers": [{"name": "Dana", "age": 41}], "meal/pref~x": "veg"},
    )


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (
            {"passengers": [{"name": "Dana", "age": 41}, {"name": "Kim", "age": -1}]},
            "/passengers/1/age",
        ),
        ({"passengers": [{"name": "Dana"}]}, "/passengers/0"),
        ({"passengers": []}, "/passengers"),
        ({"passengers": [{"name": "Dana", "age": 1}], "meal/pref~x": "fish"}, "/meal~1pref~0x"),
        ({}, ""),
        ("Dana, 41", ""),
    ],
)
def test_a_form_answer_that_does_not_fit_names_the_json_pointer_of_the_error(
    value: Any, where: str
) -> None:
    """[Q-FORM]"""
    error = refusal("form", value)
    assert (error.reason, error.data["where"]) == ("SCHEMA", where)
    assert f"at {where or '/'} " in error.message


@pytest.mark.parametrize("value", [math.nan, {"passengers": [math.inf]}, "\ud800"])
def test_a_form_answer_must_have_a_canonical_json_form(value: Any) -> None:
    """[Q-FORM]"""
    assert refusal("form", value, schema={}).reason == "NOT_JSON"


# --- text -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["x", "exactly twenty chars", "two\nlines\tand a tab"])
def test_a_text_answer_of_1_to_max_length_characters_is_accepted(value: str) -> None:
    """[Q-TEXT]"""
    check_answer(parse_question(question("text")), value)


def test_an_empty_text_answer_is_refused() -> None:
    """[Q-TEXT]"""
    assert refusal("text", "").reason == "EMPTY"


@given(st.text(min_size=21, max_size=60))
def test_any_text_answer_over_max_length_is_refused(value: str) -> None:
    """[Q-TEXT]"""
    with pytest.raises(AnswerInvalid) as caught:
        check_answer(parse_question(question("text")), value)
    assert caught.value.reason == "TOO_LONG"
    assert caught.value.data["maxLength"] == 20


def test_without_max_length_a_text_answer_is_bounded_by_the_largest_max_length() -> None:
    """[Q-TEXT]"""
    parsed = parse_question(question("text", maxLength=None))
    check_answer(parsed, "a" * MAX_TEXT_LENGTH)
    with pytest.raises(AnswerInvalid) as caught:
        check_answer(parsed, "a" * (MAX_TEXT_LENGTH + 1))
    assert caught.value.reason == "TOO_LONG"


# Every Cc character is below U+0100 (C0, DEL and C1).
CONTROLS = [chr(c) for c in range(0x100) if unicodedata.category(chr(c)) == "Cc"]


@given(
    st.text(max_size=8),
    st.sampled_from([c for c in CONTROLS if c not in "\n\t"]),
    st.text(max_size=8),
)
def test_a_text_answer_with_any_control_character_but_newline_and_tab_is_refused(
    before: str, control: str, after: str
) -> None:
    """[Q-TEXT] Escape sequences and carriage returns cannot ride in an answer."""
    value = (before + control + after)[:20]
    with pytest.raises(AnswerInvalid) as caught:
        check_answer(parse_question(question("text")), value)
    assert caught.value.reason in ("CONTROL_CHAR", "NOT_JSON")
    if all(unicodedata.category(c) != "Cs" for c in value):
        assert caught.value.reason == "CONTROL_CHAR"


def test_a_text_answer_with_a_lone_surrogate_is_refused() -> None:
    """[Q-TEXT]"""
    assert refusal("text", "ok\udc00").reason == "NOT_JSON"


@pytest.mark.parametrize("value", [42, None, ["a"], b"bytes"])
def test_a_text_answer_is_a_string(value: Any) -> None:
    """[Q-TEXT]"""
    assert refusal("text", value).reason == "WRONG_TYPE"


def test_answer_errors_round_trip_through_their_wire_form() -> None:
    error = refusal("text", "")
    back = error_from_dict(error.to_dict())
    assert isinstance(back, AnswerInvalid)
    assert back.reason == "EMPTY"
    assert back.data["question"] == "q-text"


# --- signing ----------------------------------------------------------------------------


def _sign(parsed: Question, value: Any) -> dict[str, Any]:
    return sign_answer(
        GATEWAY_KEY,
        GATEWAY_ID,
        ASK_ID,
        parsed,
        value,
        "human://acme.com/dana",
        ["human://acme.com/bob"],
        AT,
    )


@pytest.mark.parametrize(
    ("kind", "value"),
    [("choose", "aisle"), ("form", {"passengers": [{"name": "Dana", "age": 41}]}), ("text", "hi")],
)
def test_a_fitting_answer_is_signed_by_the_gateway_and_bound_to_the_question(
    kind: str, value: Any
) -> None:
    """[Q-SIGNED] [Q-DIGEST]"""
    parsed = parse_question(question(kind))
    signed = _sign(parsed, value)
    answer = Answer.model_validate(signed)
    assert answer.question_digest == question_digest(parsed)
    assert (answer.value, answer.type, answer.ask_id) == (value, parsed.type, ASK_ID)
    assert (answer.answered_by, answer.declined_by) == (
        "human://acme.com/dana",
        ["human://acme.com/bob"],
    )
    assert answer.answered_at == "2026-12-02T09:30:00.000Z"
    keyring = Keyring([(GATEWAY_KEY.public, GATEWAY_ID)], trusted_issuers=[GATEWAY_ID])
    assert verify(signed, keyring).issuer == GATEWAY_ID


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        ("choose", "first class", "NOT_AN_OPTION"),
        ("form", {"passengers": "Dana"}, "SCHEMA"),
        ("text", "x" * 21, "TOO_LONG"),
        ("text", "\x1b[2J", "CONTROL_CHAR"),
    ],
)
def test_an_answer_that_does_not_fit_is_refused_and_never_signed(
    kind: str, value: Any, reason: str
) -> None:
    """[Q-SIGNED]"""
    with pytest.raises(AnswerInvalid) as caught:
        _sign(parse_question(question(kind)), value)
    assert caught.value.reason == reason


def test_an_answer_by_someone_who_is_not_a_person_is_not_signed() -> None:
    """[Q-SIGNED]"""
    with pytest.raises(ValueError, match="answeredBy"):
        sign_answer(
            GATEWAY_KEY, GATEWAY_ID, ASK_ID, parse_question(question()), "aisle",
            "agent://acme.com/travel-bot", [], AT,
        )  # fmt: skip


def test_a_remote_ref_in_a_question_that_skipped_parsing_is_never_fetched() -> None:
    """[Q-SCHEMA] Checking an answer refuses the question rather than fetch a schema."""
    unparsed = Question.model_validate(
        question("form", schema={"$ref": "https://schemas.invalid/traveller.json"})
    )
    with pytest.raises(QuestionInvalid) as caught:
        check_answer(unparsed, {"name": "Dana"})
    assert caught.value.reason == "REF"
