"""JSON Schemas of the wire types, generated from the pydantic models.

``python -m hatp.model.schemas DIR`` writes one ``NAME.json`` per type; a
test checks the files in ``schemas/`` are current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hatp.model import (
    Answer,
    Approval,
    BranchStatus,
    CallApproval,
    CallRequest,
    CallRequirement,
    CallTerms,
    ChainEstimate,
    HoldTerms,
    HumanCard,
    HumanVote,
    KeyringDocument,
    KeySet,
    OutcomeReceipt,
    PendingVote,
    Plan,
    PrepareReceipt,
    PublicJwk,
    Question,
    Quote,
    RecordEvent,
    RenewReceipt,
    RoutingRecord,
    Signature,
    SignatureUse,
    TransactionRecord,
    VerificationReport,
    WellKnown,
    WireModel,
)

WIRE_TYPES: tuple[type[WireModel], ...] = (
    Answer,
    Approval,
    BranchStatus,
    CallApproval,
    CallRequest,
    CallRequirement,
    CallTerms,
    ChainEstimate,
    HoldTerms,
    HumanCard,
    HumanVote,
    KeyringDocument,
    KeySet,
    OutcomeReceipt,
    PendingVote,
    Plan,
    PrepareReceipt,
    PublicJwk,
    Question,
    Quote,
    RecordEvent,
    RenewReceipt,
    RoutingRecord,
    Signature,
    SignatureUse,
    TransactionRecord,
    VerificationReport,
    WellKnown,
)


def all_schemas() -> dict[str, dict[str, Any]]:
    """Return ``{file name: JSON Schema}`` for every wire type."""
    out: dict[str, dict[str, Any]] = {}
    for model in WIRE_TYPES:
        schema = model.model_json_schema(by_alias=True, mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://hatp.dev/schemas/{model.__name__}.json"
        out[f"{model.__name__}.json"] = schema
    return out


def render(schema: dict[str, Any]) -> str:
    """Return the file text of one schema (stable, so diffs are meaningful)."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write every schema into the folder named on the command line."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0] if args else "schemas")
    folder.mkdir(parents=True, exist_ok=True)
    for name, schema in all_schemas().items():
        (folder / name).write_text(render(schema), encoding="utf-8")


if __name__ == "__main__":
    main()
