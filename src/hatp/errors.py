"""The one exception tree of hatp.

Every refusal hatp makes is one of these. Each carries a stable string
``code`` (part of the wire contract, listed in ``docs/spec.md``), a ``message``
that tells a person what to fix, and structured ``data``. The same object is
rendered as the CLI's exit message, and later as the HTTP error body and the
MCP JSON-RPC error.

    HatpError
    ├── InvalidJson            INVALID_JSON
    ├── TimeInvalid            TIME_INVALID        (also a ValueError: not a wire time)
    ├── VersionUnsupported     VERSION_UNSUPPORTED
    ├── SignatureInvalid       SIGNATURE_INVALID   (data.reason says which check)
    ├── KeyInvalid             KEY_INVALID
    ├── KeyringInvalid         KEYRING_INVALID
    ├── KeySetInvalid          KEYSET_INVALID      (data.reason: a key of KEYSET_REASONS)
    ├── RecordInvalid          RECORD_INVALID
    ├── PlanInvalid            PLAN_INVALID        (data.reason says which rule)
    ├── PreconditionChanged    PRECONDITION_CHANGED
    ├── StaleFence             STALE_FENCE
    ├── OutcomeConflict        OUTCOME_CONFLICT    (flagged, never silently flipped)
    ├── NotPrepared            NOT_PREPARED
    ├── HoldExpired            HOLD_EXPIRED
    ├── NotRenewable           NOT_RENEWABLE       (data.tier: a dry run has no lease)
    ├── NotReplaceable         NOT_REPLACEABLE     (data.state: the hold was not lost)
    ├── RenewalDeclined        RENEWAL_DECLINED    (data.reason: the provider's; the lease stands)
    ├── UndoInvalid            UNDO_INVALID
    ├── UndoRefused            UNDO_REFUSED        (data.reason: a key of UNDO_REASONS)
    ├── Unavailable            UNAVAILABLE         (no definite answer now: retry; never a "no")
    │   ├── ParticipantUnavailable PARTICIPANT_UNAVAILABLE
    │   ├── StoreUnavailable       STORE_UNAVAILABLE
    │   └── PeerUnavailable        PEER_UNAVAILABLE    (no answer from an MCP server)
    ├── TransactionUnknown     TXN_UNKNOWN
    ├── SchemaMismatch         SCHEMA_MISMATCH     (data.reason: a key of SCHEMA_REASONS)
    ├── AddressInvalid         ADDRESS_INVALID     (data.reason says what is wrong)
    ├── CardInvalid            CARD_INVALID        (data.reason: SIGNATURE, ISSUER, SHAPE)
    ├── RequirementBelowTotal  REQUIREMENT_BELOW_TOTAL (data.declared, data.required)
    ├── AskInvalid             ASK_INVALID         (data.reason: UNKNOWN_GROUP, DIGEST_MISMATCH)
    ├── QuestionInvalid        QUESTION_INVALID    (data.reason: a key of QUESTION_REASONS)
    ├── AnswerInvalid          ANSWER_INVALID      (data.reason: a key of ANSWER_REASONS)
    ├── AskUnknown             ASK_UNKNOWN
    ├── AskConflict            ASK_CONFLICT
    ├── AskWithdrawn           ASK_WITHDRAWN
    ├── ResponseRefused        RESPONSE_REFUSED    (data.reason: a key of RESPONSE_REASONS)
    ├── PasskeyInvalid         PASSKEY_INVALID     (data.reason: a key of PASSKEY_REASONS)
    ├── ApprovalRequired       APPROVAL_REQUIRED   (data.requirement: what to ask for)
    ├── ApprovalInvalid        APPROVAL_INVALID    (data.reason: a key of APPROVAL_REASONS)
    ├── ApprovalUnknown        APPROVAL_UNKNOWN
    ├── CallInvalid            CALL_INVALID        (data.reason: a key of CALL_REASONS)
    ├── GateInvalid            GATE_INVALID
    ├── PeerIncompatible       PEER_INCOMPATIBLE   (data.reason: a key of PEER_REASONS)
    ├── WritePlanInvalid       WRITE_PLAN_INVALID  (data.reason: a key of WRITE_PLAN_REASONS)
    ├── WriteDenied            WRITE_DENIED
    ├── WritePlanUnknown       WRITE_PLAN_UNKNOWN
    ├── NotApproved            NOT_APPROVED
    ├── ApproverRefused        APPROVER_REFUSED    (data.reason: a key of APPROVER_REASONS)
    ├── DriftDetected          DRIFT_DETECTED
    ├── VerificationFailed     VERIFICATION_FAILED
    ├── ConcurrentExecution    CONCURRENT_EXECUTION
    ├── RecoveryRequired       RECOVERY_REQUIRED
    ├── LeaseRefused           LEASE_REFUSED       (data.reason: a key of LEASE_REASONS)
    ├── LeaseRequired          LEASE_REQUIRED
    ├── MutationInvalid        MUTATION_INVALID
    ├── ResourceUnknown        RESOURCE_UNKNOWN
    ├── LeaseUnavailable       LEASE_UNAVAILABLE   (data.reason: a key of LEASE_UNAVAILABLE_REASONS)
    ├── LeaseUnknown           LEASE_UNKNOWN
    ├── RecoveryRefused        RECOVERY_REFUSED    (data.reason: a key of RECOVERY_REASONS)
    ├── HeaderInvalid          HEADER_INVALID      (data.header: which HTTP header)
    ├── Unauthenticated        UNAUTHENTICATED     (HTTP 401)
    ├── EvidenceInvalid        EVIDENCE_INVALID    (data.reason: a key of EVIDENCE_REASONS)
    ├── BodyTooLarge           BODY_TOO_LARGE      (HTTP 413; data.limit)
    ├── CardUnknown            CARD_UNKNOWN        (data.card)
    ├── ConfigInvalid          CONFIG_INVALID      (data.key names the setting)
    ├── SignInRefused          SIGN_IN_REFUSED     (data.reason: a key of SIGN_IN_REASONS)
    ├── InviteInvalid          INVITE_INVALID      (data.reason: a key of INVITE_REASONS)
    ├── OriginRefused          ORIGIN_REFUSED      (HTTP 403; data.origin)
    ├── CallerRefused          CALLER_REFUSED      (HTTP 403; data.caller, data.named)
    ├── DeliveryFailed         DELIVERY_FAILED     (data.reason: a key of DELIVERY_REASONS)
    ├── WebhookInvalid         WEBHOOK_INVALID     (data.reason: a key of WEBHOOK_REASONS)
    ├── LinkRefused            LINK_REFUSED        (data.reason: a key of LINK_REASONS)
    ├── NotFound               NOT_FOUND           (HTTP 404; data.path)
    ├── MethodNotAllowed       METHOD_NOT_ALLOWED  (HTTP 405; data.method, data.allowed)
    └── UnsupportedMediaType   UNSUPPORTED_MEDIA_TYPE (HTTP 415; data.content_type)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "ADDRESS_REASONS",
    "ANSWER_REASONS",
    "CARD_REASONS",
    "PLAN_REASONS",
    "QUESTION_REASONS",
    "SIGNATURE_REASON_RULES",
    "UNDO_REASONS",
    "AddressInvalid",
    "AnswerInvalid",
    "AskInvalid",
    "CardInvalid",
    "HatpError",
    "HoldExpired",
    "InvalidJson",
    "KeyInvalid",
    "KeyringInvalid",
    "NotPrepared",
    "NotRenewable",
    "NotReplaceable",
    "OutcomeConflict",
    "ParticipantUnavailable",
    "PlanInvalid",
    "PreconditionChanged",
    "QuestionInvalid",
    "RecordInvalid",
    "RenewalDeclined",
    "RequirementBelowTotal",
    "SignatureInvalid",
    "StaleFence",
    "StoreUnavailable",
    "TransactionUnknown",
    "Unavailable",
    "UndoInvalid",
    "UndoRefused",
    "VersionUnsupported",
    "error_from_dict",
]


class HatpError(Exception):
    """Base of every hatp error: a stable ``code``, a ``message`` and ``data``."""

    code: ClassVar[str] = "HATP_ERROR"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        # Python raises with snake_case keywords; the wire (§9) and every reader
        # see camelCase members, the same in process and across any edge.
        self.data: dict[str, Any] = {_camel(key): value for key, value in data.items()}

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form ``{"code", "message", "data"}``."""
        return {"code": self.code, "message": self.message, "data": dict(self.data)}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class _Reasoned:
    """Mixed into a refusal that names which check refused it: ``data.reason``, a
    stable code (each such error lists its codes in a ``*_REASONS`` table)."""

    data: dict[str, Any]

    @property
    def reason(self) -> str:
        """The stable reason code in ``data.reason``."""
        return str(self.data.get("reason"))


class InvalidJson(HatpError):
    """A document is not strict JSON, or a value cannot be canonicalized.

    ``data.where`` locates the problem: a JSON Pointer into the document, or
    ``line:column`` for a syntax error.
    """

    code = "INVALID_JSON"


class TimeInvalid(HatpError, ValueError):
    """A text that is not a wire time: not ``YYYY-MM-DDTHH:MM:SS.mmmZ``, no real
    instant (30 February, hour 24, year 0), or outside the wire range
    (docs/spec.md [TIME-REAL]). Also a ``ValueError``, so that a wire model reading
    one reports it as its own shape error."""

    code = "TIME_INVALID"


__all__ += ["TimeInvalid"]


class VersionUnsupported(HatpError):
    """An object or record names a protocol version this build does not know."""

    code = "VERSION_UNSUPPORTED"


#: Which requirement of docs/spec.md each signature refusal reason enforces.
SIGNATURE_REASON_RULES: dict[str, str] = {
    "MISSING": "SIG-MEMBER",
    "MALFORMED": "SIG-MEMBER",
    "ALG_NONE": "SIG-ALG",
    "ALG_UNKNOWN": "SIG-ALG",
    "KID_UNKNOWN": "SIG-KID",
    "ISSUER_UNTRUSTED": "SIG-ISSUER",
    "BAD_ENCODING": "SIG-ENCODING",
    "BAD_LENGTH": "SIG-LENGTH",
    "BAD_SIGNATURE": "SIG-CRYPTO",
    "KEY_NOT_YET_VALID": "SIG-PERIOD",
    "KEY_EXPIRED": "SIG-PERIOD",
    "KEY_REVOKED": "SIG-PERIOD",
}


class SignatureInvalid(_Reasoned, HatpError):
    """A signature did not verify.

    ``data.reason`` is the stable reason code (a key of
    :data:`SIGNATURE_REASON_RULES`) and ``data.rule`` the requirement it enforces.
    """

    code = "SIGNATURE_INVALID"

    def __init__(self, reason: str, message: str, **data: Any) -> None:
        rule = SIGNATURE_REASON_RULES.get(reason, "SIG-CRYPTO")
        super().__init__(message, reason=reason, rule=rule, **data)


class KeyInvalid(HatpError):
    """A key file or JWK is malformed, or a key file would be overwritten."""

    code = "KEY_INVALID"


class KeyringInvalid(HatpError):
    """A keyring document is malformed."""

    code = "KEYRING_INVALID"


class KeySetInvalid(_Reasoned, HatpError):
    """An organisation's key set is refused and none of its keys is used.

    ``data.reason`` is a key of :data:`KEYSET_REASONS`, ``data.rule`` the rule it
    enforces; ``data.organisation`` and ``data.version`` name the set when they are known.
    """

    code = "KEYSET_INVALID"


#: Every ``KEYSET_INVALID`` reason and the rule it enforces (docs/spec.md §4), in the
#: order a key set is checked.
KEYSET_REASONS: dict[str, str] = {
    "SHAPE": "a key set has the KeySet form: members and types, each kid once and none the "
    "root's, revokedAt iff revoked, notAfter after notBefore (KEYSET-DOC)",
    "UNSIGNED": "a key set carries its root's signature (KEYSET-ORDER)",
    "ROOT_MISMATCH": "its root key's RFC 7638 thumbprint is the one pinned (KEYSET-PIN)",
    "BAD_SIGNATURE": "it is signed by its root key, and the signature verifies (KEYSET-ORDER)",
    "EXPIRED": "it is used before its expiresAt; after that, fetch it again (KEYSET-ORDER)",
    "NOT_YET_ISSUED": "its issuedAt is at most 5 minutes ahead of the verifier's clock "
    "(KEYSET-ORDER)",
    "ROLLED_BACK": "its version is not below the newest seen, and a set of that version is "
    "the one seen (KEYSET-ORDER)",
    "UNREACHABLE": "it is fetched from its URL: an answer, HTTP 200, at most 1 MiB of JSON, "
    "no redirect to another origin (KEYSET-FETCH)",
}

__all__ += ["KEYSET_REASONS", "KeySetInvalid"]


class RecordInvalid(HatpError):
    """A document is not a Transaction Record at all (wrong top-level shape)."""

    code = "RECORD_INVALID"


class PlanInvalid(_Reasoned, HatpError):
    """A plan breaks a rule; ``data.reason`` names it (see :data:`PLAN_REASONS`).

    ``data.where`` is a JSON Pointer to the offending member when there is one.
    """

    code = "PLAN_INVALID"

    def __init__(self, reason: str, message: str, **data: Any) -> None:
        super().__init__(message, reason=reason, **data)


#: Every ``PLAN_INVALID`` reason and the rule it enforces.
PLAN_REASONS: dict[str, str] = {
    "SHAPE": "the plan has the Plan form (members, types, lengths)",
    "SECOND_FINAL": "at most one branch has tier final",
    "AMOUNT_NOT_DECIMAL": "an amount value is a decimal string",
    "NEGATIVE_AMOUNT": "no amount is negative",
    "NEGATIVE_TOLERANCE": "no tolerance is negative",
    "UNKNOWN_TIER": "a tier is hold, compensate or final",
    "DUPLICATE_BRANCH": "branch ids are unique",
    "DUPLICATE_GROUP": "approval group ids are unique",
    "UNKNOWN_SETTLES": "settles names branches of the plan",
    "SETTLES_SELF": "a branch does not settle itself",
    "SETTLED_TWICE": "a branch is settled by at most one other",
    "SETTLES_CYCLE": "settles never loops back",
    "SETTLES_CURRENCY": "a branch settles only amounts in its own currency",
    "SETTLES_UNDERSTATED": "a settling branch's amount covers what it settles",
    "UNKNOWN_PARTICIPANT": "every branch names a participant the coordinator can reach",
    "UNKNOWN_OPERATION": "the participant offers the branch's operation",
    "TIER_MISMATCH": "the branch's tier is the tier the participant declares",
    "UNKNOWN_MODE": "a mode is auto, parallel, approval-first or holds-first",
    "RECOVERY_INCOMPLETE": "a consented off-session re-authorization names its cap and mandate",
    "PASSKEY": 'a group\'s requirement.passkey is true, false or {"above": amount}',
    "PREVIEW_MODE": "a plan that requires effect previews cannot run parallel",
    "UNDO_ONLY": "an operation that takes back a committed step runs only in an undo plan",
    "UNDO_SHAPE": "an undo plan's branches each take back one step of the original it "
    "references; no other plan's branch undoes anything",
}


class PreconditionChanged(HatpError):
    """A commit found a target changed since its dry run; nothing was done.

    ``data.changed`` maps each differing target to ``{"prepared": …, "now": …}``.
    """

    code = "PRECONDITION_CHANGED"


class StaleFence(HatpError):
    """A request carried a fencing token lower than one already seen; nothing was done."""

    code = "STALE_FENCE"


class OutcomeConflict(HatpError):
    """A request contradicts an outcome already reached (commit after abort, …).

    It is refused and flagged, never silently flipped. ``data.state`` is the
    outcome already reached and ``data.requested`` what was asked.
    """

    code = "OUTCOME_CONFLICT"


class NotPrepared(HatpError):
    """Commit, compensate or renew of a branch that was never prepared here."""

    code = "NOT_PREPARED"


class HoldExpired(HatpError):
    """A hold's lease ran out before its commit or renewal; the participant released it."""

    code = "HOLD_EXPIRED"


class NotRenewable(HatpError):
    """A renew of a branch that holds nothing: a compensate- or final-tier dry run
    has no lease to renew (``data.tier``); nothing was done."""

    code = "NOT_RENEWABLE"


class RenewalDeclined(HatpError):
    """The provider declined to extend a hold (``data.reason``, e.g.
    ``AUTHENTICATION_REQUIRED``: the payer must be present); the hold stands
    until ``data.leaseExpiresAt`` and nothing was changed."""

    code = "RENEWAL_DECLINED"


class NotReplaceable(HatpError):
    """A replace of a branch whose hold was not lost: it is live, committed, refused,
    aborted by the coordinator, or not a hold (``data.state``); nothing was done."""

    code = "NOT_REPLACEABLE"


class UndoInvalid(HatpError):
    """A compensate request carried an undo token this branch never issued."""

    code = "UNDO_INVALID"


#: Every ``UNDO_REFUSED`` reason: why no undo plan was built or begun [UNDO-REFUSE].
UNDO_REASONS: dict[str, str] = {
    "NOT_COMMITTED": "only a committed transaction's steps can be taken back",
    "NOTHING_TO_UNDO": "no step asked for can be taken back (each is not undoable, lapsed, "
    "or already undone)",
    "UNKNOWN_STEP": "a step asked for is not a committed step of the transaction",
    "NOT_UNDOABLE": "a step asked for cannot be taken back (its commit receipt says why)",
    "UNDO_LAPSED": "a step's undo offer lapsed at its undoBy",
    "ALREADY_UNDONE": "a step was taken back before, by a committed undo transaction",
    "UNDO_PENDING": "another undo transaction, still running, is taking the step back",
    "ORIGINAL_CHANGED": "the original record's head is not the one the undo plan was built from",
    "REFERENCE_INVALID": "the plan's undoes reference is not signed by this coordinator, or "
    "a branch does not match the step's signed undo offer",
    "NO_DIFFERENCE": "no step of the transaction committed other than its approved preview",
    "NO_APPROVER": "the original needed no approval and the undo names no approval group: "
    "an undo is never automatic",
}


class UndoRefused(_Reasoned, HatpError):
    """An undo was refused before anything was begun (``data.reason``: a key of
    :data:`UNDO_REASONS`; ``data.txnId``, and ``data.branchId`` when one step is why)."""

    code = "UNDO_REFUSED"


class Unavailable(HatpError):
    """No definite answer could be had now: a store, a participant or a peer did not
    answer (timeout, lost connection, a database that refused or was locked).

    Never a "no" and never a settlement: the request may or may not have taken
    effect, so whoever made it retries it (every hatp request is idempotent) and
    keeps what depends on it open meanwhile. Catch this to handle every such
    case at once (it is rebuilt as its subclass from another process's wire form).
    """

    code = "UNAVAILABLE"


class ParticipantUnavailable(Unavailable):
    """No answer came back (timeout, lost connection). Not a failure: the
    request may or may not have taken effect, so the caller retries it."""

    code = "PARTICIPANT_UNAVAILABLE"


class TransactionUnknown(HatpError):
    """No transaction with this id is in the log."""

    code = "TXN_UNKNOWN"


class StoreUnavailable(Unavailable):
    """The database could not be reached or refused the write; nothing was recorded."""

    code = "STORE_UNAVAILABLE"


class SchemaMismatch(_Reasoned, HatpError):
    """The store's database is not at the schema revision this hatp runs on, and
    opening it may not change that; ``data.reason`` (a key of :data:`SCHEMA_REASONS`)
    says why and the message what to run. Not an :class:`Unavailable`: asking again
    gives the same answer until someone upgrades the database or hatp."""

    code = "SCHEMA_MISMATCH"


#: Every ``SCHEMA_MISMATCH`` reason (docs/spec.md §12 [STORE-SCHEMA]).
SCHEMA_REASONS: dict[str, str] = {
    "NEWER": "the database is at a revision this hatp does not know: upgrade hatp",
    "BEHIND": "the database is at an older revision: run hatp db upgrade",
    "PARTIAL": "some of hatp's tables and no revision (an older hatp): run hatp db upgrade",
    "DIFFERENT": "a table of hatp's name whose columns are not hatp's: not hatp's database",
    "HEADS": "the revisions installed do not form one line",
}

__all__ += ["SCHEMA_REASONS", "SchemaMismatch"]


class AddressInvalid(_Reasoned, HatpError):
    """An address is not one of the four forms; ``data.reason`` says what is wrong
    (a key of :data:`ADDRESS_REASONS`) and ``data.address`` is the text refused.
    """

    code = "ADDRESS_INVALID"


#: Every ``ADDRESS_INVALID`` reason and the rule it enforces (docs/spec.md §17).
ADDRESS_REASONS: dict[str, str] = {
    "NOT_TEXT": "an address is a string of at most 512 characters",
    "WHITESPACE": "no whitespace or control characters anywhere",
    "PERCENT_ENCODING": "no percent-encoding: every address has one spelling",
    "SCHEME": "the scheme is human:// or agent://, in lower case",
    "ORG": "the org is a lower-case DNS name",
    "EMPTY_PART": "no empty path segment, query or query value",
    "TRAILING_SLASH": "no trailing slash",
    "DOT_SEGMENT": "no '.' or '..' segment and no '..' inside a name",
    "PATH": "the path is /name, /role/R or /pool/P (agents: /name)",
    "NAME": "a name, role, pool or skill is [a-z0-9][a-z0-9._-]*, at most 64 characters",
    "RESERVED_NAME": "a person is not named 'role' or 'pool'",
    "QUERY_KEY": "only role and pool addresses take a query: quorum (role, pool), skill (pool)",
    "DUPLICATE_KEY": "a query key appears at most once",
    "QUORUM": "quorum is N-of-M with 1 <= N <= M <= 32, no leading zeros",
    "NOT_HUMAN": "only a human:// address resolves to people",
}


class CardInvalid(_Reasoned, HatpError):
    """A Human Card, or a directory file of them, is refused and never used.

    ``data.reason`` is ``SIGNATURE`` (missing or bad signature), ``ISSUER``
    (signed by a key of an issuer nobody trusts, or not by the card's own
    ``issuer``) or ``SHAPE`` (not the Human Card form); ``data.card`` is the
    card's id when it is known.
    """

    code = "CARD_INVALID"


#: Every ``CARD_INVALID`` reason and the rule it enforces (docs/spec.md §17).
CARD_REASONS: dict[str, str] = {
    "SIGNATURE": "a card is a signed object whose signature verifies (CARD-SIGNED)",
    "ISSUER": "a card is signed by a key of its own issuer, a trusted one (CARD-SIGNED)",
    "SHAPE": "a card has the Human Card form (CARD-SHAPE)",
}


class RequirementBelowTotal(HatpError):
    """An approval group declares an amount below what the plan spends plus
    tolerance, or in a currency the plan does not spend (docs/spec.md §18).

    ``data.declared`` is the declared ``{value, currency}``; ``data.required``
    lists what the gateway computed, ``[{value, currency}]`` per currency.
    """

    code = "REQUIREMENT_BELOW_TOTAL"


class AskInvalid(HatpError):
    """A request to the gateway does not fit its plan; nobody was asked.

    ``data.reason`` is ``UNKNOWN_GROUP`` (the plan has no such approval group),
    ``DIGEST_MISMATCH`` (the digest sent is not the plan's), ``TERMS_INVALID``
    (holds-first terms that are not a HoldTerms; ``data.where`` says where) or
    ``TERMS_MISMATCH`` (terms of another plan).
    """

    code = "ASK_INVALID"


class QuestionInvalid(_Reasoned, HatpError):
    """A question an agent sent the gateway is refused; nobody was asked.

    ``data.reason`` is a key of :data:`QUESTION_REASONS`; ``data.where`` is a
    JSON Pointer into the question when there is one.
    """

    code = "QUESTION_INVALID"


#: Every ``QUESTION_INVALID`` reason and the rule it enforces (docs/spec.md §19).
QUESTION_REASONS: dict[str, str] = {
    "SHAPE": "a question has the Question form (members, types, lengths) [Q-SHAPE]",
    "FIELDS": "choose carries options, form a schema, text at most maxLength; no other [Q-SHAPE]",
    "DUPLICATE_OPTION": "no option is listed twice [Q-SHAPE]",
    "ADDRESS": "the address is a human:// address the gateway can route [Q-SHAPE]",
    "SCHEMA": "a form's schema is a valid JSON Schema (draft 2020-12) [Q-SCHEMA]",
    "REF": "every $ref of a form's schema is a JSON Pointer into itself ('#/…') [Q-SCHEMA]",
}


class AnswerInvalid(_Reasoned, HatpError):
    """A person's answer does not fit the question; it is refused and never signed.

    ``data.reason`` is a key of :data:`ANSWER_REASONS`; for a form answer
    ``data.where`` is the JSON Pointer of the first member that fails the
    schema. The ask stays open: the person can answer again.
    """

    code = "ANSWER_INVALID"


#: Every ``ANSWER_INVALID`` reason and the rule it enforces (docs/spec.md §19).
ANSWER_REASONS: dict[str, str] = {
    "NOT_AN_OPTION": "a choose answer is exactly one of the question's options [Q-CHOOSE]",
    "WRONG_TYPE": "a choose or a text answer is a string [Q-CHOOSE] [Q-TEXT]",
    "NOT_JSON": "an answer has a canonical JSON form (no NaN, no lone surrogate) [Q-FORM]",
    "SCHEMA": "a form answer validates against the question's schema [Q-FORM]",
    "EMPTY": "a text answer has at least one character [Q-TEXT]",
    "TOO_LONG": "a text answer has at most maxLength characters [Q-TEXT]",
    "CONTROL_CHAR": "a text answer has no control character but newline and tab [Q-TEXT]",
}


def error_from_dict(doc: Mapping[str, Any]) -> HatpError:
    """Rebuild a typed error from its wire form (the inverse of ``to_dict``)."""
    classes: dict[str, type[HatpError]] = {c.code: c for c in _all_subclasses(HatpError)}
    cls = classes.get(str(doc.get("code")), HatpError)
    data = dict(doc.get("data") or {})
    message = str(doc.get("message", ""))
    if cls is SignatureInvalid:
        reason = str(data.pop("reason", "UNKNOWN"))
        data.pop("rule", None)
        return SignatureInvalid(reason, message, **data)
    if cls in _REASON_FIRST:
        reason_first: Any = cls
        made: HatpError = reason_first(str(data.pop("reason", "UNKNOWN")), message, **data)
        return made
    return cls(message, **data)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _all_subclasses(cls: type[HatpError]) -> list[type[HatpError]]:
    found: list[type[HatpError]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


# --- Human Gateway: asks and people's responses (docs/spec.md §19) ---


class AskUnknown(HatpError):
    """No ask with this id at this gateway (``data.ask_id``)."""

    code = "ASK_UNKNOWN"


class AskConflict(HatpError):
    """An ask changed while a change to it was being made (another gateway process
    got there first); nothing was written. Read the ask again and redo the change."""

    code = "ASK_CONFLICT"


class AskWithdrawn(HatpError):
    """The question was withdrawn (its ``decideBy`` passed, or its asker withdrew it)
    before anyone answered; ``data.reason`` says why. Ask again to try once more."""

    code = "ASK_WITHDRAWN"


class ResponseRefused(_Reasoned, HatpError):
    """A person's vote, answer or decline was refused and nothing was recorded.

    ``data.reason`` is a key of :data:`RESPONSE_REASONS`; ``data.rule`` the
    requirement it enforces; ``data.ask_id`` and ``data.human`` say whose.
    """

    code = "RESPONSE_REFUSED"


#: Every ``RESPONSE_REFUSED`` reason and the rule it enforces (docs/spec.md §19).
RESPONSE_REASONS: dict[str, str] = {
    "SHAPE": "a vote has the HumanVote form (GW-VOTE-SHAPE)",
    "CLOSED": "the ask is still open: not decided, answered or withdrawn (GW-VOTE-OPEN)",
    "LATE": "the response comes, and a vote is timed, no later than decideBy (GW-VOTE-LATE)",
    "MISMATCH": "a vote names this ask, transaction, plan digest and group (GW-VOTE-BINDS)",
    "NOT_ASKED": "the person was asked and the ask still stands for them (GW-VOTE-ASKED)",
    "TWICE": "a person votes once (GW-VOTE-ONCE)",
    "SIGNATURE": "a vote is signed by an Ed25519 key on the voter's own card (GW-VOTE-SIGNED)",
    "PASSKEY": "a vote's passkey assertion verifies against the voter's card, and an approve "
    "in a group that needs one carries it (GW-PASSKEY; data.passkeyReason says which step)",
    "WRONG_KIND": "a vote goes to an approval ask, an answer to a question (GW-VOTE-SHAPE)",
}

__all__ += ["RESPONSE_REASONS", "AskConflict", "AskUnknown", "AskWithdrawn", "ResponseRefused"]


class PasskeyInvalid(_Reasoned, HatpError):
    """A passkey's WebAuthn registration, or its assertion on a vote, is refused.

    ``data.reason`` is a key of :data:`PASSKEY_REASONS`; ``data.kid`` names the
    card's passkey when it is known.
    """

    code = "PASSKEY_INVALID"


#: Every ``PASSKEY_INVALID`` reason and what a passing response shows (docs/spec.md §19).
PASSKEY_REASONS: dict[str, str] = {
    "SHAPE": "the response has the WebAuthn form: base64url members, clientDataJSON a JSON "
    "object, authenticator data that parses",
    "REQUIRED": "an approve vote in a group that needs a passkey carries a passkey assertion",
    "KEY_UNKNOWN": "the assertion names a passkey on the voter's card (kid and credentialId)",
    "KEY_AMBIGUOUS": "the credential a sign-in names is on one person's card, not several",
    "NONCE": "the assertion's nonce is the one the gateway issued this person on this ask",
    "NONCE_USED": "a nonce is used once",
    "TYPE": "clientDataJSON.type is webauthn.get (webauthn.create when registering)",
    "CHALLENGE": "the challenge is the vote's (or the registration's)",
    "ORIGIN": "the origin is one the gateway serves and fits the rpId, and not crossOrigin",
    "RP_ID": "the authenticator data's rpIdHash is the SHA-256 of the passkey's rpId",
    "USER_PRESENCE": "the authenticator saw the user (flag UP)",
    "USER_VERIFICATION": "the authenticator verified the user (flag UV)",
    "SIGN_COUNT": "the sign count is above the last one seen (or both are 0)",
    "ALGORITHM": "a registered passkey is ES256 on P-256",
    "SIGNATURE": "the ES256 signature over authenticatorData || SHA-256(clientDataJSON) verifies",
}

__all__ += ["PASSKEY_REASONS", "PasskeyInvalid"]


# --- Approval-gated tool calls (docs/spec.md §20) ---


class ApprovalRequired(HatpError):
    """A gated tool was called without an approval; the tool did not run.

    ``data.requirement`` is the :class:`~hatp.model.CallRequirement` (wire
    form) to ask the Human Gateway for: the address, the action, the call
    digest and, where they apply, the amount, the tool digest and the price.
    """

    code = "APPROVAL_REQUIRED"


class ApprovalInvalid(_Reasoned, HatpError):
    """The approval presented with a gated call was refused; the tool did not run.

    ``data.reason`` is a key of :data:`APPROVAL_REASONS`, ``data.rule`` the
    requirement it enforces, ``data.approval_id`` the approval's id when it
    could be read.
    """

    code = "APPROVAL_INVALID"


#: Every ``APPROVAL_INVALID`` reason and the rule it enforces (docs/spec.md §20).
APPROVAL_REASONS: dict[str, str] = {
    "SHAPE": "an approval has the CallApproval form (GATE-SHAPE)",
    "UNTRUSTED_GATEWAY": "it is signed by a key of a gateway the server trusts (GATE-TRUSTED)",
    "FORGED": "its signature verifies under that key, of the gateway it names (GATE-SIGNED)",
    "REJECTED": "it approves: a signed rejection is never an approval (GATE-APPROVED)",
    "OTHER_CALL": "it is for this server, this tool and these exact arguments (GATE-CALL)",
    "TOOL_CHANGED": "it binds the tool's definition as the server lists it now (GATE-TOOL)",
    "OTHER_REQUESTER": "it was asked for by the calling agent, for the same person "
    "(GATE-REQUESTER)",
    "EXPIRED": "it is inside its validity window, within the allowed clock skew (GATE-EXPIRY)",
    "PRICE_RAISED": "it caps the price at no less than the server charges (GATE-PRICE)",
    "PAYEE_CHANGED": "it pays whom the server's terms name (GATE-PAYEE)",
    "CARD": "every voter's card is signed by a directory the server trusts (GATE-CARD)",
    "VOTES": "every approver signed an approve vote on exactly these terms (GATE-VOTES)",
    "QUORUM": "enough distinct people approved for the tool's address (GATE-QUORUM)",
    "ADDRESS": "it was asked of the tool's address, and every approver fits it (GATE-ADDRESS)",
    "SELF_APPROVAL": "no approver is the person the calling agent acts for (GATE-SOD)",
    "AUTHORITY": "every approver's authority covers the amount in the arguments (GATE-AUTHORITY)",
    "USED": "it has not been used before; it works once (GATE-ONCE)",
}


class ApprovalUnknown(HatpError):
    """No used approval with this id in the store (``data.approval_id``): it was
    never claimed there, or it expired and was pruned."""

    code = "APPROVAL_UNKNOWN"


class CallInvalid(_Reasoned, HatpError):
    """A call request to the gateway, or a gated call's arguments, cannot be read.

    ``data.reason`` is a key of :data:`CALL_REASONS`; ``data.where`` a JSON
    Pointer when there is one. Nobody was asked and nothing ran.
    """

    code = "CALL_INVALID"


#: Every ``CALL_INVALID`` reason (docs/spec.md §20).
CALL_REASONS: dict[str, str] = {
    "SHAPE": "a call request has the CallRequest form (CALL-SHAPE)",
    "AMOUNT": "the amount pointer names an {value, currency} amount in the arguments, "
    "its value a non-negative decimal string or integer (CALL-AMOUNT)",
    "DEFINITION": "a tool definition names the tool called (CALL-DEFINITION)",
    "ADDRESS": "the address is a human:// address the gateway can route (CALL-SHAPE)",
}


class GateInvalid(HatpError):
    """A tool server's gate declaration is wrong (``data.tool`` names the tool); fix the
    declaration: nothing is gated until it is right."""

    code = "GATE_INVALID"


__all__ += [
    "APPROVAL_REASONS",
    "CALL_REASONS",
    "ApprovalInvalid",
    "ApprovalRequired",
    "ApprovalUnknown",
    "CallInvalid",
    "GateInvalid",
]


# --- The MCP binding (docs/spec.md §21) ---


class PeerIncompatible(_Reasoned, HatpError):
    """An MCP server does not speak hatp as it must for this use; nothing was sent.

    ``data.reason`` is a key of :data:`PEER_REASONS`; ``data.server`` names the
    server as the caller does.
    """

    code = "PEER_INCOMPATIBLE"


#: Every ``PEER_INCOMPATIBLE`` reason (docs/spec.md §21).
PEER_REASONS: dict[str, str] = {
    "NO_EXTENSION": "the server advertises the dev.hatp/hatp extension (MCP-ADVERTISED)",
    "SETTINGS": "its settings have the HatpAdvert form (MCP-ADVERTISED)",
    "VERSION": "it speaks this build's protocol version (MCP-VERSION)",
    "ROLE": "it advertises the role it is used in (MCP-ROLE)",
    "IDENTITY": "it is the participant, gateway or directory the caller named (MCP-IDENTITY)",
    "KEY_UNTRUSTED": "every key it advertises is in the caller's keyring under its own id "
    "(MCP-KEYS)",
    "METHOD": "it serves the hatp method called, with these parameters (MCP-METHOD)",
}


class PeerUnavailable(Unavailable):
    """An MCP server gave no answer (a timeout, a lost connection): not a refusal.
    The request may have taken effect; asking again is safe, every hatp request
    being idempotent. (A participant's silence is ``PARTICIPANT_UNAVAILABLE``.)"""

    code = "PEER_UNAVAILABLE"


__all__ += ["PEER_REASONS", "PeerIncompatible", "PeerUnavailable"]


# --- Approval-bound transactional writes (docs/spec.md §22) ---


class WritePlanInvalid(_Reasoned, HatpError):
    """A write plan cannot be taken as it is; nothing was stored or written.

    ``data.reason`` is a key of :data:`WRITE_PLAN_REASONS`; ``data.where`` a
    JSON Pointer into the plan when there is one.
    """

    code = "WRITE_PLAN_INVALID"


#: Every ``WRITE_PLAN_INVALID`` reason (docs/spec.md §22).
WRITE_PLAN_REASONS: dict[str, str] = {
    "SHAPE": "a write plan has the WritePlan form (WRITE-SHAPE)",
    "UNKNOWN_TYPE": "every correction is of a type on the allowlist (WRITE-ALLOWLIST)",
    "PARAMS": "every correction's params fit its type (WRITE-PARAMS)",
    "RECORD": "every record a correction touches is in a record set on the allowlist "
    "(WRITE-ALLOWLIST)",
    "SNAPSHOT": "the snapshot holds exactly the records the corrections touch, every "
    "column the set declares (WRITE-SNAPSHOT)",
    "POSTCONDITION": "the postcondition is the state the corrections make of the snapshot "
    "(WRITE-POSTCONDITION)",
    "VERSION": "a plan's versions count up from 1 and an approved version is never changed "
    "(WRITE-VERSION)",
}


class WriteDenied(HatpError):
    """The write policy denies this plan (``data.reasons``: the rules that decided)."""

    code = "WRITE_DENIED"


class WritePlanUnknown(HatpError):
    """No write plan with this id and version (``data.plan_id``, ``data.version``)."""

    code = "WRITE_PLAN_UNKNOWN"


class NotApproved(HatpError):
    """The plan version needs an approval it does not have; nothing was written."""

    code = "NOT_APPROVED"


class ApproverRefused(_Reasoned, HatpError):
    """An approval was refused (``data.reason``: a key of :data:`APPROVER_REASONS`)."""

    code = "APPROVER_REFUSED"


#: Every ``APPROVER_REFUSED`` reason (docs/spec.md §22).
APPROVER_REASONS: dict[str, str] = {
    "NOT_HUMAN": "the approver is a human principal, as authentication says (WRITE-HUMAN)",
    "SELF_APPROVAL": "the approver is not the agent that proposed the plan, nor whom it "
    "acts for (WRITE-SOD)",
    "SIGNATURE": "a gateway's approval verifies under a key of a gateway trusted here "
    "(WRITE-SIGNED)",
    "OTHER_PLAN": "a gateway's approval approves this plan version's digest (WRITE-BOUND)",
    "REJECTED": "a gateway's approval approves: a signed rejection is never an approval "
    "(WRITE-SIGNED)",
}


class DriftDetected(HatpError):
    """A target no longer matches the approved snapshot; the transaction rolled back,
    nothing was written (``data.records``: each drifted record, approved vs live)."""

    code = "DRIFT_DETECTED"


class VerificationFailed(HatpError):
    """After the corrections the postcondition did not hold; the transaction rolled back,
    nothing was written (``data.records``: expected vs found)."""

    code = "VERIFICATION_FAILED"


class ConcurrentExecution(HatpError):
    """Another worker holds this execution key under a live lease (``data.lease_until``);
    nothing was written: ask again after the lease, or for the result."""

    code = "CONCURRENT_EXECUTION"


class RecoveryRequired(HatpError):
    """A person must decide; nothing was written. A worker died holding a write's
    execution key and the live state is neither the approved snapshot nor its
    postcondition (hatp.writes); or a leased branch's undo was handed to a person
    (``data.reason`` ``ESCROWED``, HUMAN_ESCROW: hatp.lease.LeasedOperation)."""

    code = "RECOVERY_REQUIRED"


__all__ += [
    "APPROVER_REASONS",
    "WRITE_PLAN_REASONS",
    "ApproverRefused",
    "ConcurrentExecution",
    "DriftDetected",
    "NotApproved",
    "RecoveryRequired",
    "VerificationFailed",
    "WriteDenied",
    "WritePlanInvalid",
    "WritePlanUnknown",
]


# --- Compensation leases, PTCL (docs/spec.md §23) ---


class LeaseRefused(_Reasoned, HatpError):
    """A compensation lease was refused; the mutation did not run.

    ``data.reason`` is a key of :data:`LEASE_REASONS`, ``data.rule`` the rule it
    enforces, and ``data.receipt`` the verifier's signed rejection receipt
    (auditable on its own). A stale fence epoch or pre-image is reason
    ``MONOTONIC_CAS_FENCING``, which HTTP carries as 409 ``ERR_STALE_FENCE_EPOCH``.
    """

    code = "LEASE_REFUSED"


#: Every ``LEASE_REFUSED`` reason and the rule it enforces (docs/spec.md §23).
LEASE_REASONS: dict[str, str] = {
    "SHAPE": "a lease has the CompensationLease form (LEASE-SHAPE)",
    "SIGNATURE": "it is signed, by a key of the system of record it names, trusted here "
    "(LEASE-SIGNED)",
    "DIGEST_MISMATCH": "its digests bind what it says: the mutation, the inverse payload, "
    "the plan (LEASE-DIGEST)",
    "CLOCK_SKEW": "it was issued no more than 60 s ahead of the verifier's clock (LEASE-SKEW)",
    "RECOVERY_WINDOW_INEQUALITY": "t_req_ms <= t_granted_ms, and the lease has not expired "
    "(LEASE-WINDOW)",
    "MONOTONIC_CAS_FENCING": "the resource's epoch is below cas_fence_epoch, its state "
    "digest is pre_image_state_hash, and the writer's fence token, if sent, is the fence "
    "(LEASE-FENCE)",
    "FOUR_MODE_RESERVATION_MANDATE": "exactly one of the four recovery modes, with its "
    "inverse payload staged (LEASE-MODE)",
    "BINDING": "it is for this resource, and this transaction and plan when used in one "
    "(LEASE-BINDING)",
    "NOT_GRANTED": "the system of record granted it and it is unspent: not applied, voided "
    "or unknown there (LEASE-GRANTED)",
    "SHADOW_DIVERGED": "under DRY_RUN_SHADOW the mutation leaves exactly the staged shadow "
    "(LEASE-SHADOW)",
}

__all__ += ["LEASE_REASONS", "LeaseRefused"]


class LeaseRequired(HatpError):
    """A mutation of a guarded resource came without a compensation lease (HTTP 428,
    header ``Agent-Compensation-Lease``; MCP ``_meta.compensationLease``); nothing ran:
    ask the system of record for a lease, then send it with the mutation."""

    code = "LEASE_REQUIRED"


class MutationInvalid(HatpError):
    """A mutation a system of record was asked to lease or apply cannot run: an action
    it does not offer, or params the action refuses (``data.action``); nothing was written."""

    code = "MUTATION_INVALID"


class ResourceUnknown(HatpError):
    """The system of record holds no resource of that id (``data.resource``)."""

    code = "RESOURCE_UNKNOWN"


#: Every ``LEASE_UNAVAILABLE`` reason: why a system of record would not grant a lease.
LEASE_UNAVAILABLE_REASONS: dict[str, str] = {
    "MODE_UNSUPPORTED": "the system of record cannot stage this recovery mode for this "
    "mutation (an action without an inverse; no escrow desk for HUMAN_ESCROW)",
    "NOT_INVERTIBLE": "the action's inverse, tried on the state the mutation would leave, "
    "does not give back the pre-image",
}


class LeaseUnavailable(HatpError):
    """A system of record would not grant the lease asked for (``data.reason``: a key of
    :data:`LEASE_UNAVAILABLE_REASONS`); nothing was granted: ask for another mode."""

    code = "LEASE_UNAVAILABLE"


class LeaseUnknown(HatpError):
    """This system of record never granted a lease of that id (``data.lease_id``)."""

    code = "LEASE_UNKNOWN"


#: Every ``RECOVERY_REFUSED`` reason: why a lease's recovery did not run.
RECOVERY_REASONS: dict[str, str] = {
    "MOVED": "the resource changed after the leased mutation (its epoch or state is not "
    "what the mutation left): undoing it now would destroy that change; a person decides",
    "MISMATCH": "the recovery would not give back the leased pre-image",
    "WINDOW_CLOSED": "the lease's rollback window has ended; the system of record no "
    "longer promises the undo",
    "NOT_ESCROWED": "only a HUMAN_ESCROW lease whose recovery was escalated is restored by hand",
}


class RecoveryRefused(HatpError):
    """A lease's recovery was refused (``data.reason``: a key of :data:`RECOVERY_REASONS`);
    nothing was written."""

    code = "RECOVERY_REFUSED"


__all__ += [
    "LEASE_UNAVAILABLE_REASONS",
    "RECOVERY_REASONS",
    "LeaseRequired",
    "LeaseUnavailable",
    "LeaseUnknown",
    "MutationInvalid",
    "RecoveryRefused",
    "ResourceUnknown",
]


# --- HTTP carriage (hatp.http) ---


class HeaderInvalid(HatpError):
    """An HTTP header hatp reads cannot be read (``data.header`` names it, e.g.
    ``Agent-Fence-Token``, which is one decimal integer); nothing ran: send it again,
    well formed."""

    code = "HEADER_INVALID"


class Unauthenticated(HatpError):
    """The request carries no authentication this server accepts, and the action needs
    a person it can name (HTTP 401); nothing was done."""

    code = "UNAUTHENTICATED"


#: Every ``EVIDENCE_INVALID`` reason: why a client refused what a peer handed back.
EVIDENCE_REASONS: dict[str, str] = {
    "MISSING": "a success answer carries the signed evidence it owes (a commit receipt)",
    "ENCODING": "the evidence is a strict JSON object; in a header, base64url (no padding) of one",
    "SHAPE": "the evidence has its form: a CompensationLease, a lease-commit or "
    "lease-recovery receipt",
    "SIGNATURE": "it verifies against the client's keyring, signed by a key of the system "
    "of record it names",
    "MISMATCH": "it is for what was asked: this resource, mutation, mode and binding; this lease",
}


class EvidenceInvalid(_Reasoned, HatpError):
    """A lease or receipt a peer handed back failed the client's checks and is not used
    (``data.reason``: a key of :data:`EVIDENCE_REASONS`; ``data.what`` names it). Not a
    refusal by the peer: a mutation sent may have run; ask the peer for its receipt."""

    code = "EVIDENCE_INVALID"


__all__ += ["EVIDENCE_REASONS", "EvidenceInvalid", "HeaderInvalid", "Unauthenticated"]


# --- hatp serve: the JSON API of the gateway, directory and coordinator (hatp.http) ---


class BodyTooLarge(HatpError):
    """A request body is larger than the server reads (HTTP 413; ``data.limit`` in bytes);
    nothing ran: send a smaller one."""

    code = "BODY_TOO_LARGE"


class CardUnknown(HatpError):
    """The directory holds no Human Card with this id (``data.card``)."""

    code = "CARD_UNKNOWN"


class ConfigInvalid(HatpError):
    """A server's configuration cannot be used (``data.key`` names the setting, e.g.
    ``gateway.key``); nothing was started: fix that setting."""

    code = "CONFIG_INVALID"


__all__ += ["BodyTooLarge", "CardUnknown", "ConfigInvalid"]


# --- The approver page: sessions, passkey sign-in and enrolment (docs/spec.md §27) ---

#: Every ``SIGN_IN_REFUSED`` reason: the passkey reasons of an assertion, and the challenge's.
SIGN_IN_REASONS: dict[str, str] = {
    "CHALLENGE": "the assertion signs a sign-in challenge this gateway issued, unexpired and "
    "never used before",
    "KEY_UNKNOWN": "the credential is a passkey on a card of this directory",
    "KEY_AMBIGUOUS": PASSKEY_REASONS["KEY_AMBIGUOUS"],
    **{
        reason: PASSKEY_REASONS[reason]
        for reason in (
            "SHAPE",
            "TYPE",
            "ORIGIN",
            "RP_ID",
            "USER_PRESENCE",
            "USER_VERIFICATION",
            "SIGN_COUNT",
            "SIGNATURE",
        )
    },
}


class SignInRefused(_Reasoned, HatpError):
    """A passkey sign-in to the approver page is refused (``data.reason``: a key of
    :data:`SIGN_IN_REASONS`); no session was opened: sign in again from the page."""

    code = "SIGN_IN_REFUSED"


#: Every ``INVITE_INVALID`` reason: why an invitation to register a passkey is not taken.
INVITE_REASONS: dict[str, str] = {
    "UNKNOWN": "the invitation is one this directory issued",
    "EXPIRED": "it is used before it expires",
    "USED": "it registers one passkey, once",
    "CARD": "the person it names still has a card in the directory",
}


class InviteInvalid(_Reasoned, HatpError):
    """An invitation to register a passkey cannot be used (``data.reason``: a key of
    :data:`INVITE_REASONS`); nothing was registered: ask for a new invitation."""

    code = "INVITE_INVALID"


class OriginRefused(HatpError):
    """A request that changes something came from a page of another origin, or names
    none (``data.origin``); nothing was done (HTTP 403)."""

    code = "ORIGIN_REFUSED"


__all__ += [
    "INVITE_REASONS",
    "SIGN_IN_REASONS",
    "InviteInvalid",
    "OriginRefused",
    "SignInRefused",
]


# --- Who calls the JSON API (docs/spec.md §25) ---


#: Every ``DELIVERY_FAILED`` reason (docs/spec.md [OUTBOX-RETRY]).
DELIVERY_REASONS: dict[str, str] = {
    "NO_ADDRESS": "the channel holds no contact details for this person (next channel at once)",
    "CONNECT": "the receiver could not be reached (retried)",
    "TIMEOUT": "the receiver did not answer in time (retried)",
    "SERVER_ERROR": "the receiver answered 5xx or 429, or the mail server a 4xx (retried)",
    "REJECTED": "the receiver answered 4xx, or the mail server refused the message (not retried)",
}


class DeliveryFailed(_Reasoned, HatpError):
    """A push channel (webhook, e-mail) did not deliver a notice from the gateway's
    outbox. ``data.reason`` is a key of :data:`DELIVERY_REASONS`; ``data.retryable``
    says whether the outbox tries this channel again (with backoff) or moves on to the
    person's next channel. Nothing about the ask changes because of it."""

    code = "DELIVERY_FAILED"


#: Every ``WEBHOOK_INVALID`` reason (docs/spec.md [WEBHOOK-VERIFY]).
WEBHOOK_REASONS: dict[str, str] = {
    "HEADERS": "a signature header is missing or malformed",
    "STALE": "the timestamp is outside the receiver's tolerance (a replay, or a clock off)",
    "KID_UNKNOWN": "the key id is not in the receiver's keyring, or its issuer is not trusted",
    "BAD_SIGNATURE": "the signature does not verify over the timestamp and the canonical body",
    "BODY": "the body is not a notice document in canonical JSON",
}


class WebhookInvalid(_Reasoned, HatpError):
    """A webhook a receiver got does not verify as the gateway's (``data.reason``: a key
    of :data:`WEBHOOK_REASONS`): do not act on it."""

    code = "WEBHOOK_INVALID"


#: Every ``LINK_REFUSED`` reason (docs/spec.md [OUTBOX-LINK]).
LINK_REASONS: dict[str, str] = {
    "INVALID": "the link is not one this gateway signed for a notice it sent",
    "USED": "the link was opened before: it opens once",
}


class LinkRefused(_Reasoned, HatpError):
    """A single-use link to the approver page that does not open (``data.reason``: a key
    of :data:`LINK_REASONS`): sign in on the approver page to see the asks waiting."""

    code = "LINK_REFUSED"


__all__ += ["DELIVERY_REASONS", "WEBHOOK_REASONS", "DeliveryFailed", "WebhookInvalid"]
__all__ += ["LINK_REASONS", "LinkRefused"]


class CallerRefused(HatpError):
    """An agent's token was used to speak for another agent: the request names
    ``data.named`` where the token is ``data.caller``'s (HTTP 403); nothing was done."""

    code = "CALLER_REFUSED"


class NotFound(HatpError):
    """No route of the JSON API serves this path (``data.path``; HTTP 404): the routes are
    in ``/openapi.json``."""

    code = "NOT_FOUND"


class MethodNotAllowed(HatpError):
    """The path is served, but not for this method (``data.method``; ``data.allowed``
    lists the methods it takes, as the ``Allow`` header does; HTTP 405); nothing ran."""

    code = "METHOD_NOT_ALLOWED"


class UnsupportedMediaType(HatpError):
    """A request to the JSON API that is not sent as ``application/json``
    (``data.content_type``: what it named, or ``None``; HTTP 415), refused before its
    body is read, so a form another site posts never reaches an operation."""

    code = "UNSUPPORTED_MEDIA_TYPE"


__all__ += ["CallerRefused", "MethodNotAllowed", "NotFound", "UnsupportedMediaType"]


#: The errors made as ``cls(reason, message, **data)`` rather than ``cls(message, **data)``
#: (:func:`error_from_dict` rebuilds them so).
_REASON_FIRST: tuple[type[HatpError], ...] = (PlanInvalid,)
