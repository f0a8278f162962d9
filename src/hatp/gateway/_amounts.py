"""The gateway's amounts: the arithmetic lives in :mod:`hatp.model.amounts`, so the
offline verifier recomputes exactly what the gateway checked."""

from hatp.model.amounts import RequiredAmount, required_amounts

__all__ = ["RequiredAmount", "required_amounts"]
