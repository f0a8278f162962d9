"""The gateway's amounts: the arithmetic lives in :mod:`hatp.model.amounts`, so the
offline verifier recomputes exactly what the gateway checked; :func:`format_amount`
writes an amount the way every view shows it."""

from decimal import Decimal

from hatp.model.amounts import RequiredAmount, required_amounts

__all__ = ["RequiredAmount", "format_amount", "required_amounts"]


def format_amount(value: Decimal, currency: str) -> str:
    """Return ``value`` with thousands separators and the currency code after it.

    Trailing zeros of the fraction are dropped, keeping at least two
    decimals when there is a fraction; no digit that matters is ever
    rounded away: ``1020.00`` → ``"1,020 USD"``, ``1234.5`` → ``"1,234.50 USD"``,
    ``0.125`` → ``"0.125 USD"``.
    """
    # Text, not arithmetic: Decimal arithmetic rounds to 28 digits, and a
    # plan amount may have 36.
    digits = format(value, "f")
    sign = "-" if digits.startswith("-") else ""
    whole, _, fraction = digits.removeprefix("-").partition(".")
    fraction = fraction.rstrip("0")
    text = f"{int(whole):,}" + (f".{fraction.ljust(2, '0')}" if fraction else "")
    return f"{sign}{text} {currency}"
