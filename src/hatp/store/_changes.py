"""Hearing at once that another process changed an ask (PostgreSQL LISTEN/NOTIFY).

Several gateway processes may share one PostgreSQL store: a person votes
through one, while the coordinator that waits for the decision polls
another. Every write of an ask announces it in the writing transaction
(:func:`announce`, ``pg_notify`` on :data:`CHANNEL` with the ask id as
payload, which PostgreSQL delivers to every listener when, and only if, the
transaction commits). :class:`AskChanges` listens on a connection of its
own and tells its owner each ask id it hears, so a waiter wakes within
milliseconds of the commit instead of at its next recheck ([GW-RECHECK],
which stays as the safety net: a notification is not durable).

SQLite has no such thing: there a gateway keeps rechecking on its interval.
Written by hand because neither SQLAlchemy nor psycopg offers a listener that
reconnects and says what it may have missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from hatp.store._driver import DriverSession
from hatp.store._engine import Store

__all__ = ["CHANNEL", "AskChanges", "announce"]

_log = logging.getLogger(__name__)

#: The notification channel every ask write is announced on; the payload is its ask id.
CHANNEL = "hatp_ask"
#: The first wait before listening again after the connection failed; it doubles up to
#: :data:`_MOST_BACKOFF_SECONDS` while the failures go on.
_FIRST_BACKOFF_SECONDS = 0.5
_MOST_BACKOFF_SECONDS = 30.0
_NOTIFY = sa.text("SELECT pg_notify(:channel, :payload)")


def announce(session: DriverSession, ask_id: str) -> None:
    """Inside the transaction that writes ask ``ask_id``: on PostgreSQL, have every
    listening process told once it commits (nothing is told if it rolls back)."""
    if session.dialect == "postgresql":
        session.execute(_NOTIFY, {"channel": CHANNEL, "payload": ask_id})


class AskChanges:
    """Listens for the asks other processes write to ``store``, and calls ``heard`` with
    each ask id; with ``None`` after (re)connecting, when any ask may have changed
    unheard. Only a PostgreSQL store can be listened to (:meth:`available`).

    ``listening`` says whether it listens now; ``failures`` counts the times the
    listening connection failed (each is logged, and listening starts again after
    a backoff).
    """

    def __init__(self, store: Store, heard: Callable[[str | None], None]) -> None:
        self._store = store
        self._heard = heard
        self._listened = False  # since the last failure
        self.listening = False
        self.failures = 0

    @staticmethod
    def available(store: Store) -> bool:
        """Whether ``store`` announces its ask writes (PostgreSQL)."""
        return store.dialect == "postgresql"

    async def run(self, stop: asyncio.Event) -> None:
        """Listen until ``stop`` is set, connecting again whenever the connection fails."""
        backoff = _FIRST_BACKOFF_SECONDS
        while not stop.is_set():
            listening = asyncio.create_task(self._listen())
            stopping = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({listening, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                listening.cancel()
                stopping.cancel()
                await asyncio.gather(listening, stopping, return_exceptions=True)
            if stop.is_set():
                return
            error = listening.exception() if not listening.cancelled() else None
            if self._listened:  # it worked for a while: this is a new run of failures
                backoff, self._listened = _FIRST_BACKOFF_SECONDS, False
            self.failures += 1
            _log.warning(
                "listening for ask changes failed (%s); a waiter may wake only at its "
                "recheck until it listens again in %.1f s",
                "the connection closed" if error is None else type(error).__name__,
                backoff,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, _MOST_BACKOFF_SECONDS)

    async def _listen(self) -> None:
        url = make_url(self._store.url).set(drivername="postgresql")
        timeout = max(1, math.ceil(self._store.limits.connect_seconds))
        async with await psycopg.AsyncConnection.connect(
            url.render_as_string(hide_password=False), autocommit=True, connect_timeout=timeout
        ) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self.listening = self._listened = True
            try:
                # Whatever was written while nobody listened was not heard: say so.
                self._heard(None)
                async for notice in conn.notifies():
                    self._heard(notice.payload)
            finally:
                self.listening = False
