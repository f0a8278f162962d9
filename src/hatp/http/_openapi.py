"""The OpenAPI 3.1 description of the JSON API, generated from its operations and models.

Every schema comes from a pydantic model's JSON Schema (``model_json_schema``):
a request's params model (the MCP binding's), each answer's model, the
protocol's own types for the signed documents an answer carries, and the one
error body. Every operation lists its success status and, per status, the
hatp error codes it answers with (``x-hatp-codes``), all from
:data:`hatp.http.HTTP_STATUS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from hatp.http._api import Carrying, Operation
from hatp.http._errors import DEFAULT_STATUS, HTTP_STATUS
from hatp.http._health import health_paths
from hatp.http._metrics import metrics_paths
from hatp.model import (
    KEYSET_PATH,
    WELL_KNOWN_PATH,
    CallRequest,
    HoldTerms,
    HumanCard,
    KeySet,
    Plan,
    Question,
    TransactionRecord,
    WellKnown,
    WireModel,
)
from hatp.version import PROTOCOL_VERSION

__all__ = ["OPENAPI_PATH", "OPENAPI_VERSION", "ErrorBody", "IndexAnswer", "openapi_document"]

#: Where the server publishes its OpenAPI document.
OPENAPI_PATH = "/openapi.json"
#: The OpenAPI version of the document.
OPENAPI_VERSION = "3.1.0"

_REF = "#/components/schemas/{model}"
#: Members the params and answer models keep as plain JSON objects, so the role's own
#: parser refuses them with its typed error; the document names the protocol type.
_TYPED_MEMBERS: dict[tuple[str, str], type[BaseModel]] = {
    ("AskParams", "plan"): Plan,
    ("AskParams", "terms"): HoldTerms,
    ("BeginParams", "plan"): Plan,
    ("UndoAnswer", "plan"): Plan,
    ("UndoPlanAnswer", "plan"): Plan,
    ("QuestionParams", "question"): Question,
    ("CallParams", "request"): CallRequest,
    ("RecordAnswer", "record"): TransactionRecord,
    ("CandidateAnswer", "card"): HumanCard,
}
_WRAPPERS: tuple[type[BaseModel], ...] = (WellKnown, KeySet, *_TYPED_MEMBERS.values())


class ErrorBody(WireModel):
    """Every refusal: a hatp error's wire form (docs/spec.md §9); ``ptcl`` only for a stale
    fence epoch (``ERR_STALE_FENCE_EPOCH``)."""

    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$", description="the stable hatp error code")
    message: str = Field(description="what happened, and what to do")
    data: dict[str, Any] = Field(description="structured detail: reason, where, …")
    ptcl: str | None = None


class IndexAnswer(WireModel):
    """``GET /``: what this server serves, and where its descriptions are."""

    service: str
    hatp_version: str
    serves: list[Literal["gateway", "directory", "coordinator"]]
    openapi: str
    well_known: str | None
    approve: str | None = Field(
        default=None, description="the approver page (HTML, for people), if served"
    )


def openapi_document(
    operations: Sequence[Operation],
    *,
    title: str = "hatp",
    well_known: bool = False,
    bearer: bool = False,
    key_set: bool = False,
    signed: bool = False,
) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of ``operations`` (and of the well-known route,
    and with ``key_set`` of the key set's); ``bearer``: every operation needs a caller's
    bearer token (``[api] callers``); ``signed``: or a request signature (with
    ``bearer``: either will do)."""
    models = _models(operations)
    _, defs = models_json_schema(
        [(m, "validation") for m in models], by_alias=True, ref_template=_REF
    )
    schemas: dict[str, Any] = defs.get("$defs", {})
    for (owner, member), model in _TYPED_MEMBERS.items():
        if owner in schemas and member in schemas[owner]["properties"]:
            _retype(schemas[owner]["properties"], member, _ref(model))
    paths: dict[str, Any] = {}
    for op in operations:
        paths.setdefault(_openapi_path(op.path), {})[op.method.lower()] = _operation(
            op, schemas, bearer, signed
        )
    if well_known:
        paths[WELL_KNOWN_PATH] = {
            "get": _plain(
                "getWellKnown",
                "The organisation's directory, gateway and card-signing keys",
                _ref(WellKnown),
                "well-known",
            )
        }
    if key_set:
        paths[KEYSET_PATH] = {
            "get": _plain(
                "getKeySet",
                "The organisation's key set, signed by its root key, as published",
                _ref(KeySet),
                "well-known",
            )
        }
    paths["/"] = {"get": _plain("getIndex", "What this server serves", _ref(IndexAnswer), "meta")}
    paths[OPENAPI_PATH] = {"get": _plain("getOpenapi", "This document", {"type": "object"}, "meta")}
    paths.update(health_paths(_ref(ErrorBody)))
    paths.update(metrics_paths())
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": PROTOCOL_VERSION,
            "description": "The hatp JSON API (docs/spec.md §25): each operation carries the "
            "MCP binding's method of the same name (§21), with the same params; every "
            "signed document is answered exactly as it was signed. Every refusal is an "
            "ErrorBody with the status of its code.",
        },
        "paths": paths,
        "components": {"schemas": schemas, **_security_schemes(bearer, signed)},
    }


#: The bearer token of ``[api] callers`` (docs/spec.md §25), as OpenAPI names it.
_BEARER_SCHEME = {
    "callerToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "a caller's token, made by `hatp api-token CALLER`",
    }
}
#: A request signed with the caller's published key ([API-SIGNED]); OpenAPI has no
#: scheme for a signature, so it names the header that carries it.
_SIGNED_SCHEME = {
    "requestSignature": {
        "type": "apiKey",
        "in": "header",
        "name": "Hatp-Signature",
        "description": "an Ed25519 signature of the request by a key the server's keyring "
        "holds, with Hatp-Caller, Hatp-Key-Id and Hatp-Timestamp (docs/spec.md §25 "
        "[API-SIGNED])",
    }
}


def _security_schemes(bearer: bool, signed: bool) -> dict[str, Any]:
    schemes = {**(_BEARER_SCHEME if bearer else {}), **(_SIGNED_SCHEME if signed else {})}
    return {"securitySchemes": schemes} if schemes else {}


def _security(bearer: bool, signed: bool) -> list[dict[str, list[str]]]:
    """The operation's security requirements: any one of them will do."""
    named = [("callerToken", bearer), ("requestSignature", signed)]
    return [{scheme: []} for scheme, used in named if used]


def _models(operations: Iterable[Operation]) -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {"ErrorBody": ErrorBody, "IndexAnswer": IndexAnswer}
    for model in _WRAPPERS:
        found[model.__name__] = model
    for op in operations:
        found[op.params.__name__] = op.params
        answers = op.answer.models if isinstance(op.answer, Carrying) else (op.answer,)
        for model in (*answers, *(m for _, m in _other_answers(op))):
            found[model.__name__] = model
    return [found[name] for name in sorted(found)]


def _operation(
    op: Operation, schemas: dict[str, Any], bearer: bool, signed: bool
) -> dict[str, Any]:
    params = schemas[op.params.__name__]
    properties: dict[str, Any] = params.get("properties", {})
    required = set(params.get("required", []))
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": properties[name]}
        for name in op.path_members
    ] + [
        {"name": name, "in": "query", "required": name in required, "schema": properties[name]}
        for name in op.query
    ]
    description = (
        f"Carries the MCP method `dev.hatp/{op.name}` (docs/spec.md §21)"
        if op.mcp
        else op.mcp_note
        or "Over MCP the cards are the server's resources (docs/spec.md §21 [MCP-CARDS])"
    )
    if op.fixed:
        fixed = ", ".join(f"{k} = {v!r}" for k, v in op.fixed.items())
        description += f", with {fixed}"
    doc: dict[str, Any] = {
        "operationId": _operation_id(op),
        "summary": op.summary,
        "description": description + ".",
        "tags": [op.path.strip("/").split("/")[0]],
        "parameters": parameters,
        "responses": _responses(op, bearer or signed),
    }
    if bearer or signed:
        doc["security"] = _security(bearer, signed)
    if op.method == "POST":
        body = {
            "type": "object",
            "additionalProperties": False,
            "properties": {n: properties[n] for n in op.body_members},
            "required": [n for n in op.body_members if n in required],
        }
        doc["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
    return doc


def _responses(op: Operation, authenticated: bool) -> dict[str, Any]:
    answers: dict[str, Any] = {
        str(op.status): {
            "description": "the answer" + (" (Location: the transaction)" if op.location else ""),
            "content": {"application/json": {"schema": _answer_schema(op.answer)}},
        }
    }
    for status, model in _other_answers(op):
        answers[str(status)] = {
            "description": "the answer when nothing was begun (a dry run)",
            "content": {"application/json": {"schema": _ref(model)}},
        }
    posted = ("BODY_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE") if op.method == "POST" else ()
    codes = ["INVALID_JSON", *posted, *op.refusals]
    if authenticated:
        agents = op.names_agent is not None or op.owned_by is not None
        codes += ["UNAUTHENTICATED", *(("CALLER_REFUSED",) if agents else ())]
    by_status: dict[int, list[str]] = {}
    for code in codes:
        for status in _statuses(code):
            by_status.setdefault(status, [])
            if code not in by_status[status]:
                by_status[status].append(code)
    for status in sorted(by_status):
        listed = by_status[status]
        answers[str(status)] = {
            "description": "refused: " + ", ".join(listed),
            "x-hatp-codes": listed,
            "content": {"application/json": {"schema": _ref(ErrorBody)}},
        }
    return answers


def _other_answers(op: Operation) -> tuple[tuple[int, type[BaseModel]], ...]:
    """The successes an operation's route answers besides its ``status`` (``txn/undo``'s
    dry run: 200), as ``(status, model)`` pairs in its ``other_answers``."""
    other: tuple[tuple[int, type[BaseModel]], ...] = getattr(op, "other_answers", ())
    return other


def _statuses(code: str) -> list[int]:
    """Every status ``code`` can travel with (one per reason the table names)."""
    found = {status for (c, _), status in HTTP_STATUS.items() if c == code}
    return sorted(found) or [DEFAULT_STATUS]


def _answer_schema(answer: type[BaseModel] | Carrying) -> dict[str, Any]:
    if not isinstance(answer, Carrying):
        return _ref(answer)
    if answer.member is None:
        return {"type": "object", "additionalProperties": False, "properties": {}}
    one = [_ref(m) for m in answer.models]
    return {
        "type": "object",
        "additionalProperties": False,
        "required": [answer.member],
        "properties": {answer.member: one[0] if len(one) == 1 else {"anyOf": one}},
    }


def _plain(op_id: str, summary: str, schema: dict[str, Any], tag: str) -> dict[str, Any]:
    return {
        "operationId": op_id,
        "summary": summary,
        "tags": [tag],
        "responses": {
            "200": {"description": summary, "content": {"application/json": {"schema": schema}}}
        },
    }


def _retype(properties: dict[str, Any], member: str, ref: dict[str, Any]) -> None:
    old = properties[member]
    nullable = any(s.get("type") == "null" for s in old.get("anyOf", []))
    typed: dict[str, Any] = {"anyOf": [ref, {"type": "null"}]} if nullable else dict(ref)
    for keep in ("description", "default"):
        if keep in old:
            typed[keep] = old[keep]
    properties[member] = typed


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": _REF.format(model=model.__name__)}


def _openapi_path(path: str) -> str:
    return re.sub(r"\{([A-Za-z]+):path\}", r"{\1}", path)


def _operation_id(op: Operation) -> str:
    words = re.findall(r"[A-Za-z]+", _openapi_path(op.path))
    head = op.method.lower()
    return head + "".join(w[:1].upper() + w[1:] for w in words)
