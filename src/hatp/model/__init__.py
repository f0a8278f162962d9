"""Pydantic types of the protocol; the JSON Schemas in ``schemas/`` come from them.

This package imports nothing above it, so an auditor can use it alone.
"""

from hatp.model._base import Digest, Kid, WireModel, WireTime
from hatp.model.findings import Finding, Result, VerificationReport
from hatp.model.keys import KeyringDocument, KeyringEntry, PublicJwk
from hatp.model.record import SEAL_EVENT, RecordEvent, TransactionRecord
from hatp.model.signature import Signature

__all__ = [
    "SEAL_EVENT",
    "Digest",
    "Finding",
    "KeyringDocument",
    "KeyringEntry",
    "Kid",
    "PublicJwk",
    "RecordEvent",
    "Result",
    "Signature",
    "TransactionRecord",
    "VerificationReport",
    "WireModel",
    "WireTime",
]
