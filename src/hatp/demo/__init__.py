"""The business-trip world the demo, the crash tests and the benchmark run on.

Four real participants (an airline, a hotel, a calendar, payments), each an
ordinary tool server on :mod:`hatp.participant` with its own keys, its own
store and a ledger of every change it makes. See :mod:`hatp.demo.trip`.
"""

from hatp.demo.trip import (
    AIRLINE,
    CALENDAR,
    COORDINATOR,
    FINANCE_ADDRESS,
    GATEWAY,
    HOTEL,
    PARTICIPANT_IDS,
    PAYMENTS,
    LedgerLine,
    TripWorld,
    trip_plan,
)

__all__ = [
    "AIRLINE",
    "CALENDAR",
    "COORDINATOR",
    "FINANCE_ADDRESS",
    "GATEWAY",
    "HOTEL",
    "PARTICIPANT_IDS",
    "PAYMENTS",
    "LedgerLine",
    "TripWorld",
    "trip_plan",
]
