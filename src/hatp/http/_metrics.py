"""``hatp serve``'s metrics at ``GET /metrics`` (Prometheus text format) and its request log.

:class:`ServeMetrics` keeps one :class:`~prometheus_client.CollectorRegistry` per
app (never the process-wide one, so two apps in one process, or two tests, count
apart). It is the coordinator's :class:`~hatp.coordinator.TxnObserver`; the
gauges of the gateway's open asks are read from its store at each scrape, off the
event loop; recovery's counts come from :class:`~hatp.coordinator.RecoveryStats`.
It is also the observer an :class:`~hatp.gate.ApprovalGate` or a
:class:`~hatp.lease.SystemOfRecord` composed with the app may be given.
:class:`RequestLog`, a pure ASGI middleware, logs and counts every request.
Every metric is listed in docs/spec.md §25 [HTTP-METRICS].
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hatp.clock import parse_time
from hatp.coordinator import Recovery
from hatp.errors import HatpError, StoreUnavailable
from hatp.gateway import HumanGateway
from hatp.http._api import CALLER_SCOPE, ERROR_SCOPE
from hatp.model import EffectVerdict, TxnState
from hatp.store import AskRow, DecisionLog

__all__ = ["METRICS_PATH", "RequestLog", "ServeMetrics", "metrics_paths"]

#: Where the metrics are served.
METRICS_PATH = "/metrics"

_log = logging.getLogger(__name__)
_requests_log = logging.getLogger("hatp.http.requests")

#: Phase latencies run from well under a second (in-process) to the approvers' hours.
_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
_ENDED = (
    TxnState.COMMITTED,
    TxnState.ABORTED,
    TxnState.NEEDS_ATTENTION,
    TxnState.NEEDS_RECOVERY,
    TxnState.IN_DOUBT,
)


class ServeMetrics:
    """The metrics of one ``hatp serve`` app (docs/spec.md §25 [HTTP-METRICS]).

    Args:
        gateway: whose open asks the ``hatp_asks_open`` gauges count at each scrape.
        recovery: whose runs and takeovers ``hatp_recovery_*`` report.
        log: whose open transactions the ``hatp_txn_open`` gauges count at each scrape.
    """

    def __init__(
        self,
        *,
        gateway: HumanGateway | None = None,
        recovery: Recovery | None = None,
        log: DecisionLog | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._gateway = gateway
        self._log = log
        self._recovery = recovery
        self._begun_at: dict[str, datetime] = {}
        self._decided_at: dict[str, datetime] = {}
        r = self.registry
        self.txn_begun = Counter("hatp_txn_begun", "Transactions this process began", registry=r)
        self.txn_decided = Counter(
            "hatp_txn_decided", "Decisions logged, by decision", ["decision"], registry=r
        )
        self.txn_ended = Counter(
            "hatp_txn_ended",
            "Transactions ended or left open, by state (committed, aborted, needs-attention, "
            "needs-recovery, in-doubt)",
            ["state"],
            registry=r,
        )
        self.txn_seconds = Histogram(
            "hatp_txn_phase_seconds",
            "Seconds a transaction begun here spent in phase 1 (begun to decided), phase 2 "
            "(decided to ended) and whole (begun to ended), on the coordinator's clock",
            ["phase"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.txn_open = Gauge(
            "hatp_txn_open",
            "Transactions open in the log, by state (every process on it): aborting or "
            "unwinding ones wait for a participant's definite answer",
            ["state"],
            registry=r,
        )
        self.asks_open = Gauge(
            "hatp_asks_open", "The gateway's open asks, by kind", ["kind"], registry=r
        )
        self.oldest_ask = Gauge(
            "hatp_asks_oldest_open_seconds",
            "Age of the gateway's oldest open ask (0 with none)",
            registry=r,
        )
        self.outbox_notices = Gauge(
            "hatp_outbox_notices",
            "The gateway's notices over push channels in its outbox, by channel and state "
            "(pending, delivered, failed, superseded), at the scrape [OUTBOX]",
            ["channel", "state"],
            registry=r,
        )
        self.store_errors = Counter(
            "hatp_store_errors",
            "Requests and scrapes refused STORE_UNAVAILABLE, by component",
            ["component"],
            registry=r,
        )
        self.http_requests = Counter(
            "hatp_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_seconds = Histogram(
            "hatp_http_request_seconds",
            "Seconds to answer an HTTP request, by route template",
            ["route"],
            registry=r,
        )
        self.gate_checks = Counter(
            "hatp_gate_checks",
            "Gated tool calls checked, by result (passed, refused)",
            ["result"],
            registry=r,
        )
        self.gate_refusals = Counter(
            "hatp_gate_refusals",
            "Gated tool calls refused, by code and reason",
            ["code", "reason"],
            registry=r,
        )
        self.lease_decisions = Counter(
            "hatp_lease_decisions",
            "Leases granted or applied, and refused, by stage (grant, apply) and result",
            ["stage", "result"],
            registry=r,
        )
        self.lease_refusals = Counter(
            "hatp_lease_refusals",
            "Leases refused, by stage and reason (LEASE_REFUSED's data.reason, else the code)",
            ["stage", "reason"],
            registry=r,
        )
        self.txn_effects = Counter(
            "hatp_txn_effects",
            "Committed steps compared with their approved preview, by verdict (as-previewed, "
            "within-bounds, differs: committed other than approved, flagged in the record)",
            ["verdict"],
            registry=r,
        )
        self.undo_requests = Counter(
            "hatp_undo_requests",
            "Undos asked of the coordinator, by result (planned, refused) and UNDO_REFUSED "
            "reason (empty when planned)",
            ["result", "reason"],
            registry=r,
        )
        if recovery is not None:
            r.register(_RecoveryCollector(recovery))
        if gateway is not None:
            r.register(_ListenCollector(gateway))
            r.register(_OutboxCollector(gateway))

    def txn_changed(self, txn_id: str, state: TxnState, at: datetime) -> None:
        """Count a transaction's change of state, and time its phases
        (:class:`~hatp.coordinator.TxnObserver`)."""
        if state is TxnState.ACTIVE:
            self.txn_begun.inc()
            self._begun_at[txn_id] = at
            return
        begun = self._begun_at.get(txn_id)
        if state in (TxnState.COMMITTING, TxnState.ABORTING):
            self.txn_decided.labels("commit" if state is TxnState.COMMITTING else "abort").inc()
            self._decided_at[txn_id] = at
            if begun is not None:
                self.txn_seconds.labels("phase1").observe((at - begun).total_seconds())
            return
        if state not in _ENDED:
            return
        self.txn_ended.labels(state.value).inc()
        decided = self._decided_at.pop(txn_id, None)
        self._begun_at.pop(txn_id, None)
        if decided is not None:
            self.txn_seconds.labels("phase2").observe((at - decided).total_seconds())
        if begun is not None:
            self.txn_seconds.labels("whole").observe((at - begun).total_seconds())

    def effect_judged(self, txn_id: str, branch_id: str, verdict: EffectVerdict) -> None:
        """Count a committed step by how it compared with its preview
        (:class:`~hatp.coordinator.EffectObserver`)."""
        self.txn_effects.labels(verdict.value).inc()

    def undo_asked(self, txn_id: str, refused: str | None) -> None:
        """Count an undo planned or refused (:class:`~hatp.coordinator.UndoObserver`)."""
        self.undo_requests.labels("planned" if refused is None else "refused", refused or "").inc()

    def gate_checked(self, tool: str, refused: HatpError | None) -> None:
        """Count a gated call checked (:class:`~hatp.gate.GateObserver`)."""
        self.gate_checks.labels("passed" if refused is None else "refused").inc()
        if refused is not None:
            self.gate_refusals.labels(refused.code, _reason(refused, "")).inc()

    def lease_decided(self, stage: str, refused: HatpError | None) -> None:
        """Count a lease granted, applied or refused (:class:`~hatp.lease.LeaseObserver`)."""
        self.lease_decisions.labels(stage, "passed" if refused is None else "refused").inc()
        if refused is not None:
            self.lease_refusals.labels(stage, _reason(refused, refused.code)).inc()

    def request_answered(
        self, method: str, route: str, status: int, seconds: float, error: str | None
    ) -> None:
        """Count one HTTP request (and a ``STORE_UNAVAILABLE`` refusal by component)."""
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_seconds.labels(route).observe(seconds)
        if error == StoreUnavailable.code:
            self.store_errors.labels(_component(route)).inc()

    async def render(self) -> bytes:
        """The metrics in the Prometheus text format, the gateway's asks read now."""
        if self._gateway is not None:
            asks = self._gateway.asks
            try:
                rows = await asks.store.call(asks.open_asks)
            except StoreUnavailable as error:
                self.store_errors.labels("gateway").inc()
                _log.warning("metrics: the open asks could not be read: %s", error.message)
            else:
                self._count_asks(rows, self._gateway.clock.now())
            outbox = self._gateway.outbox.outbox
            try:
                counts = await outbox.store.call(outbox.counts)
            except StoreUnavailable as error:
                self.store_errors.labels("gateway").inc()
                _log.warning("metrics: the outbox could not be read: %s", error.message)
            else:
                for (channel, state), count in counts.items():
                    self.outbox_notices.labels(channel, state).set(count)
        if self._log is not None:
            log = self._log
            try:
                open_now = await log.store.call(log.open_by_state)
            except StoreUnavailable as error:
                self.store_errors.labels("coordinator").inc()
                _log.warning("metrics: the open transactions could not be read: %s", error.message)
            else:
                for state in TxnState:
                    if not state.finished:
                        self.txn_open.labels(state.value).set(open_now.get(state, 0))
        return generate_latest(self.registry)

    def _count_asks(self, rows: Iterable[AskRow], now: datetime) -> None:
        by_kind: dict[str, int] = {}
        oldest: datetime | None = None
        for row in rows:
            by_kind[row.kind.value] = by_kind.get(row.kind.value, 0) + 1
            asked = row.doc.get("askedAt")
            if isinstance(asked, str):
                moment = parse_time(asked)
                oldest = moment if oldest is None else min(oldest, moment)
        for kind in ("approval", "question", "call"):
            self.asks_open.labels(kind).set(by_kind.get(kind, 0))
        self.oldest_ask.set(0 if oldest is None else max(0.0, (now - oldest).total_seconds()))

    def route(self) -> Route:
        """``GET /metrics``."""

        async def metrics(_: Request) -> Response:
            return Response(await self.render(), media_type=CONTENT_TYPE_LATEST)

        return Route(METRICS_PATH, metrics, methods=["GET"], name="hatp-metrics")


class _RecoveryCollector:
    """``hatp_recovery_runs_total`` and ``hatp_recovery_takeovers_total`` (and failures),
    read from :attr:`Recovery.stats` at each scrape."""

    def __init__(self, recovery: Recovery) -> None:
        self._recovery = recovery

    def collect(self) -> Iterator[Metric]:
        stats = self._recovery.stats
        yield CounterMetricFamily("hatp_recovery_runs", "Turns of recovery", value=stats.runs)
        yield CounterMetricFamily(
            "hatp_recovery_takeovers",
            "Transactions recovery took over from an owner whose lease had ended",
            value=stats.takeovers,
        )
        yield CounterMetricFamily(
            "hatp_recovery_failures",
            "Recovery turns or takeovers that failed",
            value=stats.failures,
        )


class _ListenCollector:
    """``hatp_gateway_listen_failures_total``, read from
    :attr:`HumanGateway.listen_failures` at each scrape [GW-LISTEN]."""

    def __init__(self, gateway: HumanGateway) -> None:
        self._gateway = gateway

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "hatp_gateway_listen_failures",
            "Times listening for other processes' ask writes failed (PostgreSQL); until it "
            "listens again, a vote taken elsewhere is seen at the next recheck",
            value=self._gateway.listen_failures,
        )


def _reason(error: HatpError, otherwise: str) -> str:
    reason = error.data.get("reason")
    return reason if isinstance(reason, str) else otherwise


def _component(route: str) -> str:
    """Which part of the server a route template belongs to: its first segment."""
    head = route.strip("/").split("/", 1)[0]
    return head if head in ("gateway", "coordinator", "directory", "approve") else "server"


class RequestLog:
    """Logs each request (method, path without its query, route, status, duration,
    caller: never a token or a cookie) on ``hatp.http.requests``, and counts it in
    ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: ServeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        try:

            async def sending(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            route = _template(scope)
            error = scope.get(ERROR_SCOPE)
            self.metrics.request_answered(scope["method"], route, status, seconds, error)
            extra: dict[str, Any] = {
                "method": scope["method"],
                "path": scope["path"],
                "route": route,
                "status": status,
                "durationMs": round(seconds * 1000, 1),
                "caller": scope.get(CALLER_SCOPE),
                "code": error,
            }
            _requests_log.info(
                "%s %s %d %.1f ms", scope["method"], scope["path"], status, seconds * 1000,
                extra=extra,
            )  # fmt: skip


def _template(scope: Scope) -> str:
    """The template of the route that answered (``/coordinator/txns/{txnId}``), so the
    metric's labels stay few; ``unrouted`` when none did."""
    route = scope.get("route")
    if route is None:
        return "unrouted"
    path = str(getattr(route, "path", "unrouted"))
    if isinstance(route, Route):
        return str(scope.get("root_path", "")) + path
    return path


def metrics_paths() -> dict[str, Any]:
    """The OpenAPI path item of ``/metrics``."""
    summary = "This server's metrics in the Prometheus text format (docs/spec.md §25)"
    return {
        METRICS_PATH: {
            "get": {
                "operationId": "getMetrics",
                "summary": summary,
                "tags": ["meta"],
                "responses": {
                    "200": {
                        "description": summary,
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        }
    }


class _OutboxCollector:
    """``hatp_outbox_sends_total`` by channel and result, read from this process's
    sender (:attr:`HumanGateway.outbox`) at each scrape [OUTBOX]."""

    def __init__(self, gateway: HumanGateway) -> None:
        self._gateway = gateway

    def collect(self) -> Iterator[Metric]:
        stats = self._gateway.outbox.stats
        family = CounterMetricFamily(
            "hatp_outbox_sends",
            "Attempts this process made to send the outbox's notices, by channel and result "
            "(delivered, retried: failed and due again, failed: for good, the person's next "
            "channel asked; superseded: no longer needed when due)",
            labels=["channel", "result"],
        )
        for result, counts in (
            ("delivered", stats.delivered),
            ("retried", stats.retried),
            ("failed", stats.failed),
            ("superseded", stats.superseded),
        ):
            for channel, count in sorted(counts.items()):
                family.add_metric([channel, result], count)
        yield family
