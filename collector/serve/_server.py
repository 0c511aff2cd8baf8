"""The collector process: store, pipeline and both receivers with one start()/shutdown() lifecycle."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl

import pyarrow as pa
from aiohttp import web

from meritlens.collector._settings import (
    DEFAULT_WINDOW_GATHER_S,
    SHUTDOWN_WINDOW_ROWS,
    TARGET_FALLBACK_OFF,
    ServerSettings,
    address_file,
    is_loopback,
)
from meritlens.collector.process._normalize import NATIVE_SCANNER
from meritlens.collector.process._options import NormalizeOptions, check_target_fallback
from meritlens.collector.process._otlp import SpanLimits
from meritlens.collector.process._redact import SpanRedactor
from meritlens.collector.receive._auth import BearerToken
from meritlens.collector.receive._http import HttpReceiver
from meritlens.collector.receive._ingest import InflightBudget, Ingest
from meritlens.collector.receive._memory import MemoryLimiter
from meritlens.collector.receive._pipeline import IngestPipeline
from meritlens.collector.serve._alerts_api import AlertsEndpoint
from meritlens.collector.serve._api import ApiRoutes
from meritlens.collector.serve._dashboard import Dashboard
from meritlens.collector.serve._forget import ForgetEndpoint
from meritlens.collector.serve._health import Health
from meritlens.collector.serve._metrics import MetricsEndpoint
from meritlens.collector.serve._ranges import RangeWindowsEndpoint
from meritlens.collector.serve._regressions import Regressions, install_without_buckets
from meritlens.collector.store._retention import Retention
from meritlens.collector.store._store import SpanStore
from meritlens.collector.windows._processor import WindowProcessor
from meritlens.instrumentation.pricing import price_call

log = logging.getLogger("meritlens.collector")

_CLOSE_WAIT_S = 0.5


def normalize_options(settings: ServerSettings) -> NormalizeOptions:
    """The normalizer's options from the server settings (raises ValueError on a bad template)."""
    fallback = settings.target_fallback
    if fallback.strip().lower() == TARGET_FALLBACK_OFF:
        return NormalizeOptions(target_fallback=None, price=price_call)
    return NormalizeOptions(target_fallback=check_target_fallback(fallback), price=price_call)


class Collector:
    """A running collector: `await start()`, then `await shutdown()` (drains and commits)."""

    def __init__(self, settings: ServerSettings):
        settings.validate()
        self.settings = settings
        budget = settings.memory_budget()
        if settings.lake:  # spans go to Parquet segments of a lake shared with other collectors
            from meritlens.collector.lake._store import LakeStore

            self.store = LakeStore(settings.lake, settings.collector_id, stage_move_s=settings.stage_s)
        else:
            self.store = SpanStore(settings.db, memory_limit_bytes=budget.duckdb,
                                   checkpoint_wal_bytes=settings.checkpoint_wal_bytes, db_threads=settings.db_threads,
                                   span_index_bytes=budget.span_index, staging=settings.stage_s > 0,
                                   stage_move_s=settings.stage_s, archive=settings.archive_location())
        self.windows: WindowProcessor | None = None
        self.retention: Retention | None = None
        self.health = Health()
        # DuckDB keeps up to a checkpoint's worth of rows in memory beside the rows of the INSERT under way
        move_bytes = max(1, (budget.duckdb - settings.checkpoint_wal_bytes) // 2)
        self.pipeline = IngestPipeline(self.store, max_pending_batches=settings.max_pending_batches,
                                       move_bytes=move_bytes, health=self.health)
        self.redactor = SpanRedactor.from_file(settings.redact) if settings.redact else None
        self.budget = InflightBudget(budget.in_flight)
        self.limiter = MemoryLimiter(settings.memory_limiter(), in_flight=lambda: self.budget.used)
        self.ingest = Ingest(
            self.pipeline, self.budget,
            max_spans_per_request=settings.max_spans_per_request,
            limits=SpanLimits(settings.max_attributes, settings.max_attribute_bytes),
            normalize_options=normalize_options(settings), limiter=self.limiter, health=self.health,
            redactor=self.redactor,
        )
        self.token = BearerToken(settings.bearer_token())
        self.readiness = None  # the dashboard's ReadinessProvider, from `serve --profile`
        self.rules = []  # the profiles' [[alerts]] rules
        if settings.profiles:
            from meritlens.collector.alerts._watch import watched_rules
            from meritlens.collector.serve._profiles_view import ProfileReadiness

            self.readiness = ProfileReadiness.load(self.store, settings.profiles)
            self.rules = watched_rules(self.readiness.profiles)
        self.alerts = None  # the AlertWatcher of the profiles' [[alerts]] rules
        self._runner: web.AppRunner | None = None
        self._http: HttpReceiver | None = None
        self._grpc_server = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._started = False  # only a collector that started says it stopped

    async def start(self) -> None:
        """Open the store, recompute windows, start both receivers; on failure close what was opened."""
        try:
            await self._start()
        except BaseException:
            await self.shutdown()
            raise

    async def _start(self) -> None:
        s = self.settings
        budget = s.memory_budget()
        if not NATIVE_SCANNER:
            log.warning("the native span scanner (collector/process/_spanscan.c) is not built: spans are normalized"
                        " by the Python walk, ~4x slower; reinstall with a C compiler present (pip install -e .)")
        self.store.start()
        if s.lake:  # the lake's windows come from `meritlens lake windows` (Spark)
            log.info("writing span segments to %s as %s", s.lake, self.store.writer.collector_id)
        else:
            # staged rows reach DuckDB a row group at a time, already gathered: a pass follows each move
            self.windows = WindowProcessor(self.store, key_filter_bytes=budget.key_filter,
                                           window_memory_bytes=budget.window_state,
                                           quantile_error=s.quantile_error,
                                           gather_s=0.0 if s.stage_s > 0 else DEFAULT_WINDOW_GATHER_S)
            keys, resumed = self.windows.open_windows()
            self.windows.start()
            log.info("opened %s; windows of %d keys %s", s.db, keys, "taken up" if resumed else "recomputed")
            if s.retain_s is not None:
                self.retention = Retention(self.store, s.retain_s)
                self.retention.start()
                log.info("spans older than %g s move to %s", s.retain_s, self.store.archive_state.location)
            if self.rules:
                from meritlens.collector.alerts._watch import AlertWatcher

                self.alerts = AlertWatcher(self.store, self.windows, self.rules, s.alert_config(),
                                           base_url=lambda: self.url)
        if s.lake and self.rules:
            log.warning("the profiles' alert rules are not evaluated with --lake: a single-node collector (--db)"
                        " evaluates them")
        window_lag = self.windows.window_lag if self.windows else (lambda: (0, 0))
        self.pipeline.start()
        self.limiter.start()
        log.info("memory limit %dMiB, exports refused above %dMiB: requests in flight %dMiB, DuckDB %dMiB, window"
                 " state %dMiB, key locator %dMiB, key filter %dMiB, the process %dMiB", budget.limit >> 20,
                 self.limiter.config.soft_limit >> 20, budget.in_flight >> 20, budget.duckdb >> 20,
                 budget.window_state >> 20, budget.span_index >> 20, budget.key_filter >> 20, budget.process >> 20)
        self._http = HttpReceiver(self.ingest, max_body_bytes=s.max_body_bytes, token=self.token)
        app = self._http.app()
        ApiRoutes(self.store, self.ingest, self.health, sql_max_rows=s.sql_max_rows, sql_timeout_s=s.sql_timeout_s,
                  window_lag=window_lag).install(app)
        AlertsEndpoint(self.alerts, lake=bool(s.lake)).install(app)
        regressions = None  # from the windows by time, which a lake's collectors do not keep
        if self.windows is not None:
            RangeWindowsEndpoint(self.windows, self.store.db_name).install(app)
            regressions = Regressions(self.windows, self.readiness.profiles if self.readiness else [])
            regressions.install(app)
            ForgetEndpoint(self.windows, self.health).install(app)
        else:
            install_without_buckets(app)
        current = regressions.current if regressions else None
        Dashboard(self.store, readiness=self.readiness, token=self.token, regressions=current,
                  redactor=self.redactor).install(app)
        MetricsEndpoint(self.store, self.health, readiness=self.readiness, window_lag=window_lag,
                        limiter=self.limiter, alerts=self.alerts, regressions=current,
                        redactor=self.redactor, memory_parts=self._memory_parts).install(app)
        # `_stop_http` waits for the requests in progress itself; what aiohttp then waits for is answers
        # already being written
        self._runner = web.AppRunner(app, auto_decompress=False, access_log=None, shutdown_timeout=_CLOSE_WAIT_S)
        await self._runner.setup()
        ssl_context = None
        if s.tls:
            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(s.tls_cert, s.tls_key)
        site = web.TCPSite(self._runner, s.host, s.http_port, ssl_context=ssl_context)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]
        log.info("OTLP/HTTP listening on %s", self.url)
        if self.alerts is not None:  # after the port is known: the events link to this collector's pages
            self.alerts.start()
        if s.grpc_enabled:
            from meritlens.collector.receive import _grpc
              # imported only when enabled: gRPC's library is ~7 MiB resident

            self._grpc_server = _grpc.create_server(
                _grpc.TraceServiceReceiver(self.ingest, self.token, max_concurrent_rpcs=s.grpc_max_concurrent_rpcs,
                                           max_message_bytes=s.max_body_bytes),
                max_message_bytes=s.max_body_bytes,
            )
            cert = key = None
            if s.tls:
                with open(s.tls_cert, "rb") as fh:
                    cert = fh.read()
                with open(s.tls_key, "rb") as fh:
                    key = fh.read()
            self.grpc_port = _grpc.bind(self._grpc_server, s.host, s.grpc_port, cert=cert, key=key)
            await self._grpc_server.start()
            log.info("OTLP/gRPC listening on %s", self.grpc_address)
        if not is_loopback(s.host) and not self.token.required:
            log.warning(
                "listening on %s without a token: anyone who can reach it can send spans and read every"
                " stored span through SQL; set --token-file (or %s)", s.host, "MERITLENS_TOKEN",
            )
        self._started = True
        if s.lake:  # commands find a lake by its path; no one collector answers for it
            return
        try:
            with open(address_file(s.db), "w", encoding="utf-8") as fh:
                fh.write(self.url + "\n")
        except OSError:
            log.warning("could not write %s; queries by --db need --url", address_file(s.db))

    def _memory_parts(self) -> dict[str, int]:
        if not self.windows:  # a lake collector has none of these parts
            return {}
        return {**self.store.memory_parts(), "window_state": self.windows.cache.nbytes,
                "seen_keys": self.windows.delta.seen.nbytes}

    def _client_host(self) -> str:
        host = self.settings.host
        if host in ("0.0.0.0", "::", ""):
            return "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    @property
    def url(self) -> str:
        scheme = "https" if self.settings.tls else "http"
        return f"{scheme}://{self._client_host()}:{self.http_port}"

    @property
    def grpc_address(self) -> str | None:
        if self.grpc_port is None:
            return None
        return f"{self._client_host()}:{self.grpc_port}"

    async def _stop_http(self, grace: float) -> None:
        for site in list(self._runner.sites):
            await site.stop()  # no new connections
        if self._http is not None:
            await self._http.drain(grace)
        await self._runner.cleanup()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish (up to half the shutdown timeout), store what is
        durable, save the windows, close. Acknowledged spans that are not windowed yet stay durable (the
        staging log, the stored spans) and the next start takes them up."""
        grace = self.settings.shutdown_timeout_s / 2
        loop = asyncio.get_running_loop()
        if self.windows is not None:
            self.windows.close_queue()  # a write waiting for the windows to catch up goes ahead
        stops = []
        if self._grpc_server is not None:
            stops.append(self._grpc_server.stop(grace))
        if self._runner is not None:
            stops.append(self._stop_http(grace))
        await asyncio.gather(*stops)
        self._grpc_server = None
        self._runner = None
        self.limiter.shutdown()
        if self.retention is not None:
            await loop.run_in_executor(None, self.retention.shutdown)
        await loop.run_in_executor(None, self.pipeline.shutdown)
        self.ingest.close()
        if self.alerts is not None:
            await loop.run_in_executor(None, self.alerts.shutdown)
        if self.windows is not None:
            # a small backlog is windowed now; a larger one stays in `spans` for the next start (a stop
            # stays within its timeout at any load)
            small = self.windows.queue.lag()[1] <= SHUTDOWN_WINDOW_ROWS
            await loop.run_in_executor(None, self.windows.shutdown, small)
        self.store.shutdown()
        if self.http_port is not None and not self.settings.lake:
            try:
                os.remove(address_file(self.settings.db))
            except OSError:
                pass
        if self._started:
            log.info("stopped; every acknowledged span is committed to %s", self.settings.lake or self.settings.db)


def serve(settings: ServerSettings) -> None:
    """Run a collector until SIGINT or SIGTERM, then drain and exit."""

    # Arrow's default pool (mimalloc) keeps the pages it freed for reuse: under large spans 130-150 MiB
    # beyond its live bytes, which the memory limiter counts; the system allocator gives them back.
    pa.set_memory_pool(pa.system_memory_pool())

    async def main() -> None:
        collector = Collector(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await collector.start()
        grpc = collector.grpc_address or "off (--no-grpc)"
        print(f"meritlens collector storing into {settings.lake or settings.db}\n"
              f"  OTLP/HTTP  {collector.url}/v1/traces\n"
              f"  OTLP/gRPC  {grpc}\n"
              f"  dashboard  {collector.url}/", flush=True)
        await stop.wait()
        log.info("stopping: draining in-flight requests")
        await collector.shutdown()

    asyncio.run(main())
