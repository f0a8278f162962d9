"""Verified Human Cards, remembered: the same approvers' cards come with call after call.

A card is verified against the trusted directories once; afterwards a card
equal, member for member, to one already verified is taken as verified. The
key is the card's signature, the check is equality with the verified copy,
so a changed card is never taken for the verified one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

from hatp.directory import verify_card
from hatp.evidence import Keyring, card_keyring, copy_json
from hatp.model import HumanCard

__all__ = ["VerifiedCard", "VerifiedCards"]


class VerifiedCard(NamedTuple):
    """A verified card, and the keyring of the Ed25519 keys on it (its votes verify under it)."""

    card: HumanCard
    keys: Keyring

    @classmethod
    def of(cls, card: HumanCard) -> VerifiedCard:
        return cls(card, card_keyring(card))


class VerifiedCards:
    """Cards verified under one keyring of trusted directories, the latest ``size`` kept."""

    def __init__(self, directories: Keyring, size: int = 1024) -> None:
        self._directories = directories
        self._size = size
        self._seen: OrderedDict[tuple[str, str], tuple[dict[str, Any], VerifiedCard]] = (
            OrderedDict()
        )

    def verify(self, doc: Any) -> VerifiedCard:
        """Return the verified card ``doc`` is, with its keys.

        Raises:
            CardInvalid: as :func:`hatp.directory.verify_card`.
        """
        key = _key(doc)
        if key is not None and (seen := self._seen.get(key)) is not None and seen[0] == doc:
            self._seen.move_to_end(key)
            return seen[1]
        card = VerifiedCard.of(verify_card(doc, self._directories))
        if key is not None:
            self._seen[key] = (copy_json(dict(doc)), card)
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return card


def _key(doc: Any) -> tuple[str, str] | None:
    signature = doc.get("signature") if isinstance(doc, Mapping) else None
    if isinstance(signature, Mapping):
        kid, sig = signature.get("kid"), signature.get("sig")
        if isinstance(kid, str) and isinstance(sig, str):
            return kid, sig
    return None
