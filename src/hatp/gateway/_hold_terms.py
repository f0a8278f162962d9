"""Holds-first mode: the terms people approve with the plan, as the gateway keeps them.

In holds-first mode the coordinator places every hold first, then asks the
approval groups to approve the plan *and* a :class:`~hatp.model.HoldTerms`:
the holds' end times from the participants' signed receipts, and the
approval deadline that fits inside them. The gateway reads the terms once,
when the ask is made ([GW-TERMS]); the ask keeps them and their digest, the
notice shows them and puts the digest in what people sign, a vote is taken
only if it names the same digest ([GW-VOTE-BINDS]) and the Approval carries
it. An ask without terms is exactly as before: no member is added anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from hatp.errors import AskInvalid
from hatp.evidence import digest
from hatp.model import HoldTerms, first_error

__all__ = ["TERMS_DIGEST", "read_hold_terms"]

#: The member that names the terms' digest in an ask's state, a notice's payload, a
#: vote and an Approval.
TERMS_DIGEST = "termsDigest"


def read_hold_terms(terms: Mapping[str, Any], plan_digest: str) -> dict[str, Any]:
    """Return the ask-state members of ``terms`` for an ask about ``plan_digest``:
    ``{"terms": <its wire form>, "termsDigest": <its digest>}`` ([GW-TERMS]).

    Raises:
        AskInvalid: ``TERMS_INVALID``: ``terms`` is not a HoldTerms;
            ``TERMS_MISMATCH``: its ``planDigest`` is not the plan's. Nobody was asked.
    """
    try:
        parsed = HoldTerms.model_validate(terms)
    except ValidationError as exc:
        path, msg = first_error(exc)
        where = "/" + path
        raise AskInvalid(
            f"the request's terms are not a HoldTerms ({where}: {msg}); send the "
            "hold-terms object of the holds placed for this plan, or none",
            reason="TERMS_INVALID",
            where=where,
        ) from None
    if parsed.plan_digest != plan_digest:
        raise AskInvalid(
            f"the request's terms are for plan {parsed.plan_digest}, not {plan_digest}; "
            "send the terms of the holds placed for the plan asked about",
            reason="TERMS_MISMATCH",
            sent=parsed.plan_digest,
            actual=plan_digest,
        )
    wire = parsed.to_wire()
    return {"terms": wire, TERMS_DIGEST: digest(wire)}
