"""The person's side of an ask: what their device or channel signs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from hatp.clock import format_time
from hatp.evidence import SigningKey, sign
from hatp.version import PROTOCOL_VERSION

__all__ = ["TERMS_VOTE_PAYLOAD_MEMBERS", "VOTE_PAYLOAD_MEMBERS", "sign_vote"]

#: What a vote's payload names (a channel hands it to the person's device as it came).
VOTE_PAYLOAD_MEMBERS = frozenset({"askId", "txnId", "planDigest", "groupId", "human"})
#: What it names when the ask has hold terms (holds-first): their digest too.
TERMS_VOTE_PAYLOAD_MEMBERS = VOTE_PAYLOAD_MEMBERS | {"termsDigest"}


def sign_vote(
    key: SigningKey,
    payload: Mapping[str, Any],
    decision: Literal["approve", "reject"],
    at: datetime,
) -> dict[str, Any]:
    """Return the person's signed HumanVote on an ask: ``payload`` (the notice's
    ``askId``, ``txnId``, ``planDigest``, ``groupId`` and ``human``, and
    ``termsDigest`` when the ask has hold terms) with the decision and the
    time, signed by ``key`` (an Ed25519 key on their card).

    Raises:
        ValueError: ``payload`` does not name exactly those members, or the
            decision is neither ``approve`` nor ``reject``.
    """
    if set(payload) not in (VOTE_PAYLOAD_MEMBERS, TERMS_VOTE_PAYLOAD_MEMBERS):
        raise ValueError(
            f"a vote payload names exactly {sorted(VOTE_PAYLOAD_MEMBERS)} (and termsDigest "
            f"when the ask has terms), not {sorted(payload)}"
        )
    if decision not in ("approve", "reject"):
        raise ValueError(f"a vote is approve or reject, not {decision!r}")
    body = {
        **payload,
        "hatpVersion": PROTOCOL_VERSION,
        "kind": "human-vote",
        "decision": decision,
        "time": format_time(at),
    }
    return sign(body, key)
