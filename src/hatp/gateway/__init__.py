"""The Human Gateway: it works out what an approval must cover and routes it to people.

:func:`required_amounts` computes what an approval group must cover from
the plan itself; :func:`route` resolves the group's address against those
amounts and signs a routing record of everyone the address matched
(docs/spec.md §18).
"""

from hatp.gateway._amounts import RequiredAmount, required_amounts
from hatp.gateway._routing import Routed, route

__all__ = ["RequiredAmount", "Routed", "required_amounts", "route"]
