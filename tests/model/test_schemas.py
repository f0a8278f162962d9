"""The JSON Schemas in schemas/ are generated from the pydantic types and current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hatp.evidence import Keyring
from hatp.model import KeyringDocument, RecordEvent, TransactionRecord
from hatp.model.schemas import all_schemas, render

SCHEMAS = Path(__file__).parents[2] / "schemas"


@pytest.mark.parametrize("name", sorted(all_schemas()))
def test_schema_file_is_current(name: str) -> None:
    path = SCHEMAS / name
    assert path.exists(), f"{name} missing: run `make schemas`"
    assert path.read_text(encoding="utf-8") == render(all_schemas()[name]), "run `make schemas`"


def test_no_stale_schema_files() -> None:
    assert {p.name for p in SCHEMAS.glob("*.json")} == set(all_schemas())


def test_schemas_use_wire_names() -> None:
    event = json.loads((SCHEMAS / "RecordEvent.json").read_text())
    assert {"hatpVersion", "recordId", "seq", "prev", "signature"} <= set(event["properties"])
    assert event["additionalProperties"] is False


def test_models_accept_what_the_library_writes(parties: dict, clock: object) -> None:  # type: ignore[type-arg]
    from hatp.evidence import RecordWriter

    writer = RecordWriter("txn-1", clock)  # type: ignore[arg-type]
    writer.append("step.done", {"n": 1}, parties["airline"])
    writer.seal(parties["coordinator"])
    record = TransactionRecord.model_validate(writer.to_json())
    assert record.to_wire() == writer.to_json()
    ring = Keyring(((k.public, "iss") for k in parties.values()), trusted_issuers=["iss"])
    assert KeyringDocument.model_validate(ring.to_json()).to_wire() == ring.to_json()


def test_models_refuse_coercion_and_unknown_members() -> None:
    event = {
        "hatpVersion": "0.1", "recordId": "r", "seq": "0", "prev": None, "type": "a.b",
        "time": "2026-12-02T09:00:00.000Z", "kid": "k", "body": {},
        "signature": {"alg": "Ed25519", "kid": "k", "sig": "x"},
    }  # fmt: skip
    with pytest.raises(ValueError, match="seq"):
        RecordEvent.model_validate(event)
    with pytest.raises(ValueError, match="extra"):
        RecordEvent.model_validate({**event, "seq": 0, "extra": 1})
