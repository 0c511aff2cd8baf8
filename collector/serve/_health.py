"""The collector's own health as Prometheus metrics: spans received, acknowledged and refused (by
reason), exports refused as overloaded (by limit) and how long span writes take. The collector gives
its one `Health` to the ingest path, which reports to it (`IngestHealth`, collector/receive/_report.py);
`/metrics` (collector/serve/_metrics.py) exposes its registry beside the windows, `/healthz` its
overload counts.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

from meritlens.collector.receive._report import OVERLOAD_REASONS, REFUSAL_REASONS

disable_created_metrics()  # the `_created` series double every counter and no alert reads them

_WRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Health:
    """The counters of one collector, in a registry of their own (an `IngestHealth`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._received = Counter(
            "meritlens_spans_received", "Spans in export requests the collector decoded (OTLP/HTTP and gRPC).",
            registry=self.registry)
        self._refused = Counter(
            "meritlens_spans_refused", "Spans the collector refused, by reason: invalid (refused one by one in "
            "partial_success), too_many_spans, overloaded, bad_request, internal.", ["reason"], registry=self.registry)
        self._accepted = Counter(
            "meritlens_spans_accepted", "Spans acknowledged as durable (new or already stored).",
            registry=self.registry)
        self._write_seconds = Histogram(
            "meritlens_span_write_duration_seconds", "Time to make one coalesced group of export batches durable.",
            buckets=_WRITE_BUCKETS, registry=self.registry)
        self._overloaded = Counter(
            "meritlens_exports_overloaded", "Export requests answered 503 / UNAVAILABLE with a retry delay, by the "
            "limit that refused them: memory_limit (the process above the memory limiter's soft limit; refused before "
            "the body is read), in_flight_bytes, grpc_calls, write_queue, store_failed, shutting_down.", ["reason"],
            registry=self.registry)
        self._forgotten = Counter(
            "meritlens_spans_forgotten", "Stored spans removed on request (meritlens forget --yes).",
            registry=self.registry)
        for reason in REFUSAL_REASONS:  # every reason is exposed from the start, so a rate() sees its first refusal
            self._refused.labels(reason)
        for reason in OVERLOAD_REASONS:
            self._overloaded.labels(reason)

    # --- what the ingest path reports -----------------------------------------------------------
    def received(self, spans: int) -> None:
        self._received.inc(spans)

    def accepted(self, spans: int) -> None:
        self._accepted.inc(spans)

    def refused(self, reason: str, spans: int) -> None:
        self._refused.labels(reason).inc(spans)

    def overloaded(self, reason: str) -> None:
        self._overloaded.labels(reason).inc()

    def forgot(self, spans: int) -> None:
        self._forgotten.inc(spans)

    def wrote(self, seconds: float) -> None:
        self._write_seconds.observe(seconds)

    # --- what /healthz and /metrics read ----------------------------------------------------------
    def overloaded_totals(self) -> dict[str, int]:
        """Export requests refused so far, by reason, read through the counter's public samples."""
        [family] = self._overloaded.collect()
        return {s.labels["reason"]: int(s.value) for s in family.samples if s.name.endswith("_total")}

    def forgotten_total(self) -> int:
        """Stored spans removed on request so far."""
        [family] = self._forgotten.collect()
        return int(next(s.value for s in family.samples if s.name.endswith("_total")))

    def accepted_total(self) -> int:
        """Spans acknowledged so far, read through the counter's public samples."""
        [family] = self._accepted.collect()
        return int(next(s.value for s in family.samples if s.name.endswith("_total")))
