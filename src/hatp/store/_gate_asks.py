"""A tool server's asks to the Human Gateway for calls that came without an approval.

A stock MCP client cannot carry an approval, so the server asks the gateway
itself to approve exactly the call it was handed (a CallRequest, docs/spec.md
§20) and remembers the ask here, keyed by the call and its requester: the
server, the call digest, the agent and the person it acts for. When the agent
calls again with the same arguments the server finds the ask, polls the
gateway for its decision and, on an approval, runs the tool once.

A key has at most one open ask ([STORE-GATE-ASK-ONE]): the ``open_key``
column holds the key while the ask is open and NULL once it is closed, under
a unique constraint, so of any number of racing :meth:`GateAsks.start` calls
exactly one inserts a row and all of them return it. Once closed, the next
ask of the key gets the next ``seq``, and so another request id: the gateway
hands back the ask it already has for a request id it has seen
([GW-ASK-ONCE]), so no seq of a key is ever used twice, not even after a
prune (:meth:`GateAsks.prune` keeps each key's newest row).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hatp.evidence import canonicalize
from hatp.store._engine import Store, insert_or_ignore
from hatp.store._schema import AnyRow, from_ms, gate_ask, to_ms

__all__ = ["GateAsk", "GateAsks"]

_log = logging.getLogger(__name__)

# A request id is a hatp.model.plan.Name: a letter, then up to 127 of [A-Za-z0-9._/-].
_NAME_MAX = 128
# A tool's name as MCP allows it (hatp.model.call.ToolName): every character fits a Name.
_TOOL_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_KEY_CHARS = 20  # of the key's hex in a request id: 80 bits
# Put before a tool name that does not start with a letter, as a Name must.
_LETTER_PREFIX = "call-"


@dataclass(frozen=True)
class GateAsk:
    """One ask as the store holds it.

    ``request_id`` is the requestId of the CallRequest the server sent the
    gateway; ``server``, ``tool``, ``call_digest``, ``agent`` and
    ``on_behalf_of`` name the call and who made it; ``seq`` counts the asks
    of that call and requester (1 for the first). ``ask_id`` is the
    gateway's id for the ask once the server recorded it. ``closed_at`` and
    ``closed_why`` stay ``None`` while the ask is open.
    """

    request_id: str
    server: str
    tool: str
    call_digest: str
    agent: str
    on_behalf_of: str
    seq: int
    ask_id: str | None
    asked_at: datetime
    decide_by: datetime
    closed_at: datetime | None = None
    closed_why: str | None = None

    @property
    def open(self) -> bool:
        """Whether the ask is still open (not closed)."""
        return self.closed_at is None

    @classmethod
    def _from_row(cls, row: AnyRow) -> GateAsk:
        return cls(
            request_id=row.request_id,
            server=row.server,
            tool=row.tool,
            call_digest=row.call_digest,
            agent=row.agent,
            on_behalf_of=row.on_behalf_of,
            seq=row.seq,
            ask_id=row.ask_id,
            asked_at=from_ms(row.asked_at),
            decide_by=from_ms(row.decide_by),
            closed_at=None if row.closed_at is None else from_ms(row.closed_at),
            closed_why=row.closed_why,
        )


class GateAsks:
    """The asks a tool server made of the Human Gateway, kept in a :class:`Store`.

    Each method is one short transaction, committed (durably, [STORE-DURABLE])
    before it returns.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        """The store the asks are kept in (async callers go through its :meth:`Store.call`)."""
        return self._store

    def current(
        self, *, server: str, call_digest: str, agent: str, on_behalf_of: str
    ) -> GateAsk | None:
        """Return the open ask for this call and requester, or ``None`` if there is none.

        Raises:
            StoreUnavailable: the database failed.
        """
        key = _call_key(server, call_digest, agent, on_behalf_of)
        with self._store.transaction() as conn:
            found = conn.execute(_OPEN, {"open_key": key}).first()
        return None if found is None else GateAsk._from_row(found)

    def get(self, request_id: str) -> GateAsk | None:
        """Return the ask sent as ``request_id``, open or closed, or ``None`` if no ask
        was started as it here (or it was pruned).

        Raises:
            StoreUnavailable: the database failed.
        """
        with self._store.transaction() as conn:
            found = conn.execute(_BY_REQUEST, {"request_id": request_id}).first()
        return None if found is None else GateAsk._from_row(found)

    def start(
        self,
        *,
        server: str,
        tool: str,
        call_digest: str,
        agent: str,
        on_behalf_of: str,
        decide_by: datetime,
        now: datetime,
    ) -> GateAsk:
        """Open the next ask for this call and requester, or return the one open.

        A new ask gets ``seq`` one above the highest the key ever had (1 for
        the first) and the request id ``{tool}-{key[:20]}-{seq}``, ``key``
        being the hex SHA-256 of the canonical JSON of ``{server, callDigest,
        agent, onBehalfOf}``: the same ask is sent with the same id after a
        restart, and every id fits a Name (the tool part is shortened to fit,
        and prefixed ``call-`` when it does not start with a letter). When an
        ask of the key is open it is returned unchanged, whatever ``tool``,
        ``decide_by`` and ``now`` say. When several starts of one key race,
        exactly one row is made and every one of them returns it
        ([STORE-GATE-ASK-ONE]).

        Raises:
            ValueError: ``decide_by`` or ``now`` is naive (has no time zone), or
                ``tool`` is not an MCP tool name (``[A-Za-z0-9_.-]{1,128}``);
                nothing was written.
            RuntimeError: the request id is another call's (their keys share the
                first 20 hex digits: only calls made to collide do); nothing was
                written.
            StoreUnavailable: the database failed; no ask was opened (or, if
                the connection broke during the commit, cannot be known to
                have been: call again, and get the one that was).
        """
        if _TOOL_RE.fullmatch(tool) is None:
            raise ValueError(
                f"tool must be an MCP tool name ([A-Za-z0-9_.-], 1 to 128 characters), "
                f"not {tool!r}: ask only about tools the server declares"
            )
        key = _call_key(server, call_digest, agent, on_behalf_of)
        values: dict[str, Any] = {
            "call_key": key,
            "server": server,
            "tool": tool,
            "call_digest": call_digest,
            "agent": agent,
            "on_behalf_of": on_behalf_of,
            "ask_id": None,
            "asked_at": _ms("now", now),
            "decide_by": _ms("decide_by", decide_by),
            "closed_at": None,
            "closed_why": None,
            "open_key": key,
        }
        insert = _insert_statement(self._store.dialect)
        while True:
            with self._store.transaction() as conn:
                found = conn.execute(_OPEN, {"open_key": key}).first()
                if found is not None:
                    return GateAsk._from_row(found)
                seq = conn.execute(_LAST_SEQ, {"call_key": key}).scalar_one() + 1
                row = {**values, "seq": seq, "request_id": _request_id(tool, key, seq)}
                inserted = conn.execute(insert, row).first()
                if inserted is not None:
                    return GateAsk._from_row(inserted)
                # Not inserted. PostgreSQL: a racing start committed this seq or an open
                # ask first (ON CONFLICT waited for it): look again, in a new transaction.
                taken = conn.execute(_BY_REQUEST, {"request_id": row["request_id"]}).first()
            if taken is not None and taken.call_key != key:
                # Another key whose hex starts alike, with the same tool part and seq:
                # 80 bits, so only calls made to collide. Looking again would loop.
                _log.error("gate ask: request id %s taken by another call", row["request_id"])
                raise RuntimeError(
                    f"the request id {row['request_id']} of this call is another call's: "
                    "their keys share the first 20 hex digits; this call cannot be asked about"
                )

    def asked(self, request_id: str, ask_id: str) -> None:
        """Record the gateway's id for the ask sent as ``request_id``.

        Recording the same id again changes nothing (a retry is harmless).

        Raises:
            ValueError: no ask was started here as ``request_id`` (or it was
                pruned), or it has another ask id recorded already: the
                gateway answers one request id with one ask, so this is a bug;
                nothing was written.
            StoreUnavailable: the database failed; nothing was written.
        """
        params = {"k_request_id": request_id, "k_ask_id": ask_id, "ask_id": ask_id}
        with self._store.transaction() as conn:
            done = conn.execute(_ASKED, params).first()
            if done is None:
                found = conn.execute(_BY_REQUEST, {"request_id": request_id}).first()
        if done is not None:
            return
        if found is None:
            raise ValueError(
                f"no gate ask was started as request {request_id} in this store (or it was "
                "pruned): start() it before recording the gateway's ask id"
            )
        if found.ask_id != ask_id:
            raise ValueError(
                f"gate ask {request_id} has ask id {found.ask_id} recorded, not {ask_id}: "
                "the gateway answers one request id with one ask"
            )

    def close(self, request_id: str, why: str, now: datetime) -> bool:
        """Close the ask sent as ``request_id``, saying why (``used``, ``rejected``,
        ``TOOL_CHANGED``, …); the next :meth:`start` of its key opens a new one.

        Returns ``True`` if this call closed it, ``False`` if it was closed
        already (its first ``why`` and time stay) or is unknown.

        Raises:
            ValueError: ``why`` is empty or ``now`` is naive; nothing was written.
            StoreUnavailable: the database failed; nothing was written.
        """
        if not why:
            raise ValueError("a gate ask is closed for a reason: why must not be empty")
        params = {
            "k_request_id": request_id,
            "closed_at": _ms("now", now),
            "closed_why": why,
            "open_key": None,
        }
        with self._store.transaction() as conn:
            return conn.execute(_CLOSE, params).first() is not None

    def prune(self, *, closed_before: datetime) -> int:
        """Delete the asks closed before ``closed_before``; return how many.

        Open asks stay, and so does the newest ask of each call and requester
        whatever its age: its ``seq`` is what the next ask of the key counts
        on, and a seq used again would send the gateway a request id it has
        seen, which returns the old ask ([GW-ASK-ONCE]).

        Raises:
            ValueError: ``closed_before`` is naive; nothing was deleted.
            StoreUnavailable: the database failed; nothing was deleted.
        """
        params = {"before": _ms("closed_before", closed_before)}
        with self._store.transaction() as conn:
            return conn.execute(_PRUNE, params).rowcount


def _call_key(server: str, call_digest: str, agent: str, on_behalf_of: str) -> str:
    """Return the hex SHA-256 of the canonical JSON of the call and its requester."""
    key = {"server": server, "callDigest": call_digest, "agent": agent, "onBehalfOf": on_behalf_of}
    return hashlib.sha256(canonicalize(key)).hexdigest()


def _request_id(tool: str, key: str, seq: int) -> str:
    """Return the request id of ask ``seq`` of ``key``: ``{tool}-{key[:20]}-{seq}``, the
    tool part shortened (and prefixed) so that it is a Name of at most 128 characters."""
    tail = f"-{key[:_KEY_CHARS]}-{seq}"
    head = tool if tool[:1].isascii() and tool[:1].isalpha() else _LETTER_PREFIX + tool
    return head[: _NAME_MAX - len(tail)] + tail


@functools.cache
def _insert_statement(dialect: str) -> sa.Insert:
    # ON CONFLICT DO NOTHING on every unique key: the primary key (a racing start took
    # this seq) and open_key (a racing start opened an ask). RETURNING names the row
    # only if this INSERT wrote it.
    return insert_or_ignore(dialect, gate_ask).returning(*gate_ask.columns)


def _ms(name: str, moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(
            f"{name} must be timezone-aware, not the naive {moment.isoformat()}: "
            "pass the clock's now() or a datetime with tzinfo=UTC"
        )
    return to_ms(moment)


# Built once and executed with parameters (see _log.py); the key's are named k_*.
_OPEN = sa.select(gate_ask).where(gate_ask.c.open_key == sa.bindparam("open_key"))
_LAST_SEQ = sa.select(sa.func.coalesce(sa.func.max(gate_ask.c.seq), 0)).where(
    gate_ask.c.call_key == sa.bindparam("call_key")
)
_BY_REQUEST = sa.select(gate_ask).where(gate_ask.c.request_id == sa.bindparam("request_id"))
_ASKED = (
    sa.update(gate_ask)
    .where(
        gate_ask.c.request_id == sa.bindparam("k_request_id"),
        sa.or_(gate_ask.c.ask_id.is_(None), gate_ask.c.ask_id == sa.bindparam("k_ask_id")),
    )
    .returning(gate_ask.c.seq)
)
_CLOSE = (
    sa.update(gate_ask)
    .where(
        gate_ask.c.request_id == sa.bindparam("k_request_id"),
        gate_ask.c.closed_at.is_(None),
    )
    .returning(gate_ask.c.seq)
)
_later = gate_ask.alias("later")
_PRUNE = sa.delete(gate_ask).where(
    gate_ask.c.closed_at < sa.bindparam("before"),
    sa.exists().where(_later.c.call_key == gate_ask.c.call_key, _later.c.seq > gate_ask.c.seq),
)
