"""A link to a participant that loses answers: the request arrives, the reply does not.

This is what a timeout looks like from the coordinator's side when the
participant did act (the airline ticketed the seat, the response got lost).
The demo's ``in-doubt`` scenario and the tests put it in front of a real
participant; everything behind it runs for real.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import TypeVar

from hatp.clock import Clock
from hatp.errors import ParticipantUnavailable
from hatp.participant import Participant, Relay

T = TypeVar("T")


class LossyLink(Relay):
    """Forwards every call to ``inner``; drops the first ``lose[method]`` answers of each method."""

    def __init__(self, inner: Participant, lose: Mapping[str, int]) -> None:
        super().__init__(inner)
        self._lose = Counter(lose)
        self.lost: Counter[str] = Counter()

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        answer = await call()
        if self._lose[method] > 0:
            self._lose[method] -= 1
            self.lost[method] += 1
            raise ParticipantUnavailable(
                f"the answer to {method} from {self.participant_id} was lost on the way back",
                participant=self.participant_id,
            )
        return answer


class LostFor(Relay):
    """Forwards every call to ``inner``; drops every answer to ``method`` for ``seconds``
    on ``clock`` from its first call: a participant that acted at once but whose replies
    are lost for a while (the demo's ``late-answer`` scenario)."""

    def __init__(
        self, inner: Participant, clock: Clock, seconds: float, method: str = "commit"
    ) -> None:
        super().__init__(inner)
        self._clock = clock
        self._span = timedelta(seconds=seconds)
        self._method = method
        self._until: datetime | None = None
        self.lost = 0

    async def relay(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        if method == self._method and self._until is None:
            self._until = self._clock.now() + self._span
        answer = await call()
        if self._until is not None and method == self._method and self._clock.now() < self._until:
            self.lost += 1
            raise ParticipantUnavailable(
                f"the answer to {method} from {self.participant_id} was lost on the way back",
                participant=self.participant_id,
            )
        return answer
