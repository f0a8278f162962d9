"""Wire types of what people say through the Human Gateway (docs/spec.md §19).

A person's decision on a plan is a :class:`HumanVote`, signed by a key on
their own Human Card. While people decide, the gateway answers the
coordinator with a :class:`PendingVote`; when the group is decided (or its
deadline passes) it signs an :class:`~hatp.model.Approval` that carries the
votes, the voters' cards and the final routing record.

Questions beyond approve/reject are :class:`Question` (choose, form, text);
the gateway signs an :class:`Answer` bound to the question's digest only
after the answer fits the question.

Before anyone is asked, the gateway can say how long asking a group could
take at worst: a signed :class:`ChainEstimate` lists every person the ask
would reach with nobody answering (:class:`ChainLink`), in order.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from hatp.model._base import Digest, JsonObject, JsonValue, Kid, Seconds, WireModel, WireTime
from hatp.model.card import PersonAddress
from hatp.model.plan import AgentText, Name
from hatp.model.signature import Signature

__all__ = [
    "ASK_ID_PATTERN",
    "PASSKEY_NONCE_PATTERN",
    "Answer",
    "ChainEstimate",
    "ChainLink",
    "HumanVote",
    "PasskeyAssertion",
    "PendingVote",
    "Question",
    "QuestionType",
]

#: An ask id: what the gateway calls one ask of one group (or one question).
ASK_ID_PATTERN = r"^ask-[A-Za-z0-9_-]{8,64}$"


#: A passkey nonce: what the gateway issues one person on one ask (16 random bytes or more).
PASSKEY_NONCE_PATTERN = r"^[A-Za-z0-9_-]{22,128}$"
_B64URL = r"^[A-Za-z0-9_-]+$"


class PasskeyAssertion(WireModel):
    """A WebAuthn assertion made by the voter's passkey over the vote's challenge.

    The challenge is the digest of ``{txnId, groupId, planDigest, decision, nonce,
    human}`` (and ``termsDigest`` when the vote has one), its 32 bytes; ``nonce``
    is the one the gateway issued this person on this ask. ``kid`` and
    ``credentialId`` name the passkey on the voter's card; the other members are
    the authenticator's response as the browser returns it, base64url.
    """

    kid: Kid
    credential_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,1366}$", description="base64url")
    nonce: str = Field(pattern=PASSKEY_NONCE_PATTERN)
    authenticator_data: str = Field(
        pattern=_B64URL, min_length=50, max_length=4096, description="base64url"
    )
    client_data_json: str = Field(
        alias="clientDataJSON", pattern=_B64URL, max_length=8192, description="base64url"
    )
    signature: str = Field(pattern=_B64URL, max_length=256, description="ES256 (DER), base64url")


class HumanVote(WireModel):
    """One person's approve or reject of one plan, signed by a key on their own card,
    by their passkey, or both.

    ``signature`` is Ed25519 by a key on the voter's card over the vote's
    canonical JSON; ``passkey`` a WebAuthn assertion of their passkey over the
    vote's challenge (:class:`PasskeyAssertion`). A vote carries at least one;
    with both, the Ed25519 signature covers the assertion too. A group whose
    requirement asks for a passkey counts an approve only with a valid assertion.

    In holds-first mode the person approves the plan *and* the holds' terms
    (:class:`~hatp.model.HoldTerms`): the vote then names their digest as
    ``termsDigest``. Without terms the member is absent from the wire.
    """

    hatp_version: str
    kind: Literal["human-vote"]
    ask_id: str = Field(pattern=ASK_ID_PATTERN)
    txn_id: str
    plan_digest: Digest
    group_id: str
    human: PersonAddress
    decision: Literal["approve", "reject"]
    terms_digest: Digest | None = Field(
        default=None,
        description="holds-first: the digest of the HoldTerms approved with the plan; "
        "absent when the ask has no terms",
    )
    time: WireTime
    passkey: PasskeyAssertion | None = Field(
        default=None, description="the voter's passkey assertion; absent without one"
    )
    signature: Signature | None = Field(
        default=None, description="Ed25519 by a key on the voter's card; absent without one"
    )

    @model_validator(mode="after")
    def _signed_somehow(self) -> HumanVote:
        if self.signature is None and self.passkey is None:
            raise PydanticCustomError(
                "UNSIGNED",
                "a vote is signed by a key on the voter's card (signature), by their "
                "passkey (passkey), or both",
            )
        return self


class PendingVote(WireModel):
    """The gateway's signed word that an approval group is asked and not yet decided."""

    hatp_version: str
    kind: Literal["pending"]
    ask_id: str = Field(pattern=ASK_ID_PATTERN)
    txn_id: str
    plan_digest: Digest
    group_id: str
    gateway: str
    decide_by: WireTime
    time: WireTime
    signature: Signature


class QuestionType(StrEnum):
    """What kind of answer a question takes."""

    CHOOSE = "choose"
    FORM = "form"
    TEXT = "text"


class Question(WireModel):
    """A question an agent asks a person through the gateway; its digest binds the Answer.

    ``prompt`` is agent-written and shown labelled as such. ``options`` is set
    for ``choose`` only, ``schema`` (a JSON Schema, draft 2020-12) for
    ``form`` only, ``maxLength`` for ``text`` only.
    """

    hatp_version: str
    kind: Literal["question"]
    question_id: Name
    asker: str = Field(pattern=r"^agent://", max_length=512)
    on_behalf_of: PersonAddress
    address: str = Field(max_length=512, description="who may answer, as an address")
    type: QuestionType = Field(strict=False)
    prompt: AgentText
    options: list[str] | None = Field(default=None, min_length=2, max_length=64)
    form_schema: JsonObject | None = Field(default=None, alias="schema")
    max_length: int | None = Field(default=None, ge=1, le=100_000)
    decide_by: WireTime

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> Question:
        wanted = {
            QuestionType.CHOOSE: "options",
            QuestionType.FORM: "schema",
            QuestionType.TEXT: "maxLength",
        }[self.type]
        present = {
            name
            for name, value in (
                ("options", self.options),
                ("schema", self.form_schema),
                ("maxLength", self.max_length),
            )
            if value is not None
        }
        if present - {wanted} or (self.type is not QuestionType.TEXT and wanted not in present):
            raise PydanticCustomError(
                "QUESTION_FIELDS",
                "a {type} question carries {wanted} and none of the others",
                {"type": self.type.value, "wanted": wanted},
            )
        if self.options is not None and len(set(self.options)) != len(self.options):
            raise PydanticCustomError("DUPLICATE", "options lists a value twice")
        return self


class Answer(WireModel):
    """The gateway's signed account of a person's answer to a question that it checked fits."""

    hatp_version: str
    kind: Literal["answer"]
    ask_id: str = Field(pattern=ASK_ID_PATTERN)
    question_id: str
    question_digest: Digest
    type: QuestionType = Field(strict=False)
    value: JsonValue = Field(description="an option (choose), an object (form) or a string (text)")
    answered_by: PersonAddress
    declined_by: list[PersonAddress] = Field(
        default_factory=list, description="who declined before, in order"
    )
    gateway: str
    answered_at: WireTime
    signature: Signature


class ChainLink(WireModel):
    """One person an ask would reach with nobody answering, and when their wait would
    start and end, in seconds after the ask: their SLA, or the deadline if it comes
    first."""

    human: PersonAddress
    sla: int = Field(gt=0, description="the card's sla.decideSeconds")
    delegate_of: PersonAddress | None = Field(description="whose delegate they are asked as")
    starts_at: Seconds
    ends_at: Seconds

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> ChainLink:
        if self.ends_at < self.starts_at:
            raise PydanticCustomError("CHAIN_ORDER", "endsAt is before startsAt")
        return self


class ChainEstimate(WireModel):
    """The gateway's signed worst case of asking one approval group, nobody answering.

    ``chain`` lists everyone the ask would reach, in the order asked;
    ``worstSeconds`` is the latest ``endsAt`` (0 with nobody to ask): after
    it nobody is left who could approve.
    """

    hatp_version: str
    kind: Literal["chain-estimate"]
    txn_id: str
    plan_digest: Digest
    group_id: str
    gateway: str
    chain: list[ChainLink]
    worst_seconds: Seconds
    time: WireTime
    signature: Signature

    @model_validator(mode="after")
    def _worst_is_the_last_end(self) -> ChainEstimate:
        if self.worst_seconds != max((link.ends_at for link in self.chain), default=0):
            raise PydanticCustomError("CHAIN_WORST", "worstSeconds is not the latest endsAt")
        return self
