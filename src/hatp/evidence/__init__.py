"""The evidence layer: canonical JSON, digests, keys, signatures, records, verification.

Everything another part of hatp signs, digests, chains or verifies goes
through here. It imports only :mod:`hatp.model` and can be used alone: an
auditor needs nothing else to check a record offline. Only
:func:`discover_key_set` goes online (an organisation's key set, over HTTP); it
loads its HTTP client when it runs.
"""

from hatp.evidence._calls import call_digest, tool_digest
from hatp.evidence._canonical import canonicalize, copy_json, json_number
from hatp.evidence._digest import digest, digest_bytes, is_digest
from hatp.evidence._discover import discover_key_set
from hatp.evidence._keys import KeyPeriod, Keyring, PublicKey, SigningKey, card_keyring
from hatp.evidence._keyset import (
    ISSUED_AT_SKEW,
    VerifiedKeySet,
    sign_key_set,
    thumbprint,
    verify_key_set,
)
from hatp.evidence._passkey import (
    PasskeyVerified,
    client_challenge,
    origin_fits,
    page_origins,
    passkey_challenge,
    verify_assertion,
    verify_passkey,
)
from hatp.evidence._record import RecordWriter, WrittenEvent
from hatp.evidence._signing import ALGORITHM, Verified, sign, verify
from hatp.evidence._strict_json import MAX_DEPTH, parse_json
from hatp.evidence._verify import CHAIN_RULES, load_record, verify_record
from hatp.evidence._verify_approval import (
    APPROVAL_RULES,
    verify_approval,
    verify_read_approval,
)
from hatp.evidence._verify_routing import ROUTING_RULES, verify_routing
from hatp.evidence._verify_txn import TXN_RULES
from hatp.evidence._verify_undo import UNDO_RULES, verify_undo

__all__ = [
    "ALGORITHM",
    "APPROVAL_RULES",
    "CHAIN_RULES",
    "ISSUED_AT_SKEW",
    "MAX_DEPTH",
    "ROUTING_RULES",
    "TXN_RULES",
    "UNDO_RULES",
    "KeyPeriod",
    "Keyring",
    "PasskeyVerified",
    "PublicKey",
    "RecordWriter",
    "SigningKey",
    "Verified",
    "VerifiedKeySet",
    "WrittenEvent",
    "call_digest",
    "canonicalize",
    "card_keyring",
    "client_challenge",
    "copy_json",
    "digest",
    "digest_bytes",
    "discover_key_set",
    "is_digest",
    "json_number",
    "load_record",
    "origin_fits",
    "page_origins",
    "parse_json",
    "passkey_challenge",
    "sign",
    "sign_key_set",
    "thumbprint",
    "tool_digest",
    "verify",
    "verify_approval",
    "verify_assertion",
    "verify_key_set",
    "verify_passkey",
    "verify_read_approval",
    "verify_record",
    "verify_routing",
    "verify_undo",
]
